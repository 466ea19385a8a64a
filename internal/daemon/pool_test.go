package daemon_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// warmIDs lists the runc pool's sandboxes straight from the store.
func (e *env) warmIDs() []string { return e.warmOf("runc") }

func (e *env) warmOf(runtime string) []string {
	all, err := e.d.Store.List(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, sb := range all {
		if sb.Warm && sb.State == "running" && sb.Runtime == runtime {
			out = append(out, sb.ID)
		}
	}
	return out
}

// TestWarmPool: a fitting create claims a started sandbox and hands it over with the
// caller's limits, environment and user; warm sandboxes stay invisible; a request that
// does not fit is built from scratch.
func TestWarmPool(t *testing.T) {
	e := newEnvWarm(t, map[string]int{"runc": 2})
	testutil.WaitFor(t, 60*time.Second, "the warm pool to fill", func() bool { return len(e.warmIDs()) == 2 })
	warm := e.warmIDs()
	ctx := context.Background()
	if list, _ := e.c.List(ctx); len(list) != 0 {
		t.Errorf("warm sandboxes listed: %+v", list)
	}
	if _, err := e.c.Get(ctx, warm[0]); !isNotFound(err) {
		t.Errorf("warm sandbox visible through Get: %v", err)
	}

	sb, err := e.c.Create(ctx, v1.CreateSandboxRequest{
		MemoryBytes: 300 << 20, Pids: 99, Env: map[string]string{"OWNER": "me"}, User: "root",
		Metadata: map[string]string{"task": "t1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != warm[0] && sb.ID != warm[1] {
		t.Fatalf("create did not claim a warm sandbox: %s not in %v", sb.ID, warm)
	}
	if sb.User != "root" || sb.Metadata["task"] != "t1" || sb.Limits.MemoryBytes != 300<<20 {
		t.Errorf("record not handed over: %+v", sb)
	}
	if out := e.mustSh(sb.ID, "echo $OWNER $(id -u)"); out != "me 0\n" {
		t.Errorf("environment and user after hand-over: %q", out)
	}
	mem, _ := os.ReadFile("/sys/fs/cgroup/memory/moat/" + sb.ID + "/memory.limit_in_bytes")
	pids, _ := os.ReadFile("/sys/fs/cgroup/pids/moat/" + sb.ID + "/pids.max")
	if strings.TrimSpace(string(mem)) != "314572800" || strings.TrimSpace(string(pids)) != "99" {
		t.Errorf("limits after hand-over: memory %q pids %q", mem, pids)
	}
	// The pool refills; a request that does not fit (runsc, a repo, another disk size)
	// never takes a warm sandbox.
	testutil.WaitFor(t, 60*time.Second, "the pool to refill", func() bool { return len(e.warmIDs()) == 2 })
	// Growing the memory limit past the pool's memory+swap limit works too.
	big, err := e.c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 3 << 30})
	if err != nil {
		t.Fatal(err)
	}
	mem, _ = os.ReadFile("/sys/fs/cgroup/memory/moat/" + big.ID + "/memory.limit_in_bytes")
	if strings.TrimSpace(string(mem)) != "3221225472" {
		t.Errorf("grown memory limit: %q", mem)
	}
	testutil.WaitFor(t, 60*time.Second, "the pool to refill", func() bool { return len(e.warmIDs()) == 2 })
	before := e.warmIDs()
	other := e.create(v1.CreateSandboxRequest{DiskBytes: 200 << 20})
	for _, id := range before {
		if other.ID == id {
			t.Errorf("a create with another disk size claimed warm sandbox %s", id)
		}
	}
}

// TestWarmPoolRunsc: runsc's pool serves creates with default limits only (runsc cannot
// change a running sandbox's limits).
func TestWarmPoolRunsc(t *testing.T) {
	testutil.RequiresBinary(t, "runsc")
	e := newEnvWarm(t, map[string]int{"runsc": 1})
	testutil.WaitFor(t, 60*time.Second, "the runsc pool to fill", func() bool { return len(e.warmOf("runsc")) == 1 })
	warm := e.warmOf("runsc")[0]
	ctx := context.Background()
	custom, err := e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: "runsc", MemoryBytes: 300 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if custom.ID == warm {
		t.Errorf("a create with other limits took the runsc warm sandbox")
	}
	sb, err := e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: "runsc", Env: map[string]string{"X": "y"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != warm {
		t.Errorf("a default runsc create did not claim the warm sandbox %s (got %s)", warm, sb.ID)
	}
	if out := e.mustSh(sb.ID, "echo $X"); out != "y\n" {
		t.Errorf("env after hand-over: %q", out)
	}
}

// TestListenAPIKeys: the TCP listener serves only clients with a valid API key (created on
// the unix socket), and forwards envd calls for them; key management stays on the socket.
func TestListenAPIKeys(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) { c.Listen = addr })
	ctx := context.Background()
	key, err := e.c.CreateAPIKey(ctx)
	if err != nil || !strings.HasPrefix(key.Key, "e2b_") {
		t.Fatalf("create key: %+v %v", key, err)
	}
	if _, err := sdk.NewHTTP("http://"+addr, "").List(ctx); !errors.Is(err, sdk.ErrUnauthenticated) {
		t.Errorf("no key: %v", err)
	}
	if _, err := sdk.NewHTTP("http://"+addr, "e2b_0000").List(ctx); !errors.Is(err, sdk.ErrUnauthenticated) {
		t.Errorf("wrong key: %v", err)
	}
	remote := sdk.NewHTTP("http://"+addr, key.Key)
	if _, err := remote.CreateAPIKey(ctx); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key management over TCP: %v", err)
	}
	sb, err := remote.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if code, err := remote.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/echo", Args: []string{"over tcp"}, Stdout: &out}); err != nil || code != 0 || out.String() != "over tcp\n" {
		t.Errorf("exec over TCP: %d %v %q", code, err, out.String())
	}
	if err := remote.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteAPIKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.List(ctx); !errors.Is(err, sdk.ErrUnauthenticated) {
		t.Errorf("deleted key still accepted: %v", err)
	}
	e.d.Manager.Wait()
	e.assertNoLeaks([]v1.Sandbox{*sb})
}

