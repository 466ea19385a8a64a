package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatdev/moat/api/envd/process"
	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestKill9DuringCreate: a `moat serve` killed with SIGKILL at several points of a create
// (while the drive is being copied, once it exists, once the root filesystem is mounted,
// once the container exists, under runc and runsc) leaves no sandbox behind after its restart: no record, no
// drive, no mounts, run directory, cgroups, links or loop devices of it; the sandboxes
// made before the crash are still there and start.
func TestKill9DuringCreate(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := testutil.Binaries(t)
	data := t.TempDir()
	run := "/run/moat-test-" + shortID()
	sock := filepath.Join(run, "moat.sock")
	idBase := strconv.FormatUint(uint64(testutil.IDBase(t)), 10)
	c := sdk.NewUnix(sock)
	ctx := context.Background()
	var cur *exec.Cmd
	kill := func() {
		if cur != nil {
			_ = cur.Process.Signal(syscall.SIGKILL)
			_ = cur.Wait()
			cur = nil
		}
	}
	start := func() {
		cmd := exec.Command(filepath.Join(bin, "moat"), "serve", "--data", data, "--run-dir", run, "--socket", sock, "--warm", "0", "--id-base", idBase)
		cmd.Stderr = testWriter{t}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cur = cmd
		testutil.WaitFor(t, 30*time.Second, "daemon socket", func() bool { return c.Ping(ctx) == nil })
	}
	var keep []v1.Sandbox
	t.Cleanup(func() {
		if cur == nil {
			start()
		}
		// Whatever is listed goes (on old code, the interrupted creates too); the daemon
		// is stopped even when that fails.
		list, _ := c.List(ctx)
		for _, sb := range list {
			_ = c.Delete(ctx, sb.ID)
		}
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if l, err := c.List(ctx); err == nil && len(l) == 0 {
				break
			}
		}
		_ = cur.Process.Signal(syscall.SIGTERM)
		_ = cur.Wait()
		(&env{t: t, dataDir: data, runDir: run}).assertNoLeaks(keep)
		os.RemoveAll(run)
	})
	start()
	small := v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 128 << 20}
	a, err := c.Create(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	keep = []v1.Sandbox{*a, *b}

	// Each point is a condition on the host that says how far the create has come; the
	// daemon is killed as soon as it holds.
	newDir := func() string {
		dirs, _ := filepath.Glob(filepath.Join(run, "sandboxes", "sb-*"))
		for _, d := range dirs {
			if id := filepath.Base(d); id != a.ID && id != b.ID {
				return id
			}
		}
		return ""
	}
	points := []struct {
		name    string
		runtime string // "": runc
		at      func() bool
	}{
		{"drive being copied", "", func() bool {
			tmp, _ := filepath.Glob(filepath.Join(data, "drives", ".tmp-sb-*"))
			return len(tmp) > 0
		}},
		{"drive made", "", func() bool {
			imgs, _ := filepath.Glob(filepath.Join(data, "drives", "sb-*.img"))
			return len(imgs) > 2
		}},
		{"root filesystem mounted", "", func() bool {
			id := newDir()
			if id == "" {
				return false
			}
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			return strings.Contains(string(mounts), filepath.Join(run, "sandboxes", id, "rootfs")+" ")
		}},
		{"container made", "", func() bool {
			id := newDir()
			_, err := os.Stat(filepath.Join(run, "runtime", "runc", id))
			return id != "" && err == nil
		}},
		{"runsc container made", "runsc", func() bool {
			id := newDir()
			_, err := os.Stat("/sys/fs/cgroup/memory/moat/" + id)
			return id != "" && err == nil
		}},
	}
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			if cur == nil {
				start()
			}
			if _, err := exec.LookPath("runsc"); p.runtime == "runsc" && err != nil {
				t.Skip("runsc is not installed")
			}
			req := small
			req.Runtime = p.runtime
			done := make(chan error, 1)
			go func() {
				_, err := c.Create(ctx, req)
				done <- err
			}()
			hit := false
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
				if p.at() {
					hit = true
					break
				}
				select {
				case err := <-done:
					t.Fatalf("the create finished (%v) before the point was seen", err)
				default:
				}
				time.Sleep(200 * time.Microsecond)
			}
			kill()
			if !hit {
				t.Fatal("the point was never reached")
			}
			if err := <-done; err == nil {
				t.Fatal("the create succeeded although its daemon was killed")
			}
			// What the crashed daemon left: the interrupted sandbox's record.
			st, err := store.Open(filepath.Join(data, "moat.db"))
			if err != nil {
				t.Fatal(err)
			}
			all, err := st.List(ctx)
			st.Close()
			if err != nil {
				t.Fatal(err)
			}
			var orphans []v1.Sandbox
			for _, sb := range all {
				if sb.ID != a.ID && sb.ID != b.ID {
					orphans = append(orphans, v1.Sandbox{ID: sb.ID, HostUID: sb.HostIDs().Host})
				}
			}
			if len(orphans) != 1 {
				t.Fatalf("records after the crash: %d besides the two kept, want the interrupted one", len(orphans))
			}

			start()
			list, err := c.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			states := map[string]string{}
			for _, sb := range list {
				states[sb.ID] = sb.State
			}
			if len(states) != 2 || states[a.ID] != "running" || states[b.ID] != "stopped" {
				t.Fatalf("after the restart: %v, want only %s running and %s stopped", states, a.ID, b.ID)
			}
			st, err = store.Open(filepath.Join(data, "moat.db"))
			if err != nil {
				t.Fatal(err)
			}
			_, gerr := st.Get(ctx, orphans[0].ID)
			evs, _ := st.Events(ctx, orphans[0].ID)
			st.Close()
			if !errors.Is(gerr, errdefs.ErrNotFound) {
				t.Errorf("the interrupted sandbox's record: %v, want none", gerr)
			}
			if len(evs) == 0 || evs[len(evs)-1].Kind != "deleted" {
				t.Errorf("the interrupted sandbox's last event: %+v, want deleted", evs)
			}
			(&env{t: t, dataDir: data, runDir: run}).assertGone(orphans)
			var out strings.Builder
			if code, err := c.Exec(ctx, a.ID, sdk.ExecRequest{Cmd: "/bin/true", Stdout: &out}); err != nil || code != 0 {
				t.Errorf("the running sandbox made before the crash: exec: %d %v", code, err)
			}
			if _, err := c.Start(ctx, b.ID); err != nil {
				t.Errorf("starting the stopped sandbox made before the crash: %v", err)
			}
			if _, err := c.Stop(ctx, b.ID); err != nil {
				t.Error(err)
			}
		})
	}
}

