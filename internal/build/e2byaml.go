package build

// The E2B template builder's steps as a YAML file, for `moat template build NAME --steps
// FILE` (docs/e2b-templates.md): the same methods as the SDK's Template() builder, made
// into the same steps the SDK sends (aptInstall, npmInstall, gitClone and the ready checks
// become the commands the SDK makes of them), with COPY reading from a local context
// directory instead of uploads. Pure.

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/moatdev/moat/internal/errdefs"
)

// StepsFile is the YAML document.
type StepsFile struct {
	FromTemplate string     `yaml:"fromTemplate"`
	FromImage    string     `yaml:"fromImage"`
	Steps        []YAMLStep `yaml:"steps"`
	Start        *YAMLStart `yaml:"start"`
	CPUCount     int        `yaml:"cpuCount"`
	MemoryMB     int        `yaml:"memoryMB"`
}

// YAMLStep is one step: exactly one of its fields.
type YAMLStep struct {
	Run     *YAMLRun          `yaml:"run"`
	Copy    *YAMLCopy         `yaml:"copy"`
	Env     map[string]string `yaml:"env"`
	Workdir string            `yaml:"workdir"`
	User    string            `yaml:"user"`
	Apt     []string          `yaml:"apt"`
	Npm     *YAMLNpm          `yaml:"npm"`
	Pip     []string          `yaml:"pip"`
	Git     *YAMLGit          `yaml:"git"`
}

// YAMLRun is `run: CMD` or `run: {cmd: CMD, user: USER}`.
type YAMLRun struct {
	Cmd  string `yaml:"cmd"`
	User string `yaml:"user"`
}

// UnmarshalYAML takes the short form, a string.
func (r *YAMLRun) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		r.Cmd = n.Value
		return nil
	}
	type plain YAMLRun
	return n.Decode((*plain)(r))
}

// YAMLCopy is copy(src, dest, {user, mode}).
type YAMLCopy struct {
	Src  string `yaml:"src"`
	Dest string `yaml:"dest"`
	User string `yaml:"user"`
	Mode string `yaml:"mode"`
}

// YAMLNpm is npmInstall(packages, {g, dev}).
type YAMLNpm struct {
	Packages []string `yaml:"packages"`
	Global   bool     `yaml:"g"`
	Dev      bool     `yaml:"dev"`
}

// YAMLGit is gitClone(url, path, {branch, depth, user}).
type YAMLGit struct {
	URL    string `yaml:"url"`
	Path   string `yaml:"path"`
	Branch string `yaml:"branch"`
	Depth  int    `yaml:"depth"`
	User   string `yaml:"user"`
}

// YAMLStart is setStartCmd(cmd, ready): ready is one of port, url (status, default 200),
// process, file, timeoutMs, or cmd (a shell command of its own).
type YAMLStart struct {
	Cmd   string `yaml:"cmd"`
	Ready struct {
		Port      int    `yaml:"port"`
		URL       string `yaml:"url"`
		Status    int    `yaml:"status"`
		Process   string `yaml:"process"`
		File      string `yaml:"file"`
		TimeoutMs int    `yaml:"timeoutMs"`
		Cmd       string `yaml:"cmd"`
	} `yaml:"ready"`
}

// maxStepsFile bounds the input of ParseStepsFile.
const maxStepsFile = 512 << 10

