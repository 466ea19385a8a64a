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
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Names are the runtimes moat knows, fastest first.
var Names = []string{"runc", "crun", "runsc"}

// DefaultTimeout bounds each runtime invocation when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Options configure one runtime driver. Zero values pick the defaults.
type Options struct {
	// Binary is the runtime executable; default: the name looked up in PATH.
	Binary string
	// Root is the runtime's state directory (--root); default /run/moat/runtime/<name>.
	// Keeping it separate from the runtime's default root means moat only ever lists and
	// deletes its own containers.
	Root string
	// ExtraFlags are global flags added before every subcommand (e.g. "--platform=kvm"
	// for runsc, "--debug").
	ExtraFlags []string
	// Timeout bounds each runtime invocation; default DefaultTimeout.
	Timeout time.Duration
}

// OCI is a sandbox.Runtime backed by one OCI runtime binary. It holds no per-container
// state: everything is asked of the runtime, so a restarted daemon picks up where it left.
// It is safe for concurrent use.
type OCI struct {
	name    string
	binary  string
	root    string
	extra   []string
	timeout time.Duration
	log     *slog.Logger

	// nofileMax caps the sandbox's RLIMIT_NOFILE when this process cannot raise hard
	// limits (no CAP_SYS_RESOURCE): the runtime could not either. 0: no cap.
	nofileMax uint64

	// runsc only: flags this runsc version supports.
	ociSeccomp  bool // --oci-seccomp: enforce the spec's seccomp profile inside gVisor
	overlayNone bool // --overlay2=none: root writes go to the sandbox's drive, not memory
}

var _ sandbox.Runtime = (*OCI)(nil)

