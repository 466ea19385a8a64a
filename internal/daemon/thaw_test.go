package daemon_test

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestIdleThawRounds, under runsc: a sandbox frozen for idleness and thawed by an exec,
// round after round, answers every exec and keeps running. A current runsc frozen through
// its cgroup sometimes lost its init at the thaw (exec: 503, then "exited on its own"; 2 of
// 3 runs of 25 rounds), so moat pauses it through gVisor (internal/runtime/freeze.go).
func TestIdleThawRounds(t *testing.T) {
	if !slices.Contains(runtimesUnderTest(t), "runsc") {
		t.Skip("runsc is not installed")
	}
	e := newEnvWith(t, func(c *daemon.Config) { c.IdleFreeze = time.Minute })
	ctx := context.Background()
	sb := e.create(v1.CreateSandboxRequest{Runtime: "runsc", IdleSeconds: secs(1)})
	for i := range 10 {
		testutil.WaitFor(t, 20*time.Second, "the sandbox to be frozen for idleness", func() bool {
			got, _ := e.c.Get(ctx, sb.ID)
			return got != nil && got.State == "paused"
		})
		var out bytes.Buffer
		code, err := e.c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/echo", Args: []string{"hi"}, Stdout: &out})
		if err != nil || code != 0 || out.String() != "hi\n" {
			got, _ := e.c.Get(ctx, sb.ID)
			t.Fatalf("round %d: exec after the thaw: %d %v %q; the sandbox: %s %q", i, code, err, out.String(), got.State, got.Error)
		}
	}
}