// TestTimeoutActions: a timeout can delete the sandbox (E2B's default) or freeze it
// (E2B's autoPause), besides the native default of stopping it.
func TestTimeoutActions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	mk := func(onTimeout string) *sandbox.Sandbox {
		sb, err := e.d.Manager.Create(ctx, sandbox.CreateOptions{
			Timeout: 2 * time.Second, OnTimeout: onTimeout,
			Limits: sandbox.Limits{MemoryBytes: 256 << 20, DiskBytes: 128 << 20},
		})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	del, pause := mk(sandbox.OnTimeoutDelete), mk(sandbox.OnTimeoutPause)
	e.mustSh(pause.ID, "sleep 1000 >/dev/null 2>&1 &")
	testutil.WaitFor(t, 20*time.Second, "the delete-on-timeout sandbox to go", func() bool {
		_, err := e.d.Manager.Get(ctx, del.ID)
		return errdefs.IsNotFound(err)
	})
	testutil.WaitFor(t, 20*time.Second, "the pause-on-timeout sandbox to pause", func() bool {
		sb, err := e.d.Manager.Get(ctx, pause.ID)
		return err == nil && sb.State == sandbox.StatePaused && sb.ExpiresAt == nil
	})
	if _, err := e.d.Manager.Resume(ctx, pause.ID); err != nil {
		t.Fatal(err)
	}
	if out := e.mustSh(pause.ID, "pgrep -x sleep >/dev/null && echo alive"); out != "alive\n" {
		t.Errorf("the frozen process did not survive: %q", out)
	}
	if _, err := e.d.Manager.SetTimeout(ctx, pause.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	if sb, _ := e.d.Manager.Get(ctx, pause.ID); sb.ExpiresAt == nil || time.Until(*sb.ExpiresAt) < 59*time.Minute {
		t.Errorf("SetTimeout: expires %v", sb.ExpiresAt)
	}
	if _, err := e.d.Manager.Create(ctx, sandbox.CreateOptions{OnTimeout: "explode"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("bad on-timeout: %v", err)
	}
}
