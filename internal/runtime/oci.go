// Package runtime drives the OCI runtimes that run sandbox containers — runc, crun and
// runsc (gVisor) — by exec'ing their binaries with typed options rendered to argv, the way
// containerd's go-runc does; it never links libcontainer. It also builds the one hardened
// OCI spec every sandbox runs with (BuildSpec) and probes which runtimes work on the host
// (Available, Probe) for `moat doctor`.
//
// All methods run as root. Every runtime invocation is bounded by a timeout, and every
// failure carries the runtime's own error text.
package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Names returns the runtimes moat knows, fastest first.
func Names() []string { return []string{"runc", "crun", "runsc"} }

// DefaultTimeout bounds each runtime invocation when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Options configure one runtime driver. Zero values pick the defaults.
type Options struct {
	// Binary is the runtime executable; default: as AvailableIn(name, Dir) finds it.
	Binary string
	// Dir is moat's runtime directory, searched before PATH when Binary is ""; default
	// DefaultDir.
	Dir string
	// Root is the runtime's state directory (--root); default /run/moat/runtime/<name>.
	// Keeping it separate from the runtime's default root means moat only ever lists and
	// deletes its own containers.
	Root string
	// ExtraFlags are global flags added before every subcommand (e.g. "--platform=kvm"
	// for runsc, "--debug").
	ExtraFlags []string
	// Timeout bounds each runtime invocation; default DefaultTimeout.
	Timeout time.Duration
	// WeakenCaps, TEST ONLY, adds capabilities to every container's sets: the
	// deliberately weakened configuration `moat redteam` must catch. Only
	// daemon.Config.TestWeaken sets it, which no flag or API field reaches.
	WeakenCaps []string
	// WeakenNoSeccomp, TEST ONLY, starts containers without their seccomp filter (as
	// WeakenCaps: only daemon.Config.TestWeaken sets it).
	WeakenNoSeccomp bool
}

// OCI is a sandbox.Runtime backed by one OCI runtime binary. It keeps no per-container state
// of its own (only a cache): everything is asked of the runtime, so a restarted daemon
// picks up where the last one left off. It is safe for concurrent use.
type OCI struct {
	name   string
	binary string
	root   string
	extra  []string
	weaken []string // Options.WeakenCaps (tests only)
	// weakenNoSeccomp: Options.WeakenNoSeccomp (tests only).
	weakenNoSeccomp bool
	timeout         time.Duration
	log             *slog.Logger

	// nofileMax caps the sandbox's RLIMIT_NOFILE when this process cannot raise hard
	// limits (no CAP_SYS_RESOURCE): the runtime could not either. 0: no cap.
	nofileMax uint64
	// noRlimits: the spec carries no rlimits (runc/crun without CAP_SYS_RESOURCE). The
	// runtime sets them with prlimit(2) on the container's init, which needs
	// CAP_SYS_RESOURCE over the sandbox's user namespace: root has it there only as the
	// namespace's owner, and the owner is the sandbox's own uid (internal/linux). moat-init
	// sets RLIMIT_NOFILE itself.
	noRlimits bool

	// netns caches container id → network namespace path for runsc (see netnsOf).
	netns sync.Map

	// memOnce/mem: MemoryCheckpoint's answer, probed once.
	memOnce sync.Once
	mem     sandbox.MemorySupport

	// version: the binary's, parsed (zero when it does not parse; see BuildSpec).
	version Version

	// runsc only: flags this runsc version supports.
	ociSeccomp  bool // --oci-seccomp: enforce the spec's seccomp profile inside gVisor
	overlayNone bool // --overlay2=none: root writes go to the sandbox's drive, not memory
	// current: a current gVisor (one with --gofer-network-namespace, 2024 on), not runsc
	// 2022-12. It runs moat's sandboxes on its own network stack (--network=sandbox in the
	// sandbox's namespace S; 2022's misdetects the namespace) and in the sandbox's user
	// namespace (MapsUsers), and its gofers each get a network namespace of their own
	// (without --gofer-network-namespace=new it parks them in one bind-mounted under --root
	// and never unmounts it).
	current bool
}

var _ sandbox.Runtime = (*OCI)(nil)

