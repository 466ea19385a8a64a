package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestBadInput: each bad request fails with a clear error naming what exists, and leaves
// nothing behind.
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cases := []struct {
		name string
		req  v1.CreateSandboxRequest
		is   error
		want []string
	}{
		{"unknown runtime", v1.CreateSandboxRequest{Runtime: "kata"}, sdk.ErrNotFound, []string{`"kata"`, "runc"}},
		{"crun on a hybrid host or a missing runtime", v1.CreateSandboxRequest{Runtime: "crun"}, nil, []string{"crun"}},
		{"unknown template", v1.CreateSandboxRequest{Template: "nope"}, sdk.ErrNotFound, []string{"nope", "host"}},
		{"unknown user", v1.CreateSandboxRequest{User: "alice"}, sdk.ErrNotFound, []string{"alice", "user"}},
		{"invalid user", v1.CreateSandboxRequest{User: "../x"}, sdk.ErrInvalidArgument, []string{"../x"}},
		{"tiny memory", v1.CreateSandboxRequest{MemoryBytes: 1000}, sdk.ErrInvalidArgument, []string{"memory"}},
		{"tiny disk", v1.CreateSandboxRequest{DiskBytes: 1000, MemoryBytes: 64 << 20}, sdk.ErrInvalidArgument, []string{"disk"}},
		{"bad env name", v1.CreateSandboxRequest{Env: map[string]string{"A=B": "c"}}, sdk.ErrInvalidArgument, []string{"A=B"}},
		{"repo that is not a git tree", v1.CreateSandboxRequest{Repo: t.TempDir()}, nil, []string{"git"}},
		{"timeout that would overflow", v1.CreateSandboxRequest{TimeoutSeconds: 1e15}, sdk.ErrInvalidArgument, []string{"timeout_seconds", "at most"}},
		{"negative timeout", v1.CreateSandboxRequest{TimeoutSeconds: -1}, sdk.ErrInvalidArgument, []string{"timeout_seconds"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb, err := e.c.Create(ctx, c.req)
			if err == nil {
				e.c.Delete(ctx, sb.ID)
				if c.name == "crun on a hybrid host or a missing runtime" {
					t.Skip("crun works on this host")
				}
				t.Fatalf("created %+v", sb)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error class: %v (want %v)", err, c.is)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	// Raw requests the SDK cannot make: JSON after the body, a known route with another
	// method.
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(e.runDir, "moat.sock"))
	}}}
	for _, c := range []struct {
		method, path, body string
		status             int
		says               string
	}{
		{"POST", "/v1/sandboxes", `{"runtime": "runc"} {"runtime": "runsc"}`, 400, "found more"},
		{"PATCH", "/v1/sandboxes", ``, 405, "GET, HEAD, POST"},
		{"GET", "/v1/sandboxes/sb-000000000000/stop", ``, 405, "POST"},
	} {
		req, _ := http.NewRequest(c.method, "http://moat"+c.path, strings.NewReader(c.body))
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.says) {
			t.Errorf("%s %s %q: %d %s; want %d saying %q", c.method, c.path, c.body, resp.StatusCode, b, c.status, c.says)
		}
	}
	if list, _ := e.c.List(ctx); len(list) != 0 {
		t.Errorf("failed creates left %d sandboxes", len(list))
	}
	if _, err := e.c.Get(ctx, "sb-000000000000"); !isNotFound(err) {
		t.Errorf("unknown sandbox: %v", err)
	}
	if _, err := e.c.Stop(ctx, "sb-000000000000"); !isNotFound(err) {
		t.Errorf("stop unknown sandbox: %v", err)
	}
	drives, _ := filepath.Glob(filepath.Join(e.dataDir, "drives", "sb-*"))
	if len(drives) != 0 {
		t.Errorf("failed creates left drives: %v", drives)
	}
}

// TestDaemonKill9Restart: a daemon killed with SIGKILL while sandboxes run loses nothing:
// after a restart every sandbox is listed, running ones are usable, and deleting them
// leaves nothing behind.
func TestDaemonKill9Restart(t *testing.T) {
	p := newServeProcess(t)
	data, run, sock := p.data, p.run, p.sock
	start := func() *exec.Cmd { return p.start(1) }
	c := sdk.NewUnix(sock)
	ctx := context.Background()
	d1 := start()
	a, err := c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, a.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", "echo before > /home/user/f; sleep 1000 &"}}); err != nil {
		t.Fatal(err)
	}
	_ = d1.Process.Signal(syscall.SIGKILL)
	_ = d1.Wait()

	d2 := start()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = d2.Process.Signal(syscall.SIGTERM)
			_ = d2.Wait()
		}
	}
	defer stop()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, sb := range list {
		states[sb.ID] = sb.State
	}
	if states[a.ID] != "running" || states[b.ID] != "stopped" {
		t.Fatalf("after kill -9 and restart: %v", states)
	}
	var out strings.Builder
	code, err := c.Exec(ctx, a.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", "cat /home/user/f; pgrep -c sleep"}, Stdout: &out})
	if err != nil || code != 0 || out.String() != "before\n1\n" {
		t.Fatalf("running sandbox after restart: code %d err %v out %q", code, err, out.String())
	}
	if _, err := c.Start(ctx, b.ID); err != nil {
		t.Fatalf("starting the stopped sandbox after restart: %v", err)
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := c.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "deletions", func() bool {
		l, _ := c.List(ctx)
		return len(l) == 0
	})
	// A clean stop deletes the daemon's warm sandboxes (the first daemon's were deleted
	// by the second at start): nothing at all remains.
	stop()
	e := &env{t: t, dataDir: data, runDir: run}
	e.assertNoLeaks([]v1.Sandbox{*a, *b})
	if left, _ := filepath.Glob(filepath.Join(run, "sandboxes", "*")); len(left) != 0 {
		t.Errorf("left in the run directory: %v", left)
	}
}

