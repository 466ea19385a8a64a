package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatdev/moat/internal/linux"
)

// ProbeResult says whether one runtime is usable on this host (for `moat doctor`).
type ProbeResult struct {
	Name    string
	Path    string // empty when the binary is not installed
	Source  string // SourceMoat, SourceSystem or SourceConfigured
	Stamp   string // SourceMoat: the version scripts/runtimes.sh stamped on the build
	Version string // first line of `<runtime> --version`
	// Parsed is Version parsed (zero with ParseErr set when it is not understood);
	// Missing, the known security fixes this build lacks (MissingFixes).
	Parsed   Version
	ParseErr string
	Missing  []MissingFix
	// Backported: fixes the version lacks that the distribution patched in.
	Backported []string
	// Platforms: runsc only, the platforms this build offers (`runsc flags`).
	Platforms []string
	// Mode: runsc only, how moat runs this build (RunscMode).
	Mode string
	// Skipped: binaries preferred to Path that are installed but do not work here;
	// Fallbacks: those installed after it, which a failure of Path would fall back to.
	Skipped   []Skipped
	Fallbacks []Fallback
	Works     bool   // a trivial container ran to completion
	Err       string // why it does not work: the runtime's own error text
	Hint      string // what to do about it, when known
	Took      time.Duration
}

// probeTimeout bounds each step of Probe.
const probeTimeout = 30 * time.Second

// ProbeOptions say which binary Probe checks. Zero values: as the daemon chooses.
type ProbeOptions struct {
	// Binary is the runtime's binary as configured (serve --runtime-path); "": selected
	// with Select from Dir (default DefaultDir), PATH and the system directories.
	Binary string
	Dir    string
}

// Probe is ProbeWith with the default options.
func Probe(ctx context.Context, name string) ProbeResult { return ProbeWith(ctx, name, ProbeOptions{}) }

// ProbeWith finds the binary of runtime name the way the daemon does (falling back from a
// preferred binary that does not work, and saying so), reports its version and the known
// security fixes it lacks, and runs a trivial container (/bin/true on a read-only bind of
// the host's root, no user namespace, no network) to see that it actually works on this
// host. It needs root. It leaves nothing behind.
func ProbeWith(ctx context.Context, name string, o ProbeOptions) ProbeResult {
	r := ProbeResult{Name: name}
	type result struct {
		err  error
		took time.Duration
	}
	checked := map[string]result{}
	check := func(ctx context.Context, p string) error {
		start := time.Now()
		err := CheckBinary(ctx, name, p)
		checked[p] = result{err, time.Since(start)}
		return err
	}
	if o.Binary != "" {
		if !isExecutable(o.Binary) {
			r.Err = fmt.Sprintf("%s: not an executable file", o.Binary)
			return r
		}
		r.Path, r.Source = o.Binary, SourceConfigured
	} else {
		dir := o.Dir
		if dir == "" {
			dir = DefaultDir
		}
		sel, err := Select(ctx, name, dir, check)
		r.Skipped = sel.Skipped
		if err != nil {
			r.Err = err.Error()
			r.Hint = installHint(name)
			return r
		}
		r.Path, r.Source = sel.Path, sel.Source
		for _, o := range sel.Others {
			r.Fallbacks = append(r.Fallbacks, describe(ctx, name, o))
		}
		if r.Source == SourceMoat {
			r.Stamp = Stamp(dir, name)
		}
	}
	out, err := ask(ctx, r.Path, "--version")
	if err != nil {
		r.Err = err.Error()
		return r
	}
	var f versionFacts
	r.Version, f = factsOf(name, r.Path, out)
	r.Parsed, r.Missing, r.Backported = f.parsed, f.missing, f.backported
	if f.parseErr != nil {
		r.ParseErr = f.parseErr.Error()
	}
	if name == "runsc" {
		flags, _ := ask(ctx, r.Path, "flags")
		r.Platforms = RunscPlatforms(flags)
		r.Mode = RunscMode(currentRunsc(flags))
	}

	res, done := checked[r.Path]
	if !done {
		start := time.Now()
		res.err = probeRun(ctx, name, r.Path)
		res.took = time.Since(start)
	}
	err, r.Took = res.err, res.took
	if err != nil {
		r.Err = err.Error()
		if name == "crun" {
			r.Hint = CrunCgroupProblem()
		}
		return r
	}
	r.Works = true
	return r
}

// Fallback is an installed binary of a runtime that the daemon does not use but would fall
// back to, with its version and the known security fixes it lacks.
type Fallback struct {
	Path       string       `json:"path"`
	Source     string       `json:"source"`
	Version    string       `json:"version,omitempty"`
	Missing    []MissingFix `json:"missing_fixes,omitempty"`
	Backported []string     `json:"backported,omitempty"` // fixes the distribution patched in
}

// describe asks candidate c its version.
func describe(ctx context.Context, name string, c Candidate) Fallback {
	f := Fallback{Path: c.Path, Source: c.Source}
	out, err := ask(ctx, c.Path, "--version")
	if err != nil {
		f.Version = "--version failed: " + errors.Unwrap(err).Error()
		return f
	}
	var facts versionFacts
	f.Version, facts = factsOf(name, c.Path, out)
	f.Missing, f.Backported = facts.missing, facts.backported
	return f
}

// versionFacts are what a runtime binary's version says: the version parsed (or why not),
// the known security fixes it lacks, and those of them the distribution patched in.
type versionFacts struct {
	parsed     Version
	parseErr   error
	missing    []MissingFix
	backported []string
}