// assertGone checks from the host that nothing of the given sandboxes remains while other
// sandboxes of the same daemon still run: mounts, run directory, drive, cgroups, runtime
// state, loop devices, links and processes.
func (e *env) assertGone(gone []v1.Sandbox) {
	t := e.t
	t.Helper()
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, sb := range gone {
		for _, line := range strings.Split(string(mounts), "\n") {
			if strings.Contains(line, filepath.Join(e.runDir, "sandboxes", sb.ID)) {
				t.Errorf("leaked mount: %s", line)
			}
		}
		for _, p := range []string{
			filepath.Join(e.runDir, "sandboxes", sb.ID),
			filepath.Join(e.runDir, "runtime", "runc", sb.ID),
			filepath.Join(e.runDir, "runtime", "runsc", sb.ID),
			filepath.Join(e.dataDir, "drives", sb.ID+".img"),
			"/sys/fs/cgroup/memory/moat/" + sb.ID,
			"/sys/fs/cgroup/pids/moat/" + sb.ID,
		} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("leaked %s", p)
			}
		}
		for _, f := range loops {
			data, _ := os.ReadFile(f)
			if strings.Contains(string(data), sb.ID) {
				t.Errorf("leaked loop device %s → %s", f, strings.TrimSpace(string(data)))
			}
		}
		for _, line := range strings.Split(string(links), "\n") {
			if strings.Contains(line, sb.ID[3:9]) {
				t.Errorf("leaked link for %s: %s", sb.ID, line)
			}
		}
		assertNoProcesses(t, sb)
	}
}