// ParseStepsFile parses a steps file into the E2B template it stands for, whose COPY
// steps read from a local context directory (Translate gives context-relative sources).
// Errors wrap errdefs.ErrInvalidArgument and name the step.
func ParseStepsFile(data []byte) (*E2BTemplate, error) {
	if len(data) > maxStepsFile {
		return nil, fmt.Errorf("steps file is larger than %d bytes: %w", maxStepsFile, errdefs.ErrInvalidArgument)
	}
	var f StepsFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("steps file: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	t := &E2BTemplate{FromTemplate: f.FromTemplate, FromImage: f.FromImage, CPUCount: f.CPUCount, MemoryMB: f.MemoryMB, local: true}
	if f.CPUCount < 0 || f.MemoryMB < 0 {
		return nil, fmt.Errorf("cpuCount and memoryMB must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	for i, s := range f.Steps {
		st, err := s.e2b()
		if err != nil {
			return nil, fmt.Errorf("steps file, step %d: %w", i+1, err)
		}
		t.Steps = append(t.Steps, st)
	}
	if f.Start != nil {
		t.StartCmd = f.Start.Cmd
		t.ReadyCmd = f.Start.readyCmd()
		if t.StartCmd == "" && t.ReadyCmd == "" {
			return nil, fmt.Errorf("steps file: start needs cmd or ready: %w", errdefs.ErrInvalidArgument)
		}
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("steps file: %w", err)
	}
	return t, nil
}

func run(cmd, user string) E2BStep {
	args := []string{cmd}
	if user != "" {
		args = append(args, user)
	}
	return E2BStep{Type: "RUN", Args: args}
}

// e2b is the step as the SDK's builder method of the same name makes it.
func (s YAMLStep) e2b() (E2BStep, error) {
	var out []E2BStep
	if s.Run != nil {
		out = append(out, run(s.Run.Cmd, s.Run.User))
	}
	if c := s.Copy; c != nil {
		out = append(out, E2BStep{Type: "COPY", Args: []string{c.Src, c.Dest, c.User, c.Mode}})
	}
	if len(s.Env) > 0 {
		st := E2BStep{Type: "ENV"}
		for _, k := range sortedKeys(s.Env) {
			st.Args = append(st.Args, k, s.Env[k])
		}
		out = append(out, st)
	}
	if s.Workdir != "" {
		out = append(out, E2BStep{Type: "WORKDIR", Args: []string{s.Workdir}})
	}
	if s.User != "" {
		out = append(out, E2BStep{Type: "USER", Args: []string{s.User}})
	}
	if len(s.Apt) > 0 {
		out = append(out, run("apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y "+shellJoin(s.Apt), "root"))
	}
	if n := s.Npm; n != nil {
		cmd := "npm install"
		if n.Global {
			cmd += " -g"
		}
		if n.Dev {
			cmd += " --save-dev"
		}
		if len(n.Packages) > 0 {
			cmd += " " + shellJoin(n.Packages)
		}
		user := ""
		if n.Global {
			user = "root"
		}
		out = append(out, run(cmd, user))
	}
	if len(s.Pip) > 0 {
		out = append(out, run("pip install "+shellJoin(s.Pip), "root"))
	}
	if g := s.Git; g != nil {
		if g.URL == "" {
			return E2BStep{}, fmt.Errorf("git needs url: %w", errdefs.ErrInvalidArgument)
		}
		cmd := "git clone " + shellQuote(g.URL)
		if g.Branch != "" {
			cmd += " --branch " + shellQuote(g.Branch) + " --single-branch"
		}
		if g.Depth > 0 {
			cmd += " --depth " + strconv.Itoa(g.Depth)
		}
		if g.Path != "" {
			cmd += " " + shellQuote(g.Path)
		}
		out = append(out, run(cmd, g.User))
	}
	if len(out) != 1 {
		return E2BStep{}, fmt.Errorf("a step has exactly one of run, copy, env, workdir, user, apt, npm, pip, git (this one has %d): %w", len(out), errdefs.ErrInvalidArgument)
	}
	return out[0], nil
}

// readyCmd is the command the SDK's waitFor… helpers make.
func (s *YAMLStart) readyCmd() string {
	r := s.Ready
	switch {
	case r.Cmd != "":
		return r.Cmd
	case r.Port > 0:
		return fmt.Sprintf(`[ -n "$(ss -Htuln sport = :%d)" ]`, r.Port)
	case r.URL != "":
		st := r.Status
		if st == 0 {
			st = 200
		}
		return fmt.Sprintf(`curl -s -o /dev/null -w "%%{http_code}" %s | grep -q "%d"`, shellQuote(r.URL), st)
	case r.Process != "":
		return "pgrep " + shellQuote(r.Process) + " > /dev/null"
	case r.File != "":
		return "[ -f " + shellQuote(r.File) + " ]"
	case r.TimeoutMs > 0:
		return fmt.Sprintf("sleep %d", max(1, r.TimeoutMs/1000))
	}
	return ""
}

// shellQuote quotes s for /bin/sh (single quotes).
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
