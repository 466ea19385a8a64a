package daemon_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestKill9DuringCreate: a `moat serve` killed with SIGKILL at several points of a create
// (while the drive is being copied, once it exists, once the root filesystem is mounted,
// once the container exists) leaves no sandbox behind after its restart: no record, no
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
		name string
		at   func() bool
	}{
		{"drive being copied", func() bool {
			tmp, _ := filepath.Glob(filepath.Join(data, "drives", ".tmp-sb-*"))
			return len(tmp) > 0
		}},
		{"drive made", func() bool {
			imgs, _ := filepath.Glob(filepath.Join(data, "drives", "sb-*.img"))
			return len(imgs) > 2
		}},
		{"root filesystem mounted", func() bool {
			id := newDir()
			if id == "" {
				return false
			}
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			return strings.Contains(string(mounts), filepath.Join(run, "sandboxes", id, "rootfs")+" ")
		}},
		{"container made", func() bool {
			id := newDir()
			_, err := os.Stat(filepath.Join(run, "runtime", "runc", id))
			return id != "" && err == nil
		}},
	}
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			if cur == nil {
				start()
			}
			done := make(chan error, 1)
			go func() {
				_, err := c.Create(ctx, small)
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
		if sb.HostUID != 0 {
			var pids []string
			for range 100 {
				if pids = processesInRange(sb.HostUID, 65536); len(pids) == 0 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if len(pids) > 0 {
				t.Errorf("sandbox %s: processes still running as its uids: %v", sb.ID, pids)
			}
		}
	}
}