// TestTimeout: a sandbox whose timeout passes is stopped by the daemon, with the reason
// recorded, and its drive kept.
func TestTimeout(t *testing.T) {
	e := newEnv(t)
	sb := e.create(v1.CreateSandboxRequest{TimeoutSeconds: 1})
	if sb.ExpiresAt == nil {
		t.Fatalf("no expiry: %+v", sb)
	}
	testutil.WaitFor(t, 15*time.Second, "the timeout to stop the sandbox", func() bool {
		got, err := e.c.Get(context.Background(), sb.ID)
		return err == nil && got.State == "stopped" && strings.Contains(got.Error, "timeout")
	})
	if _, err := os.Stat(filepath.Join(e.dataDir, "drives", sb.ID+".img")); err != nil {
		t.Errorf("drive of a timed-out sandbox: %v", err)
	}
	// Starting it again gives it its timeout afresh.
	st, err := e.c.Start(context.Background(), sb.ID)
	if err != nil || st.State != "running" || st.ExpiresAt == nil || !st.ExpiresAt.After(time.Now()) {
		t.Fatalf("start after timeout: %v %+v", err, st)
	}
}

// TestRepoLayer: --repo puts a checkout of the repository's HEAD at /workspace, owned by
// the sandbox's user; uncommitted changes stay out; a second sandbox on the same commit
// reuses the cached layer instead of copying again.
func TestRepoLayer(t *testing.T) {
	e := newEnv(t)
	repo := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.email=t@example.test", "-c", "user.name=t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("committed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "README")
	git("commit", "-q", "-m", "first")
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("dirty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := e.create(v1.CreateSandboxRequest{Repo: repo})
	out := e.mustSh(a.ID, "cd /workspace && cat README && git log --format=%s && stat -c %U README && touch new && echo ok")
	if out != "committed\nfirst\nuser\nok\n" {
		t.Errorf("workspace: %q", out)
	}
	layers, _ := filepath.Glob(filepath.Join(e.dataDir, "layers", "repo-*"))
	if len(layers) != 1 {
		t.Fatalf("repo layers after the first sandbox: %v", layers)
	}
	st1, _ := os.Stat(layers[0])
	b := e.create(v1.CreateSandboxRequest{Repo: repo})
	if out := e.mustSh(b.ID, "cat /workspace/README; test -e /workspace/new || echo fresh"); out != "committed\nfresh\n" {
		t.Errorf("second sandbox: %q", out)
	}
	again, _ := filepath.Glob(filepath.Join(e.dataDir, "layers", "repo-*"))
	st2, _ := os.Stat(layers[0])
	if len(again) != 1 || !st1.ModTime().Equal(st2.ModTime()) {
		t.Errorf("the second sandbox on the same commit rebuilt the layer: %v", again)
	}
	if data, _ := os.ReadFile(filepath.Join(repo, "README")); string(data) != "dirty\n" {
		t.Errorf("the host checkout changed: %q", data)
	}
}

// TestSweep: a sandbox whose container dies with nobody calling it is found by the
// liveness sweep and recorded as stopped, with the reason, and cleaned up.
func TestSweep(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.SweepInterval = time.Second })
	sb := e.create(v1.CreateSandboxRequest{})
	// Kill everything in the sandbox's cgroup from the host, as an outside OOM kill would.
	procs, err := os.ReadFile("/sys/fs/cgroup/pids/moat/" + sb.ID + "/cgroup.procs")
	if err != nil {
		t.Skipf("no cgroup v1 pids hierarchy: %v", err)
	}
	for _, p := range strings.Fields(string(procs)) {
		pid, _ := strconv.Atoi(p)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testutil.WaitFor(t, 20*time.Second, "the sweep to notice", func() bool {
		got, err := e.c.Get(context.Background(), sb.ID)
		return err == nil && got.State == "stopped" && strings.Contains(got.Error, "exited")
	})
	if _, err := os.Stat(filepath.Join(e.runDir, "sandboxes", sb.ID, "rootfs")); err == nil {
		t.Errorf("the dead sandbox's root filesystem is still there")
	}
	if err := e.c.Delete(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	e.d.Manager.Wait()
	e.assertNoLeaks([]v1.Sandbox{*sb})
}
