package build

// The E2B template builder front end: the body of E2B's POST /v2/templates/{id}/builds/{buildID}
// (TemplateBuildStartV2, as the e2b SDK's Template().…build() sends it) parsed and
// translated into Steps (docs/e2b-templates.md). Pure.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// E2BTemplate is TemplateBuildStartV2.
type E2BTemplate struct {
	FromImage    string          `json:"fromImage,omitempty"`
	FromTemplate string          `json:"fromTemplate,omitempty"`
	Registry     json.RawMessage `json:"fromImageRegistry,omitempty"`
	StartCmd     string          `json:"startCmd,omitempty"`
	ReadyCmd     string          `json:"readyCmd,omitempty"`
	Force        bool            `json:"force,omitempty"`
	Steps        []E2BStep       `json:"steps"`
	// CPU and memory defaults of sandboxes made from the template (POST /v3/templates
	// asks for them; 0: the daemon's defaults).
	CPUCount int `json:"-"`
	MemoryMB int `json:"-"`
	// Owner is who may change the template through the E2B API besides admin keys and the
	// operator: the API key id that first built it, or "operator" (label moat.e2b.owner).
	Owner string `json:"-"`
	// local: COPY reads a local context directory (a steps file), not uploads.
	local bool
}

// E2BStep is TemplateStep: type RUN (args: command[, user]), COPY (args: src, dest, user,
// mode in octal; filesHash names the uploaded files), ENV (args: key, value, ...),
// WORKDIR (args: dir), USER (args: user).
type E2BStep struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash,omitempty"`
	Force     bool     `json:"force,omitempty"`
}

// Labels a translated E2B template records (read when a sandbox starts from it).
const (
	LabelE2BStart   = "moat.e2b.start"
	LabelE2BReady   = "moat.e2b.ready"
	LabelE2BWorkdir = "moat.e2b.workdir"
	LabelE2BCPU     = "moat.e2b.cpuCount"
	LabelE2BMemory  = "moat.e2b.memoryMB"
	LabelE2BOwner   = "moat.e2b.owner"
)

// maxE2BTemplate bounds the JSON ParseE2BTemplate reads; maxE2BSteps the steps.
const (
	maxE2BTemplate = 1 << 20
	maxE2BSteps    = 1000
)

// filesHashRE is a COPY step's filesHash (the SDK sends a SHA-256 in hex).
var filesHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidFilesHash reports whether h is a filesHash moat accepts (it names a directory).
func ValidFilesHash(h string) bool { return filesHashRE.MatchString(h) }

// ParseE2BTemplate parses and checks the JSON of a TemplateBuildStartV2. Errors wrap
// errdefs.ErrInvalidArgument and name the step (1-based, as E2B counts them).
func ParseE2BTemplate(data []byte) (*E2BTemplate, error) {
	if len(data) > maxE2BTemplate {
		return nil, fmt.Errorf("template is larger than %d bytes: %w", maxE2BTemplate, errdefs.ErrInvalidArgument)
	}
	var t E2BTemplate
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("template: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (t *E2BTemplate) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf(format+": %w", append(a, errdefs.ErrInvalidArgument)...)
	}
	switch {
	case (t.FromImage == "") == (t.FromTemplate == ""):
		return bad("exactly one of fromImage and fromTemplate must be given")
	case len(t.Registry) > 0 && string(t.Registry) != "null":
		return bad("fromImageRegistry: registry credentials are not supported by moat (configure the registry in moat, or `moat template pull` the image)")
	case len(t.Steps) > maxE2BSteps:
		return bad("more than %d steps", maxE2BSteps)
	case strings.ContainsRune(t.StartCmd+t.ReadyCmd, 0):
		return bad("startCmd and readyCmd must not contain NUL")
	}
	for i, s := range t.Steps {
		if err := s.check(t.local); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, s.Type, err)
		}
	}
	return nil
}