// New returns the driver for the runtime called name ("runc", "crun" or "runsc"). It fails
// with ErrInvalidArgument for an unknown name and ErrUnavailable when the binary is missing.
// It does not check that the runtime works on this host; Probe does.
func New(name string, opts Options, log *slog.Logger) (*OCI, error) {
	if !slices.Contains(Names, name) {
		return nil, fmt.Errorf("runtime %q: %w", name, errdefs.ErrInvalidArgument)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	bin := opts.Binary
	if bin == "" {
		p, err := Available(name)
		if err != nil {
			return nil, err
		}
		bin = p
	} else if _, err := exec.LookPath(bin); err != nil {
		return nil, fmt.Errorf("runtime %s binary %s: %v: %w", name, bin, err, errdefs.ErrUnavailable)
	}
	o := &OCI{
		name:    name,
		binary:  bin,
		root:    opts.Root,
		extra:   slices.Clone(opts.ExtraFlags),
		timeout: opts.Timeout,
		log:     log.With("runtime", name),
	}
	if o.root == "" {
		o.root = filepath.Join("/run/moat/runtime", name)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	if max, ok := nofileCeiling(); ok {
		o.nofileMax = max
		o.log.Warn("no CAP_SYS_RESOURCE: sandboxes get this process' RLIMIT_NOFILE hard limit", "limit", max)
	}
	if name == "runsc" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		flags, _ := exec.CommandContext(ctx, bin, "flags").CombinedOutput()
		o.ociSeccomp = hasFlag(flags, "oci-seccomp")
		o.overlayNone = hasFlag(flags, "overlay2")
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
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(data), "\n") {
		v, ok := strings.CutPrefix(l, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil || caps&(1<<unix.CAP_SYS_RESOURCE) != 0 {
			return 0, false
		}
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Max >= 65536 {
			return 0, false
		}
		return rl.Max, true
	}
	return 0, false
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

// Name is the runtime's name: "runc", "crun" or "runsc".
func (o *OCI) Name() string { return o.name }

// Binary is the path of the runtime executable the driver runs.
func (o *OCI) Binary() string { return o.binary }

// Root is the runtime's state directory.
func (o *OCI) Root() string { return o.root }

// Start writes the hardened config.json (BuildSpec) into spec.BundleDir, creates and starts
// the container detached, and returns once its init process runs. moat-init's stdout and
// stderr are appended to spec.LogPath; its stdin is /dev/null. Under runsc, the runtime is
// started from a thread inside spec.NetNS (host network mode inside the sandbox's
// namespace). On error the container is removed again.
func (o *OCI) Start(ctx context.Context, spec sandbox.ContainerSpec) (err error) {
	s, err := BuildSpec(spec, o.name)
	if err != nil {
		return fmt.Errorf("starting container %s: %w", spec.ID, err)
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
	if err := os.WriteFile(filepath.Join(spec.BundleDir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("starting container %s: writing spec: %w", spec.ID, err)
	}
	if err := os.MkdirAll(o.root, 0o700); err != nil {
		return fmt.Errorf("starting container %s: %w", spec.ID, err)
	}
	logf, err := os.OpenFile(spec.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_CLOEXEC, 0o640)
	if err != nil {
		return fmt.Errorf("starting container %s: opening log: %w", spec.ID, err)
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, io.SeekEnd)

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

	if err := o.create(ctx, spec, logf, logStart); err != nil {
		return err
	}
	if _, err := o.run(ctx, spec.ID, startOpts{}.args(spec.ID)); err != nil {
		return fmt.Errorf("starting container %s: %w", spec.ID, err)
	}
	if err := o.waitRunning(ctx, spec.ID); err != nil {
		if tail := readLogTail(spec.LogPath, logStart); tail != "" {
			err = fmt.Errorf("%w (init output: %s)", err, tail)
		}
		return fmt.Errorf("starting container %s: %w", spec.ID, err)
	}
	o.log.Debug("container started", "id", spec.ID, "took", time.Since(begin))
	return nil
}

// create runs `<runtime> create`. The runtime's own stdio becomes the container's, so it is
// the log file; the runtime's error text lands there too and is read back on failure.
func (o *OCI) create(ctx context.Context, spec sandbox.ContainerSpec, logf *os.File, logStart int64) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := o.command(ctx, createOpts{bundle: spec.BundleDir}.args(spec.ID))
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Own session: a signal to the daemon's terminal or process group never reaches
	// the runtime or the container it leaves behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var err error
	if o.name == "runsc" {
		err = startInNetNS(spec.NetNS, cmd)
		if err == nil {
			err = cmd.Wait()
		}
	} else {
		err = cmd.Run()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return fmt.Errorf("creating container %s: %s create: %w: %s", spec.ID, o.name, err, readLogTail(spec.LogPath, logStart))
	}
	return nil
}

// Stop kills every process of the container, waits for it to stop and deletes the
// runtime's state (and thereby its cgroup). An unknown container is not an error. Stop
// carries on when ctx is cancelled, bounded by the driver's timeout.
func (o *OCI) Stop(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
	defer cancel()
	st, err := o.state(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stopping container %s: %w", id, err)
	}
	if st.Status != "stopped" {
		if _, err := o.run(ctx, id, killOpts{all: true, signal: "KILL"}.args(id)); err != nil {
			o.log.Debug("kill", "id", id, "err", err)
		}
		if st.Status == "paused" {
			// Frozen processes die only once thawed.
			if _, err := o.run(ctx, id, resumeOpts{}.args(id)); err != nil {
				o.log.Debug("resume for kill", "id", id, "err", err)
			}
		}
		if err := o.waitStatus(ctx, id, "stopped"); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			o.log.Warn("container did not stop after SIGKILL; forcing delete", "id", id, "err", err)
		}
	}
	if _, err := o.run(ctx, id, deleteOpts{force: true}.args(id)); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return fmt.Errorf("stopping container %s: %w", id, err)
	}
	return nil
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
func (o *OCI) Pause(ctx context.Context, id string) error {
	if _, err := o.run(ctx, id, pauseOpts{}.args(id)); err != nil {
		return fmt.Errorf("pausing container %s: %w", id, err)
	}
	return nil
}

// Resume thaws a paused container. Unknown containers are ErrNotFound.
func (o *OCI) Resume(ctx context.Context, id string) error {
	if _, err := o.run(ctx, id, resumeOpts{}.args(id)); err != nil {
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
	out, err := o.run(ctx, id, stateOpts{}.args(id))
	if err != nil {
		return State{}, err
	}
	var st State
	if err := json.Unmarshal(out, &st); err != nil {
		return State{}, fmt.Errorf("%s state %s: decoding %q: %w", o.name, id, truncate(string(out), 200), err)
	}
	return st, nil
}

// List returns the IDs of the containers in the driver's state directory.
func (o *OCI) List(ctx context.Context) ([]string, error) {
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
	return o.waitStatus(ctx, id, "running")
}

// waitStatus polls the container's state until it is want, bounded by the timeout. A
// container that reaches "stopped" while waiting for "running" fails at once.
func (o *OCI) waitStatus(ctx context.Context, id, want string) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
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

// globalArgs renders the driver's global flags.
func (o *OCI) globalArgs() []string {
	g := globalOpts{root: o.root, extra: o.extra}
	if o.name == "runsc" {
		// The sandbox's network is the namespace runsc is started in (S).
		g.network = "host"
		g.ociSeccomp = o.ociSeccomp
		if o.overlayNone {
			g.overlay2 = "none"
		}
	}
	return g.args()
}

// run executes one runtime subcommand about container id (empty: none) with the driver's
// timeout and returns its stdout. A failure carries the runtime's stderr; the runtime's
// "no such container" is ErrNotFound.
func (o *OCI) run(ctx context.Context, id string, args []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := o.command(ctx, args)
	var stdout, stderr strings.Builder
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
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
		parts = append(parts, line)
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

// readLogTail returns what was appended to the log file at path since offset, cleaned and
// bounded: the runtime's error text when create fails.
func readLogTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 8 << 10
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil || end <= offset {
		return ""
	}
	if end-offset > max {
		offset = end - max
	}
	buf := make([]byte, end-offset)
	n, _ := f.ReadAt(buf, offset)
	return cleanRuntimeError(string(buf[:n]))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