// New returns the driver for the runtime called name ("runc", "crun" or "runsc"). It fails
// with ErrInvalidArgument for an unknown name and ErrUnavailable when the binary is missing.
// It does not check that the runtime works on this host; Probe does.
func New(name string, opts Options, log *slog.Logger) (*OCI, error) {
	if !slices.Contains(Names(), name) {
		return nil, fmt.Errorf("runtime %q: %w", name, errdefs.ErrInvalidArgument)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bin := opts.Binary
	if bin == "" {
		dir := opts.Dir
		if dir == "" {
			dir = DefaultDir
		}
		p, err := AvailableIn(name, dir)
		if err != nil {
			return nil, err
		}
		bin = p
	} else if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("runtime %s binary %s: %v: %w", name, bin, err, errdefs.ErrUnavailable)
	}
	o := &OCI{
		name:            name,
		binary:          bin,
		root:            opts.Root,
		extra:           slices.Clone(opts.ExtraFlags),
		weaken:          slices.Clone(opts.WeakenCaps),
		weakenNoSeccomp: opts.WeakenNoSeccomp,
		timeout:         opts.Timeout,
		log:             log.With("runtime", name),
	}
	if o.root == "" {
		o.root = filepath.Join("/run/moat/runtime", name)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	o.version = binaryVersion(name, bin, o.log)
	if !hasCapSysResource() && name != "runsc" {
		o.noRlimits = true
		o.log.Info("no CAP_SYS_RESOURCE: sandboxes inherit this process' RLIMIT_NOFILE hard limit, moat-init sets the rest")
	} else if max, ok := nofileCeiling(); ok {
		o.nofileMax = max
		o.log.Info("no CAP_SYS_RESOURCE: sandboxes get this process' RLIMIT_NOFILE hard limit", "limit", max)
	}
	if name == "runsc" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		flags, _ := ask(ctx, bin, "flags")
		o.ociSeccomp = hasFlag(flags, "oci-seccomp")
		o.overlayNone = hasFlag(flags, "overlay2")
		o.current = currentRunsc(flags)
		if !o.ociSeccomp {
			o.log.Warn("this runsc cannot enforce the OCI seccomp profile inside the sandbox (no --oci-seccomp)")
		}
	}
	return o, nil
}

// nofileCeiling returns this process' RLIMIT_NOFILE hard limit and true when it lacks
// CAP_SYS_RESOURCE and so cannot give a container a higher hard limit (runc fails with
// "error setting rlimits for ready process: operation not permitted" otherwise).
func nofileCeiling() (uint64, bool) {
	if hasCapSysResource() {
		return 0, false
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Max >= 65536 {
		return 0, false
	}
	return rl.Max, true
}

// hasCapSysResource reports whether this process has CAP_SYS_RESOURCE in effect (true when
// it cannot tell).
func hasCapSysResource() bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(data), "\n") {
		v, ok := strings.CutPrefix(l, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		return err != nil || caps&(1<<unix.CAP_SYS_RESOURCE) != 0
	}
	return true
}

// currentRunsc tells a current gVisor from runsc 2022-12 by its `runsc flags` output: the
// first has --gofer-network-namespace (2024 on). See OCI.current.
func currentRunsc(flags []byte) bool { return hasFlag(flags, "gofer-network-namespace") }

// RunscMode says how moat runs a runsc build, current or not (moat doctor). Pure.
func RunscMode(current bool) string {
	if current {
		return "systrap platform, gVisor's own network stack in the sandbox's namespace, Sentry and gofer as the sandbox's host uid range (--platform=kvm is not used: it hangs on a KVM-PVM host)"
	}
	return "ptrace platform, the host kernel's network stack inside the sandbox's namespace, Sentry and gofer as host root (no user namespace)"
}

// hasFlag reports whether `runsc flags` output lists -name.
func hasFlag(out []byte, name string) bool {
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "-"+name {
			return true
		}
	}
	return false
}

// MapsUsers reports whether the runtime runs sandboxes in the sandbox's user namespace
// (ContainerSpec.UserNS and IDs): runc and crun always, runsc when it is a current gVisor;
// runsc 2022-12 fails to set up its chroot in one and runs as host root.
func (o *OCI) MapsUsers() bool { return o.name != "runsc" || o.current }