// factsOf reads the `--version` output out of the runtime name's binary at path: its first
// line, and its versionFacts (the distribution's changelog read for backports).
func factsOf(name, path string, out []byte) (string, versionFacts) {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	v, err := ParseVersion(name, out)
	if err != nil {
		return line, versionFacts{parseErr: err}
	}
	distro := DistroFixes(name, path)
	return line, versionFacts{parsed: v, missing: MissingFixes(v, distro), backported: Backported(v, distro)}
}

// ask runs the runtime binary bin with one argument ("--version", "flags") and returns its
// output; an error quotes the runtime's own message.
func ask(ctx context.Context, bin, arg string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, arg).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", bin, arg, err, cleanRuntimeError(string(out)))
	}
	return out, nil
}

// CheckBinary says whether the runtime binary at path works on this host: it answers
// `--version` and runs a trivial container (as Probe does). It is Select's check for the
// daemon and the doctor. It needs root and leaves nothing behind.
func CheckBinary(ctx context.Context, name, path string) error {
	if _, err := ask(ctx, path, "--version"); err != nil {
		return err
	}
	return probeRun(ctx, name, path)
}

func installHint(name string) string {
	switch name {
	case "runc":
		return "install runc (Debian/Ubuntu: apt-get install runc)"
	case "crun":
		return "install crun (Debian/Ubuntu: apt-get install crun)"
	case "runsc":
		return "install gVisor's runsc (https://gvisor.dev/docs/user_guide/install/)"
	}
	return ""
}

// probeRun runs /bin/true in a throwaway container with the runtime at bin.
func probeRun(ctx context.Context, name, bin string) (err error) {
	dir, err := os.MkdirTemp("", "moat-probe-")
	if err != nil {
		return err
	}
	defer func() {
		// runsc (2026) leaves a bind mount of its "none" network namespace in its state
		// directory (<root>/null-netns): nothing of the probe may stay mounted.
		_ = linux.UnmountAll(dir)
		os.RemoveAll(dir)
	}()
	rootfs := filepath.Join(dir, "rootfs")
	// A read-only view of the host's root (and /usr when it is a separate mount).
	if err := linux.IDMapMount("/", rootfs, ""); err != nil {
		return fmt.Errorf("preparing probe root: %w", err)
	}
	defer linux.UnmountAll(rootfs)
	if linux.IsMountPoint("/usr") {
		if err := linux.IDMapMount("/usr", filepath.Join(rootfs, "usr"), ""); err != nil {
			return fmt.Errorf("preparing probe root: %w", err)
		}
	}
	truePath := "/bin/true"
	if _, err := os.Stat(filepath.Join(rootfs, truePath)); err != nil {
		truePath = "/usr/bin/true"
	}

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	id := "moat-probe-" + hex.EncodeToString(rnd[:])
	s := &specs.Spec{
		Version: ociVersion,
		Root:    &specs.Root{Path: rootfs, Readonly: true},
		Process: &specs.Process{
			Args: []string{truePath},
			Env:  []string{defaultPath},
			Cwd:  "/",
		},
		Hostname: "probe",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755", "size=64k"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
			CgroupsPath:   "/moat/" + id,
			MaskedPaths:   slices.Clone(maskedPaths()),
			ReadonlyPaths: slices.Clone(readonlyPaths()),
		},
	}
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		return err
	}
	g := globalOpts{root: filepath.Join(dir, "state")}
	if name == "runsc" {
		g.network = "none"
		// As the driver does: no gofer namespace pinned under the probe's root (a probe
		// cut short by its process' end would leave it mounted).
		if flags, _ := ask(ctx, bin, "flags"); currentRunsc(flags) {
			g.goferNet = "new"
		}
	}
	cctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, append(g.args(), runOpts{bundle: bundle}.args(id)...)...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	// Whatever happened, remove the container.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer dcancel()
	_ = exec.CommandContext(dctx, bin, append(g.args(), deleteOpts{force: true}.args(id)...)...).Run()
	_ = removeCgroups(id)
	if err != nil {
		msg := cleanRuntimeError(string(out))
		if cctx.Err() != nil {
			msg += " (" + cctx.Err().Error() + ")"
		}
		return fmt.Errorf("%s run: %w: %s", name, err, msg)
	}
	return nil
}

// CrunCgroupProblem explains why crun cannot run containers on this host's cgroup layout,
// or returns "" when the layout is not the one crun refuses. crun 1.8 rejects "hybrid"
// hosts (cgroup v1 hierarchies under /sys/fs/cgroup plus a cgroup v2 mount at
// /sys/fs/cgroup/unified) as soon as any controller sits in the v2 hierarchy, with
// "cgroups in hybrid mode not supported, drop all controllers from cgroupv2". runc handles
// the same layout.
func CrunCgroupProblem() string {
	if DetectCgroupMode() != CgroupHybrid {
		return ""
	}
	data, err := os.ReadFile("/sys/fs/cgroup/unified/cgroup.controllers")
	ctrls := strings.Fields(string(data))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if len(ctrls) == 0 {
		return ""
	}
	return fmt.Sprintf("this host uses the hybrid cgroup layout (cgroup v1 under /sys/fs/cgroup, "+
		"cgroup v2 at /sys/fs/cgroup/unified holding the controller(s) %s), which crun refuses "+
		"(\"cgroups in hybrid mode not supported\"). Fix: boot with "+
		"systemd.unified_cgroup_hierarchy=1 (or cgroup_no_v1=all) for pure cgroup v2, or mount "+
		"%s as cgroup v1 hierarchies so that v2 holds none; or use runc, which handles this layout",
		strings.Join(ctrls, ", "), strings.Join(ctrls, ", "))
}
