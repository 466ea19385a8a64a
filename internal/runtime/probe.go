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

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
)

// Available returns the path of the runtime called name, found in PATH (and in /usr/sbin
// and /usr/local/sbin, where distributions put runc). It fails with ErrInvalidArgument for
// an unknown name and ErrUnavailable when the binary is not installed.
func Available(name string) (string, error) {
	if !slices.Contains(Names(), name) {
		return "", fmt.Errorf("runtime %q: %w", name, errdefs.ErrInvalidArgument)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("runtime %s is not installed: %w", name, errdefs.ErrUnavailable)
}

// ProbeResult says whether one runtime is usable on this host (for `moat doctor`).
type ProbeResult struct {
	Name    string
	Path    string // empty when the binary is not installed
	Version string // first line of `<runtime> --version`
	Works   bool   // a trivial container ran to completion
	Err     string // why it does not work: the runtime's own error text
	Hint    string // what to do about it, when known
	Took    time.Duration
}

// probeTimeout bounds each step of Probe.
const probeTimeout = 30 * time.Second

// Probe checks that the runtime called name exists, reports its version, and runs a
// trivial container (/bin/true on a read-only bind of the host's root, no user namespace,
// no network) to see that it actually works on this host. It needs root. It leaves nothing
// behind.
func Probe(ctx context.Context, name string) ProbeResult {
	r := ProbeResult{Name: name}
	p, err := Available(name)
	if err != nil {
		r.Err = err.Error()
		r.Hint = installHint(name)
		return r
	}
	r.Path = p
	vctx, cancel := context.WithTimeout(ctx, probeTimeout)
	out, err := exec.CommandContext(vctx, p, "--version").CombinedOutput()
	cancel()
	if err != nil {
		r.Err = fmt.Sprintf("%s --version: %v: %s", p, err, cleanRuntimeError(string(out)))
		return r
	}
	r.Version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")

	start := time.Now()
	err = probeRun(ctx, name, p)
	r.Took = time.Since(start)
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
	defer os.RemoveAll(dir)
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