// Name is the runtime's name: "runc", "crun" or "runsc".
func (o *OCI) Name() string { return o.name }

// Binary is the path of the runtime executable the driver runs.
func (o *OCI) Binary() string { return o.binary }

// Root is the runtime's state directory.
func (o *OCI) Root() string { return o.root }

// Start writes the hardened config.json (BuildSpec) into spec.BundleDir, creates and starts
// the container detached, and returns once its init process runs. moat-init's stdout and
// stderr are spec.Output's file (the runtime's own messages go there too, and its tail is
// quoted in errors); its stdin is a pipe holding spec.InitInput, closed after it. Under runsc, the runtime is
// started from a thread inside spec.NetNS, where the sandbox uses gVisor's own network
// stack (a current runsc) or the host's (runsc 2022-12). On error the container is removed
// again.
func (o *OCI) Start(ctx context.Context, spec sandbox.ContainerSpec) (err error) {
	s, err := BuildSpec(spec, o.name, o.version)
	if err == nil && o.current {
		withOwnNetstack(s, spec.NetNS)
	}
	if err != nil {
		return fmt.Errorf("starting container %s: %w", spec.ID, err)
	}
	if o.noRlimits {
		s.Process.Rlimits = nil
	}
	if len(o.weaken) > 0 && s.Process.Capabilities != nil {
		c := s.Process.Capabilities
		c.Bounding = append(c.Bounding, o.weaken...)
		c.Effective = append(c.Effective, o.weaken...)
		c.Permitted = append(c.Permitted, o.weaken...)
	}
	if o.weakenNoSeccomp && s.Linux != nil {
		s.Linux.Seccomp = nil
	}
	if o.nofileMax > 0 {
		for i, r := range s.Process.Rlimits {
			if r.Type == "RLIMIT_NOFILE" && r.Hard > o.nofileMax {
				s.Process.Rlimits[i].Hard = o.nofileMax
				s.Process.Rlimits[i].Soft = min(r.Soft, o.nofileMax)
			}
		}
	}
	data, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return fmt.Errorf("starting container %s: encoding spec: %w", spec.ID, err)
	}
	if err := os.MkdirAll(o.root, 0o700); err != nil {
		return fmt.Errorf("starting container %s: %w", spec.ID, err)
	}
	// Never touch a container that exists already: the cleanup of a failed Start below
	// would delete it.
	if exists, err := o.exists(ctx, spec.ID); err != nil {
		return fmt.Errorf("starting container %s: %w", spec.ID, err)
	} else if exists {
		return fmt.Errorf("starting container %s: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	// config.json holds nothing secret (the token is InitInput); root-only all the same.
	if err := os.WriteFile(filepath.Join(spec.BundleDir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("starting container %s: writing spec: %w", spec.ID, err)
	}
	if spec.Output == nil || spec.Output.File() == nil {
		return fmt.Errorf("starting container %s: no output: %w", spec.ID, errdefs.ErrInvalidArgument)
	}

	begin := time.Now()
	defer func() {
		if err == nil {
			return
		}
		// Nothing of a failed container may remain; this must survive a cancelled ctx.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
		defer cancel()
		if serr := o.Stop(cctx, spec.ID); serr != nil {
			o.log.Error("removing failed container", "id", spec.ID, "err", serr)
		}
	}()

	if o.name == "runsc" {
		o.netns.Store(spec.ID, spec.NetNS)
	}
	input, err := inputPipe(spec.InitInput)
	if err != nil {
		return fmt.Errorf("starting container %s: %w", spec.ID, err)
	}
	defer input.Close()
	if err := o.create(ctx, spec, input); err != nil {
		return err
	}
	// `run --detach` created and started the container and returned once its init was
	// exec'd; the caller's health check confirms it serves.
	o.log.Debug("container started", "id", spec.ID, "took", time.Since(begin))
	return nil
}

// create runs `<runtime> run --detach`. The runtime's own stdio becomes the container's, so
// it is the log file; the runtime's error text lands there too and is read back on failure.
func (o *OCI) create(ctx context.Context, spec sandbox.ContainerSpec, input *os.File) error {
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	err := o.runCreate(cctx, spec, nil, input, spec.Output.File())
	if err == nil {
		return nil
	}
	if cctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", cctx.Err(), err)
	}
	msg := cleanRuntimeError(spec.Output.Tail(time.Second))
	if o.name == "runsc" && ctx.Err() == nil && cctx.Err() == nil {
		if why := o.diagnoseCreate(ctx, spec); why != "" {
			msg += " (" + why + ")"
		}
	}
	return fmt.Errorf("creating container %s: %s create: %w: %s", spec.ID, o.name, err, msg)
}

// runCreate runs `<runtime> [extraGlobal] run --detach` with in as the container's stdin
// and out as its stdout and stderr (nil: /dev/null) and waits for it. Every runtime hands
// its own stdio to the container's process. One invocation instead of create + start +
// state: ~50 ms less per sandbox under runc, ~30 ms under runsc.
func (o *OCI) runCreate(ctx context.Context, spec sandbox.ContainerSpec, extraGlobal []string, in, out *os.File) error {
	args := append(o.globalArgs(), extraGlobal...)
	sub := runOpts{bundle: spec.BundleDir, detach: true}.args(spec.ID)
	cmd := exec.CommandContext(ctx, o.binary, append(args, sub...)...)
	cmd.WaitDelay = time.Second
	if in != nil {
		cmd.Stdin = in
	}
	if out != nil {
		cmd.Stdout = out
		cmd.Stderr = out
	}
	// Own session: a signal to the daemon's terminal or process group never reaches
	// the runtime or the container it leaves behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if o.name != "runsc" {
		return cmd.Run()
	}
	if err := startInNetNS(spec.NetNS, cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// maxInitInput bounds ContainerSpec.InitInput: it must fit the pipe's buffer, which is
// filled before the runtime starts.
const maxInitInput = 4096

// inputPipe returns the read end of a pipe that holds data and then ends.
func inputPipe(data []byte) (*os.File, error) {
	if len(data) > maxInitInput {
		return nil, fmt.Errorf("init input of %d bytes exceeds %d: %w", len(data), maxInitInput, errdefs.ErrInvalidArgument)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("init input pipe: %w", err)
	}
	defer w.Close()
	if _, err := w.Write(data); err != nil {
		r.Close()
		return nil, fmt.Errorf("writing init input: %w", err)
	}
	return r, nil
}

// diagnoseCreate finds out why runsc create failed. runsc only says "cannot read client
// sync file: waiting for sandbox to start: EOF" when its gofer or sandbox process dies;
// their reasons go to debug logs only. So the create is repeated once with debug logs in a
// temporary directory, the attempt removed again, and the logs' fatal errors returned.
func (o *OCI) diagnoseCreate(ctx context.Context, spec sandbox.ContainerSpec) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
	defer cancel()
	if err := o.Stop(ctx, spec.ID); err != nil {
		return ""
	}
	dir, err := os.MkdirTemp("", "moat-runsc-diag-")
	if err != nil {
		return ""
	}
	defer os.RemoveAll(dir)
	_ = o.runCreate(ctx, spec, []string{"--debug-log=" + dir + "/"}, nil, nil)
	_ = o.Stop(ctx, spec.ID)
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	// The gofer's and boot's own reasons first; create's only repeats the sync error.
	rank := func(f string) int {
		if strings.Contains(filepath.Base(f), "create") {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(files, func(a, b string) int { return rank(a) - rank(b) })
	var reasons []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			_, why, ok := strings.Cut(l, "FATAL ERROR: ")
			if ok && !slices.Contains(reasons, why) {
				reasons = append(reasons, why)
			}
		}
	}
	return truncate(strings.Join(reasons, "; "), 2000)
}

// Stop kills every process of the container, waits for it to stop and deletes the
// runtime's state (and thereby its cgroup). An unknown container is not an error. Stop
// carries on when ctx is cancelled, bounded by the driver's timeout.
func (o *OCI) Stop(ctx context.Context, id string) error {
	if !validID(id) {
		return fmt.Errorf("stopping container %q: bad id: %w", id, errdefs.ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
	defer cancel()
	st, err := o.state(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		o.netns.Delete(id)
		if err := removeCgroups(id); err != nil {
			return fmt.Errorf("stopping container %s: %w", id, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("stopping container %s: %w", id, err)
	}
	if st.Status != "stopped" {
		if st.Status == "paused" {
			// Frozen processes die only once thawed, and runsc cannot delete a paused
			// container (it panics on the paused => stopped transition).
			if err := o.Resume(ctx, id); err != nil {
				o.log.Debug("resume for kill", "id", id, "err", err)
			}
		}
		if err := o.killAndWait(ctx, id); err != nil {
			o.log.Debug("container not seen stopped after SIGKILL; forcing delete", "id", id, "err", err)
		}
	}
	if _, err := o.control(ctx, id, deleteOpts{force: true}.args(id)); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("stopping container %s: %w", id, err)
	}
	o.netns.Delete(id)
	if err := removeCgroups(id); err != nil {
		return fmt.Errorf("stopping container %s: %w", id, err)
	}
	return nil
}

// killAndWait sends SIGKILL to every process of container id and waits, a third of the
// driver's timeout at most (so that a delete after it still has time), for it to stop.
func (o *OCI) killAndWait(ctx context.Context, id string) error {
	_, err := o.control(ctx, id, killOpts{all: true, signal: "KILL"}.args(id))
	if err != nil && unknownFlag(err) {
		// A runtime without kill --all: kill the init; the pid namespace does the rest.
		_, err = o.control(ctx, id, killOpts{signal: "KILL"}.args(id))
	}
	if err != nil {
		return err
	}
	if err := o.waitStatus(ctx, id, "stopped", o.timeout/3); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// unknownFlag recognises a runtime's complaint about an unsupported flag.
func unknownFlag(err error) bool {
	m := err.Error()
	return strings.Contains(m, "flag provided but not defined") || strings.Contains(m, "unknown flag") ||
		strings.Contains(m, "unrecognized option")
}

// removeCgroups removes the container's cgroup directories, /moat/<id> in every hierarchy.
// The runtime's delete normally has; a failed runsc create leaves them behind, and a runtime
// interrupted half-way (killed mid-create under load) can leave a process with no runtime
// state. The cgroup is the authority: whatever still runs in it is thawed and killed first.
func removeCgroups(id string) error {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/moat/" + id)
	if d := "/sys/fs/cgroup/moat/" + id; DetectCgroupMode() == CgroupUnified {
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	killCgroupProcs(dirs)
	var errs []error
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// killCgroupProcs SIGKILLs every process left in the cgroup directories dirs (thawing a
// frozen v1 freezer cgroup first) and waits up to two seconds for them to be gone.
func killCgroupProcs(dirs []string) {
	for _, d := range dirs {
		if strings.Contains(d, "/freezer/") {
			_ = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0)
		} else if _, err := os.Stat(filepath.Join(d, "cgroup.freeze")); err == nil {
			_ = os.WriteFile(filepath.Join(d, "cgroup.freeze"), []byte("0"), 0)
		}
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left := 0
		for _, d := range dirs {
			data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					left++
				}
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return
		}
	}
}

// Running reports whether the container exists and its init process is alive (created,
// running or paused). An unknown container is (false, nil).
func (o *OCI) Running(ctx context.Context, id string) (bool, error) {
	st, err := o.state(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("container %s: %w", id, err)
	}
	switch st.Status {
	case "running", "created", "paused", "pausing":
		return true, nil
	}
	return false, nil
}

// Pause freezes every process of the container. Unknown containers are ErrNotFound.
//
// cgroup v1's freezer can miss a busy container (processes forking or running when the
// kernel walks them): runc then thaws it again and fails with "unable to freeze". That is
// transient, so Pause tries again a few times before it gives up.
func (o *OCI) Pause(ctx context.Context, id string) error {
	if f, ok := freezerOf(id); ok && o.pauseByCgroup() {
		if err := f.freeze(); err != nil {
			return fmt.Errorf("pausing container %s: %w", id, err)
		}
		return nil
	}
	var err error
	for attempt := 0; attempt < pauseAttempts; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("pausing container %s: %w (after: %w)", id, ctx.Err(), err)
			case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
			}
		}
		if _, err = o.control(ctx, id, pauseOpts{}.args(id)); err == nil || !freezeMissed(err) {
			break
		}
		o.log.Debug("the freezer missed the container; trying again", "id", id, "attempt", attempt+1)
	}
	if err != nil {
		return fmt.Errorf("pausing container %s: %w", id, err)
	}
	return nil
}

// pauseByCgroup says whether Pause freezes the container's cgroup itself (runc, crun,
// runsc 2022-12) or asks the runtime (a current runsc: see freeze.go). Resume thaws
// whichever it finds.
func (o *OCI) pauseByCgroup() bool { return o.name != "runsc" || !o.current }

// pauseAttempts bounds Pause's tries when the freezer misses a busy container.
const pauseAttempts = 5

// freezeMissed says whether err is runc's transient failure to freeze a busy cgroup.
func freezeMissed(err error) bool { return strings.Contains(err.Error(), "unable to freeze") }

// Resume thaws a paused container. Unknown containers are ErrNotFound.
func (o *OCI) Resume(ctx context.Context, id string) error {
	if f, ok := freezerOf(id); ok {
		if frozen, err := f.frozen(); err == nil && frozen {
			if err := f.thaw(); err != nil {
				return fmt.Errorf("resuming container %s: %w", id, err)
			}
			return nil
		}
	}
	// Not frozen by its cgroup: paused by the runtime itself (a current runsc, or an older
	// moat's runsc), or not paused at all (the runtime says so).
	if _, err := o.control(ctx, id, resumeOpts{}.args(id)); err != nil {
		return fmt.Errorf("resuming container %s: %w", id, err)
	}
	return nil
}

// State is what `<runtime> state` reports about a container.
type State struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"` // creating, created, running, paused, stopped
	Bundle string `json:"bundle"`
}

// State returns the runtime's view of the container; ErrNotFound when it does not exist.
// Under runsc, Pid is the sandbox (sentry) process.
func (o *OCI) State(ctx context.Context, id string) (State, error) {
	st, err := o.state(ctx, id)
	if err != nil {
		return State{}, fmt.Errorf("container %s: %w", id, err)
	}
	return st, nil
}

func (o *OCI) state(ctx context.Context, id string) (State, error) {
	if o.name == "runsc" {
		// runsc cannot answer about a sandbox whose processes are frozen (it waits for them).
		if f, ok := freezerOf(id); ok {
			if frozen, err := f.frozen(); err == nil && frozen {
				return State{ID: id, Status: "paused"}, nil
			}
		}
	}
	out, err := o.control(ctx, id, stateOpts{}.args(id))
	if err != nil {
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(out, &st); err != nil {
		return State{}, fmt.Errorf("%s state %s: decoding %q: %w", o.name, id, truncate(string(out), 200), err)
	}
	return st, nil
}

// exists reports whether the runtime knows container id. runc and crun keep a container's
// state in the directory <root>/<id>: when it is absent the answer needs no run of the
// runtime (one fork/exec less per create); otherwise, and for runsc, the runtime is asked.
func (o *OCI) exists(ctx context.Context, id string) (bool, error) {
	if filepath.IsLocal(id) && !o.mayExist(id) {
		return false, nil
	}
	_, err := o.state(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errdefs.ErrNotFound):
		return false, nil
	}
	return false, err
}

// mayExist says whether the state directory holds anything of container id, without
// running the runtime (a runtime invocation costs 10–30 ms): runc and crun keep a
// directory <root>/<id>, runsc (2022 and current) files <root>/<id>_sandbox:<sandbox>.*.
func (o *OCI) mayExist(id string) bool {
	if o.name != "runsc" {
		_, err := os.Lstat(filepath.Join(o.root, id))
		return !errors.Is(err, fs.ErrNotExist)
	}
	m, err := filepath.Glob(filepath.Join(o.root, id+"_sandbox:*"))
	return err != nil || len(m) > 0
}

// List returns the IDs of the containers in the driver's state directory.
func (o *OCI) List(ctx context.Context) ([]string, error) {
	// No state directory yet: no containers. (runc 1.1 lists none; runc ≥ 1.2 fails with
	// "open <root>: no such file or directory".)
	if _, err := os.Stat(o.root); errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil
	}
	out, err := o.run(ctx, "", listOpts{}.args())
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	var sts []State
	if s := strings.TrimSpace(string(out)); s != "" && s != "null" {
		if err := json.Unmarshal(out, &sts); err != nil {
			return nil, fmt.Errorf("%s list: decoding %q: %w", o.name, truncate(string(out), 200), err)
		}
	}
	ids := make([]string, 0, len(sts))
	for _, s := range sts {
		ids = append(ids, s.ID)
	}
	return ids, nil
}