func (s E2BStep) check(local bool) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf(format+": %w", append(a, errdefs.ErrInvalidArgument)...)
	}
	for _, a := range s.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("an argument contains NUL")
		}
	}
	n := len(s.Args)
	switch s.Type {
	case "RUN":
		if n < 1 || n > 2 || strings.TrimSpace(s.Args[0]) == "" {
			return bad("RUN takes a command and an optional user")
		}
	case "COPY":
		if n < 2 || n > 4 || s.Args[0] == "" || s.Args[1] == "" {
			return bad("COPY takes a source, a destination, and an optional user and mode")
		}
		if !local && !ValidFilesHash(s.FilesHash) {
			return bad("COPY needs the filesHash of its uploaded files (64 hex digits)")
		}
		if strings.ContainsAny(s.Args[0], "*?[{") {
			return bad("COPY source %q: glob patterns are not supported by moat yet (copy a file or directory)", s.Args[0])
		}
		if _, err := ContextPath(s.Args[0]); err != nil {
			return err
		}
		if n == 4 && s.Args[3] != "" {
			if _, err := parseMode(s.Args[3]); err != nil {
				return err
			}
		}
	case "ENV":
		if n == 0 || n%2 != 0 {
			return bad("ENV takes key, value pairs")
		}
		for i := 0; i < n; i += 2 {
			if s.Args[i] == "" || strings.ContainsAny(s.Args[i], "= \t\n") {
				return bad("ENV key %q", s.Args[i])
			}
		}
	case "WORKDIR", "USER":
		if n != 1 || s.Args[0] == "" {
			return bad("%s takes one argument", s.Type)
		}
	default:
		return bad("unknown step type %q (moat knows RUN, COPY, ENV, WORKDIR and USER)", s.Type)
	}
	return nil
}

func parseMode(m string) (fs.FileMode, error) {
	v, err := strconv.ParseUint(m, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, fmt.Errorf("COPY mode %q: want octal permissions such as 0755: %w", m, errdefs.ErrInvalidArgument)
	}
	return fs.FileMode(v & 0o777), nil
}

// Translate turns t into a base and Steps for Build. A COPY's sources are read from the
// build context under the directory named by its filesHash (where the upload was
// unpacked): source "app/" of hash H becomes context path "H/app". The start and ready
// commands, and the final workdir, become labels. Pure.
func (t *E2BTemplate) Translate() (from string, steps []Step, err error) {
	from = t.FromTemplate
	if from == "" {
		from = e2bImageRef(t.FromImage)
	}
	workdir := ""
	for i, s := range t.Steps {
		if err := s.check(t.local); err != nil {
			return "", nil, fmt.Errorf("step %d (%s): %w", i+1, s.Type, err)
		}
		a := s.Args
		switch s.Type {
		case "RUN":
			st := Step{Kind: Run, Shell: a[0]}
			if len(a) == 2 {
				st.RunAs = a[1]
			}
			steps = append(steps, st)
		case "COPY":
			src, _ := ContextPath(a[0])
			if !t.local {
				src = path.Join(s.FilesHash, src)
			}
			st := Step{Kind: Copy, Sources: []string{src}, Dest: a[1]}
			if strings.HasSuffix(a[0], "/") && !strings.HasSuffix(st.Sources[0], "/") {
				st.Sources[0] += "/"
			}
			if len(a) > 2 && a[2] != "" {
				st.Chown = a[2]
			}
			if len(a) > 3 && a[3] != "" {
				st.Mode, _ = parseMode(a[3])
			}
			steps = append(steps, st)
		case "ENV":
			st := Step{Kind: Env}
			for i := 0; i < len(a); i += 2 {
				st.Vars = append(st.Vars, Var{a[i], a[i+1]})
			}
			steps = append(steps, st)
		case "WORKDIR":
			if wd, _, err := ImagePath(a[0], workdir); err == nil {
				workdir = wd
			}
			steps = append(steps, Step{Kind: Workdir, Path: a[0]})
		case "USER":
			steps = append(steps, Step{Kind: User, Path: a[0]})
		}
	}
	var labels []Var
	if t.StartCmd != "" {
		labels = append(labels, Var{LabelE2BStart, t.StartCmd})
		if workdir != "" {
			labels = append(labels, Var{LabelE2BWorkdir, workdir})
		}
	}
	if t.ReadyCmd != "" {
		labels = append(labels, Var{LabelE2BReady, t.ReadyCmd})
	}
	if t.CPUCount > 0 {
		labels = append(labels, Var{LabelE2BCPU, strconv.Itoa(t.CPUCount)})
	}
	if t.MemoryMB > 0 {
		labels = append(labels, Var{LabelE2BMemory, strconv.Itoa(t.MemoryMB)})
	}
	if t.Owner != "" { // always set by the daemon: a base's owner is not inherited
		labels = append(labels, Var{LabelE2BOwner, t.Owner})
	}
	if len(labels) > 0 {
		steps = append(steps, Step{Kind: Label, Vars: labels})
	}
	return from, steps, nil
}

// e2bImageRef makes an E2B fromImage a reference moat pulls: Docker Hub's short names
// (debian:stable, oven/bun:latest, e2bdev/base) get their registry and library/ prefix.
func e2bImageRef(img string) string {
	first, _, hasSlash := strings.Cut(img, "/")
	if hasSlash && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return img
	}
	if !hasSlash {
		img = "library/" + img
	}
	if !strings.ContainsAny(path.Base(img), ":@") {
		img += ":latest"
	}
	return "docker.io/" + img
}