// containerPid is the host pid of moat-init (PID 1) of runc sandbox id.
func (e *env) containerPid(rt, id string) int {
	e.t.Helper()
	bin, args, err := daemon.RuntimeArgs(e.runDir, testRuntimePaths())(rt)
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := exec.Command(bin, append(args, "state", id)...).Output()
	if err != nil {
		e.t.Fatalf("%s state %s: %v", rt, id, err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 1 {
		e.t.Fatalf("%s state %s: %q: %v", rt, id, out, err)
	}
	return st.Pid
}

// TestInitDeathNoticed: when a sandbox's PID 1 dies (killed from the host), the daemon
// records the sandbox as stopped, with the reason and a transition event, well before its
// liveness sweep (here an hour) would: within seconds, not the sweep's 30.
func TestInitDeathNoticed(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.SweepInterval = time.Hour })
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt})
			if rt == "runsc" {
				// runsc's state from outside the sandbox's network namespace does not
				// know the sandbox process: every process of its cgroup (the gVisor
				// sandbox, which runs PID 1, and its gofer) is killed instead.
				procs, err := os.ReadFile("/sys/fs/cgroup/pids/moat/" + sb.ID + "/cgroup.procs")
				if err != nil {
					t.Skipf("no cgroup v1 pids hierarchy: %v", err)
				}
				for _, p := range strings.Fields(string(procs)) {
					pid, _ := strconv.Atoi(p)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			} else if err := syscall.Kill(e.containerPid(rt, sb.ID), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			var got *v1.Sandbox
			testutil.WaitFor(t, 5*time.Second, "the sandbox to be recorded as stopped", func() bool {
				got, _ = e.c.Get(context.Background(), sb.ID)
				return got != nil && got.State == "stopped"
			})
			if !strings.Contains(got.Error, "PID 1") {
				t.Errorf("reason %q does not say that PID 1 exited", got.Error)
			}
			evs, err := e.c.Events(context.Background(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if last := evs[len(evs)-1]; last.Kind != "transition" || !strings.HasPrefix(last.Detail, "running -> stopped: ") {
				t.Errorf("last event %+v, want the transition to stopped with its reason", last)
			}
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			if strings.Contains(string(mounts), filepath.Join(e.runDir, "sandboxes", sb.ID)) {
				t.Errorf("the stopped sandbox's mounts remain")
			}
			// It starts again, with its drive.
			if st, err := e.c.Start(context.Background(), sb.ID); err != nil || st.State != "running" {
				t.Fatalf("start after PID 1 died: %v", err)
			}
		})
	}
}

// TestOOMKillRecorded: a process the kernel's OOM killer ends in a sandbox (a Python
// memory hog above the sandbox's memory limit) is recorded: an "oom_kill" event with the
// count, the sandbox's oom_kills and last_oom_at, and, under runc (where the rest of the
// sandbox lives on), the exec ends with 137 and the reason. Under runsc the host's OOM
// killer ends the gVisor sandbox process, so the whole sandbox stops, with that reason.
func TestOOMKillRecorded(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.SweepInterval = time.Hour })
	hog := "import time\nl = []\nwhile True:\n    l.append(bytearray(8 << 20))\n"
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			ctx := context.Background()
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 128 << 20})
			var end sdk.ExitError
			var stderr strings.Builder
			code, execErr := e.c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "python3", Args: []string{"-c", hog}, Stderr: &stderr, End: &end})
			t.Logf("%s: exec: code %d err %v end %+v stderr %q", rt, code, execErr, end, stderr.String())
			if rt == "runc" {
				if execErr != nil || code != 137 || !strings.Contains(end.Reason, "OOM killer") {
					t.Errorf("the OOM-killed exec: code %d err %v end %+v, want 137 and the OOM killer as the reason", code, execErr, end)
				}
			}
			var got *v1.Sandbox
			testutil.WaitFor(t, 10*time.Second, "the OOM kill to be recorded", func() bool {
				got, _ = e.c.Get(ctx, sb.ID)
				return got != nil && got.OOMKills > 0
			})
			if got.LastOOMAt == nil || time.Since(*got.LastOOMAt) > time.Minute {
				t.Errorf("last_oom_at %v", got.LastOOMAt)
			}
			evs, err := e.c.Events(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, ev := range evs {
				if ev.Kind == "oom_kill" && strings.Contains(ev.Detail, "count=") {
					found = true
				}
			}
			if !found {
				t.Errorf("no oom_kill event with its count: %+v", evs)
			}
			if rt == "runc" {
				// The sandbox lives on, and its record says so.
				if got.State != "running" {
					t.Errorf("state %s after a process's OOM kill", got.State)
				}
				e.mustSh(sb.ID, "true")
				return
			}
			testutil.WaitFor(t, 10*time.Second, "the runsc sandbox to be recorded as stopped", func() bool {
				got, _ = e.c.Get(ctx, sb.ID)
				return got != nil && got.State == "stopped"
			})
			if !strings.Contains(got.Error, "OOM killer") {
				t.Errorf("reason %q does not name the OOM killer", got.Error)
			}
			// The exec's stream broke with the sandbox: it ended as an OOM-killed command
			// does (sdk endedByOOM), 137 with the reason.
			if execErr != nil || code != 137 || !strings.Contains(end.Reason, "OOM killer") {
				t.Errorf("the exec in the OOM-killed runsc sandbox: code %d err %v end %+v, want 137 and the OOM killer named", code, execErr, end)
			}
		})
	}
}