// waitRunning waits until the container runs; a container that stops instead is an error.
func (o *OCI) waitRunning(ctx context.Context, id string) error {
	return o.waitStatus(ctx, id, "running", o.timeout)
}

// waitStatus polls the container's state until it is want, for at most limit. A container
// that reaches "stopped" while waiting for something else fails at once.
func (o *OCI) waitStatus(ctx context.Context, id, want string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		st, err := o.state(ctx, id)
		if err != nil {
			return err
		}
		if st.Status == want {
			return nil
		}
		if st.Status == "stopped" {
			return fmt.Errorf("container stopped: %w", errdefs.ErrConflict)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for container %s to be %s (is %s): %w", id, want, st.Status, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// command builds an invocation of the runtime: global flags, then args.
func (o *OCI) command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, o.binary, append(o.globalArgs(), args...)...)
	cmd.WaitDelay = time.Second
	return cmd
}

// GlobalArgs are the global flags the driver passes before every subcommand (for
// benchmarks that run the runtime directly exactly as moat does).
func (o *OCI) GlobalArgs() []string { return o.globalArgs() }

// globalArgs renders the driver's global flags.
func (o *OCI) globalArgs() []string {
	g := globalOpts{root: o.root, extra: o.extra}
	if o.name == "runsc" {
		// The sandbox's network is the namespace runsc is started in (S).
		g.network = "host"
		if o.current {
			g.network = "sandbox"
		}
		g.ociSeccomp = o.ociSeccomp
		if o.overlayNone {
			g.overlay2 = "none"
		}
		if o.current {
			g.goferNet = "new"
		}
	}
	return g.args()
}

