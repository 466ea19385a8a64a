package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Memory checkpoint: runc and crun save a container's processes with CRIU, runsc with its
// own `checkpoint` (the Sentry serialises its kernel). Whether either works for moat's
// sandboxes on this host is MemoryCheckpoint's answer; Checkpoint and Restore are the
// runtime commands themselves (notes/ckpt.md has what was found on the reference host).

// checkpointOpts: `checkpoint --image-path D [--work-path D] [--leave-running] ID`.
type checkpointOpts struct {
	imagePath    string
	leaveRunning bool
}

func (c checkpointOpts) args(id string) []string {
	// runc writes CRIU's dump.log to the work path; runsc ignores it.
	a := []string{"checkpoint", "--image-path", c.imagePath, "--work-path", c.imagePath}
	if c.leaveRunning {
		a = append(a, "--leave-running")
	}
	return append(a, id)
}

// restoreOpts: `restore --image-path D --work-path D --bundle B --detach ID`.
type restoreOpts struct {
	imagePath, bundle string
}

func (r restoreOpts) args(id string) []string {
	return []string{"restore", "--image-path", r.imagePath, "--work-path", r.imagePath, "--bundle", r.bundle, "--detach", id}
}

// criuFacts is what decideMemoryCheckpoint needs to know about CRIU on this host.
type criuFacts struct {
	path   string // "" when criu is not installed
	ok     bool   // `criu check` passed
	errors string // its "Error (...)" lines otherwise
}

// decideMemoryCheckpoint says whether runtime name, run as moat runs it (hostNetwork: runsc
// with --network=host), can checkpoint a sandbox's memory. Pure.
func decideMemoryCheckpoint(name string, hostNetwork bool, criu criuFacts) sandbox.MemorySupport {
	if name == "runsc" {
		if hostNetwork {
			return sandbox.MemorySupport{
				Reason: "moat runs runsc with --network=host inside the sandbox's network namespace, and runsc refuses to checkpoint such a sandbox (\"checkpoint not supported when using hostinet\"); its own network stack (--network=sandbox) does not start on this host",
				Fix:    "none with this runsc: a gVisor whose --network=sandbox works here and that can save a listening TCP socket (runsc 2022-12 fails with \"endpoint still has waiters upon save\" and stops the sandbox; moat-init always listens)",
			}
		}
		return sandbox.MemorySupport{OK: true, Reason: "runsc checkpoint"}
	}
	if criu.path == "" {
		return sandbox.MemorySupport{
			Reason: name + " checkpoints with CRIU, which is not installed",
			Fix:    "apt-get install criu (CRIU ≥ 4.1 on kernels from 6.13)",
		}
	}
	if !criu.ok {
		s := sandbox.MemorySupport{Reason: "`criu check` fails: " + criu.errors}
		if strings.Contains(criu.errors, "vdso") {
			s.Reason += " (the kernel maps its vDSO clock pages separately, [vvar_vclock], since Linux 6.13; CRIU learnt that in 4.1)"
			s.Fix = "CRIU ≥ 4.1 (Debian 12 has 3.17), e.g. from Debian 13"
		} else {
			s.Fix = "see `criu check -v4`"
		}
		return s
	}
	return sandbox.MemorySupport{OK: true, Reason: "criu check passes (" + criu.path + ")"}
}

// criuErrors keeps the "Error (...)" lines of CRIU's output, without their source
// locations, joined by "; ".
func criuErrors(out string) string {
	var parts []string
	for _, l := range strings.Split(out, "\n") {
		i := strings.Index(l, "Error (")
		if i < 0 {
			continue
		}
		msg := l[i:]
		if j := strings.Index(msg, "): "); j >= 0 {
			msg = msg[j+3:]
		}
		msg = strings.TrimSpace(msg)
		if msg != "" && !strings.HasPrefix(msg, "exited, status=") && !slices.Contains(parts, msg) {
			parts = append(parts, msg)
		}
	}
	if len(parts) == 0 {
		return truncate(strings.TrimSpace(out), 300)
	}
	return truncate(strings.Join(parts, "; "), 600)
}