// TestWarmDeleteRetried: a warm sandbox whose deletion fails once (a file of its run
// directory made immutable, so the teardown cannot remove it) is deleted as soon as the
// cause is gone, without a daemon restart: record, drive, mounts, cgroups and run
// directory all go.
func TestWarmDeleteRetried(t *testing.T) {
	e := newEnvWarm(t, map[string]int{"runc": 1})
	ctx := context.Background()
	testutil.WaitFor(t, 60*time.Second, "the warm pool to fill", func() bool { return len(e.warmIDs()) == 1 })
	w, err := e.d.Store.Get(ctx, e.warmIDs()[0])
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.runDir, "sandboxes", w.ID)
	pinned := filepath.Join(dir, "bundle", "config.json")
	if out, err := exec.Command("chattr", "+i", pinned).CombinedOutput(); err != nil {
		t.Skipf("chattr +i %s: %v %s", pinned, err, out)
	}
	unpin := func() {
		if _, err := os.Stat(pinned); err != nil {
			return
		}
		if out, err := exec.Command("chattr", "-i", pinned).CombinedOutput(); err != nil {
			t.Errorf("chattr -i: %v %s", err, out)
		}
	}
	t.Cleanup(unpin)
	// A create the warm sandbox cannot serve (no such user) hands it back for deletion.
	if _, err := e.c.Create(ctx, v1.CreateSandboxRequest{User: "nosuchuser"}); !isNotFound(err) {
		t.Fatalf("create as a missing user: %v, want not found", err)
	}
	// The teardown ran and failed on the pinned file: everything else of the run
	// directory went, the record stays "deleting".
	testutil.WaitFor(t, 30*time.Second, "the first deletion attempt to fail", func() bool {
		top, _ := os.ReadDir(dir)
		inner, _ := os.ReadDir(filepath.Join(dir, "bundle"))
		return len(top) == 1 && top[0].Name() == "bundle" && len(inner) == 1
	})
	if sb, err := e.d.Store.Get(ctx, w.ID); err != nil || sb.State != "deleting" {
		t.Fatalf("after the failed attempt: %+v %v, want deleting", sb, err)
	}
	unpin()
	testutil.WaitFor(t, 30*time.Second, "the deletion to be retried", func() bool {
		_, err := e.d.Store.Get(ctx, w.ID)
		return errors.Is(err, errdefs.ErrNotFound)
	})
	e.assertGone([]v1.Sandbox{{ID: w.ID, HostUID: w.HostIDs().Host}})
}

// TestExecEndsWithClient: a command run with moat's exec ends when its client goes away
// (its call's context cancelled, which closes the connection): without a terminal its
// process group is killed, on a terminal it gets the hangup. A command started through
// the envd protocol without asking for that (E2B's background commands) keeps running
// after its client disconnects.
func TestExecEndsWithClient(t *testing.T) {
	e := newEnv(t)
	sb := e.create(v1.CreateSandboxRequest{})
	running := func(pattern string) bool {
		return e.sh(sb.ID, "root", "pgrep -f '^"+pattern+"$'").code == 0
	}

	// The background command: Start without the header, the stream dropped after the
	// start event.
	bctx, bcancel := context.WithCancel(context.Background())
	stream, err := e.c.Process(sb.ID, "").Start(bctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"1003"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	bcancel()
	stream.Close()

	stdin, open := io.Pipe() // a terminal's input that stays open
	defer open.Close()
	for _, tc := range []struct {
		name, pattern string
		req           sdk.ExecRequest
	}{
		{"pipes", "sleep 1001", sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", "sleep 1001; true"}}},
		{"terminal", "sleep 1002", sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", "sleep 1002; true"}, TTY: &sdk.TermSize{Cols: 80, Rows: 24}, Stdin: stdin}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := e.c.Exec(ctx, sb.ID, tc.req)
				done <- err
			}()
			testutil.WaitFor(t, 20*time.Second, "the command to run", func() bool { return running(tc.pattern) })
			cancel()
			<-done
			testutil.WaitFor(t, 10*time.Second, "the command to end with its client", func() bool { return !running(tc.pattern) })
		})
	}
	if !running("/bin/sleep 1003") {
		t.Errorf("the background command ended with its client")
	}
}