// run executes one runtime subcommand about container id (empty: none) with the driver's
// timeout and returns its stdout. A failure carries the runtime's stderr; the runtime's
// "no such container" is ErrNotFound.
func (o *OCI) run(ctx context.Context, id string, args []string) ([]byte, error) {
	return o.runIn(ctx, "", id, args)
}

// control runs a subcommand about an existing container. runsc (2022) reaches its
// sandbox through an abstract unix socket, which belongs to the sandbox's network namespace
// (S), so its commands run from inside S; from anywhere else runsc even reports a running
// container as stopped.
func (o *OCI) control(ctx context.Context, id string, args []string) ([]byte, error) {
	netns, err := o.netnsOf(ctx, id)
	if err != nil {
		return nil, err
	}
	return o.runIn(ctx, netns, id, args)
}

// netnsAnnotation records, in a runsc container's config.json, the network namespace runsc
// was started in, so that any later command (from a restarted daemon too) finds it.
const netnsAnnotation = "dev.moat.netns"

// netnsOf returns the network namespace runtime commands about container id must run in:
// "" (the daemon's) except for runsc, where it is the sandbox's S, found in the container's
// bundle. A container whose namespace cannot be found is addressed from the daemon's.
func (o *OCI) netnsOf(ctx context.Context, id string) (string, error) {
	if o.name != "runsc" {
		return "", nil
	}
	if v, ok := o.netns.Load(id); ok {
		return v.(string), nil
	}
	out, err := o.run(ctx, id, stateOpts{}.args(id))
	if err != nil {
		return "", err
	}
	var st State
	if err := json.Unmarshal(out, &st); err != nil || st.Bundle == "" {
		return "", nil
	}
	data, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		o.log.Warn("container bundle unreadable; addressing it from the host namespace", "id", id, "err", err)
		return "", nil
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return "", nil
	}
	ns := spec.Annotations[netnsAnnotation]
	if ns != "" {
		o.netns.Store(id, ns)
	}
	return ns, nil
}