// networkOf is the last --network= value of a runtime's global flags ("" for none).
func networkOf(args []string) string {
	n := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--network="); ok {
			n = v
		}
	}
	return n
}

// probeCRIU runs `criu check` (about 20 ms).
func probeCRIU(ctx context.Context) criuFacts {
	p, err := exec.LookPath("criu")
	if err != nil {
		return criuFacts{}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "check").CombinedOutput()
	if err == nil {
		return criuFacts{path: p, ok: true}
	}
	return criuFacts{path: p, errors: criuErrors(string(out) + "\n" + err.Error())}
}

// MemoryCheckpoint says whether this runtime can checkpoint a moat sandbox's memory on this
// host; the answer is probed once (runc, crun: `criu check`) and kept.
func (o *OCI) MemoryCheckpoint(ctx context.Context) sandbox.MemorySupport {
	o.memOnce.Do(func() {
		var criu criuFacts
		if o.name != "runsc" {
			criu = probeCRIU(context.WithoutCancel(ctx))
		}
		o.mem = decideMemoryCheckpoint(o.name, networkOf(o.globalArgs()) == "host", criu)
	})
	return o.mem
}

// Checkpoint saves container id's processes into dir (which must exist, 0700): runsc's
// checkpoint or CRIU through runc/crun. The container stops afterwards unless
// leaveRunning. On failure the runtime's message is returned (for runc, CRIU's errors
// from dir/dump.log).
//
// runsc (2022-12) with --leave-running hangs until killed (measured: the 60 s timeout),
// so it is refused with ErrUnavailable.
func (o *OCI) Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) error {
	if leaveRunning && o.name == "runsc" {
		return fmt.Errorf("checkpointing container %s: runsc checkpoint --leave-running hangs: %w", id, errdefs.ErrUnavailable)
	}
	if _, err := o.control(ctx, id, checkpointOpts{imagePath: dir, leaveRunning: leaveRunning}.args(id)); err != nil {
		if data, rerr := os.ReadFile(filepath.Join(dir, "dump.log")); rerr == nil {
			err = fmt.Errorf("%w (criu: %s)", err, criuErrors(string(data)))
		}
		return fmt.Errorf("checkpointing container %s: %w", id, err)
	}
	if o.name == "runsc" && !leaveRunning {
		// runsc 2022-12 has ended the sandbox when its checkpoint returns; a current one
		// returns while the sandbox process is still on its way out (state "running",
		// its control server gone).
		if err := o.waitStatus(ctx, id, "stopped", o.timeout/3); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("checkpointing container %s: waiting for it to end: %w", id, err)
		}
	}
	return nil
}

// Restore creates container id from the checkpoint in dir with the bundle in bundleDir
// (its config.json as written at the first start) and returns once it runs again. runsc is
// started inside netns like at Start. The restored processes' output goes to out.
func (o *OCI) Restore(ctx context.Context, id, bundleDir, dir, netns string, out *os.File) error {
	if !validID(id) {
		return fmt.Errorf("restoring container %q: bad id", id)
	}
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	cmd := o.command(cctx, restoreOpts{imagePath: dir, bundle: bundleDir}.args(id))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var err error
	if o.name == "runsc" {
		o.netns.Store(id, netns)
		if netns == "" {
			err = cmd.Run()
		} else if err = startInNetNS(netns, cmd); err == nil {
			err = cmd.Wait()
		}
	} else {
		err = cmd.Run()
	}
	if err != nil {
		msg := ""
		if data, rerr := os.ReadFile(filepath.Join(dir, "restore.log")); rerr == nil {
			msg = " (criu: " + criuErrors(string(data)) + ")"
		}
		return fmt.Errorf("restoring container %s: %s restore: %w%s", id, o.name, err, msg)
	}
	if err := o.waitRunning(ctx, id); err != nil {
		return fmt.Errorf("restoring container %s: %w", id, err)
	}
	return nil
}