// runIn is run from inside the network namespace netns (empty: the daemon's).
func (o *OCI) runIn(ctx context.Context, netns, id string, args []string) ([]byte, error) {
	if id != "" && !validID(id) {
		return nil, fmt.Errorf("container id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := o.command(ctx, args)
	var stdout, stderr strings.Builder
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	var err error
	if netns != "" {
		if err = startInNetNS(netns, cmd); err == nil {
			err = cmd.Wait()
		} else if errors.Is(err, os.ErrNotExist) && cmd.Process == nil {
			// The namespace is gone (torn down first): run from here; delete works.
			o.log.Warn("network namespace gone; addressing container from the host namespace", "id", id, "netns", netns)
			err = cmd.Run()
		}
	} else {
		err = cmd.Run()
	}
	if err != nil {
		msg := cleanRuntimeError(stderr.String())
		if msg == "" {
			msg = cleanRuntimeError(stdout.String())
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		err = fmt.Errorf("%s %s: %w: %s", o.name, args[0], err, msg)
		if id != "" && args[0] != "start" && o.isNotExist(msg, id) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
		}
		return nil, err
	}
	return []byte(stdout.String()), nil
}

// isNotExist recognises each runtime's "no such container" message for container id.
func (o *OCI) isNotExist(msg, id string) bool {
	m := strings.ToLower(msg)
	switch o.name {
	case "runc":
		return strings.Contains(m, "container does not exist")
	case "crun":
		// error opening file `<root>/<id>/status`: No such file or directory
		return strings.Contains(m, "no such file or directory") &&
			strings.Contains(msg, filepath.Join(o.root, id))
	case "runsc":
		// loading container: file does not exist
		return strings.Contains(m, "loading container") && strings.Contains(m, "file does not exist")
	}
	return false
}

// cleanRuntimeError turns a runtime's stderr into one readable line: logrus lines
// (time=... level=error msg="...") become their messages; blank lines go.
func cleanRuntimeError(s string) string {
	var parts []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if m, ok := logrusMsg(line); ok {
			line = m
		}
		line = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == utf8.RuneError {
				return '?' // no terminal escapes or line breaks in logs
			}
			return r
		}, line)
		if !slices.Contains(parts, line) { // runc repeats its retries
			parts = append(parts, line)
		}
	}
	return truncate(strings.Join(parts, "; "), 2000)
}

// logrusMsg extracts msg="..." from a logrus text line.
func logrusMsg(line string) (string, bool) {
	if !strings.HasPrefix(line, "time=") {
		return "", false
	}
	i := strings.Index(line, ` msg="`)
	if i < 0 {
		return "", false
	}
	rest := line[i+len(" msg="):]
	// find the closing quote, honouring escapes
	for j := 1; j < len(rest); j++ {
		if rest[j] == '\\' {
			j++
			continue
		}
		if rest[j] == '"' {
			var msg string
			if err := json.Unmarshal([]byte(rest[:j+1]), &msg); err != nil {
				return rest[1:j], true
			}
			return msg, true
		}
	}
	return "", false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Update changes a running container's cgroup limits (memory with memory+swap, CPU quota,
// pids) to l, with the same rendering as BuildSpec. runc and crun only: runsc cannot
// change a running sandbox's limits (ErrUnavailable).
func (o *OCI) Update(ctx context.Context, id string, l sandbox.Limits) error {
	if o.name == "runsc" {
		return fmt.Errorf("runsc cannot change the limits of a running sandbox: %w", errdefs.ErrUnavailable)
	}
	l = effectiveLimits(l)
	host := detectHost()
	res := resources(l, host)
	err := writeLimits(id, res, host)
	if err == nil {
		return nil // written directly: no runtime invocation (~30 ms) needed
	}
	o.log.Debug("writing cgroup limits directly failed; using the runtime", "id", id, "err", err)
	res.Devices = nil // unchanged
	data, err := json.Marshal(res)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := o.command(ctx, []string{"update", "--resources", "-", id})
	cmd.Stdin = strings.NewReader(string(data))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("updating limits of %s: %w: %s", id, err, cleanRuntimeError(string(out)))
	}
	return nil
}
