package runtime

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestRunscPauseResumeLoop: a runsc sandbox paused and resumed many times in a row keeps
// its processes: after each resume an exec answers and the container still runs. (A
// current runsc frozen through its cgroup, under systrap, sometimes lost its init after the
// thaw; see OCI.pauseByCgroup.)
func TestRunscPauseResumeLoop(t *testing.T) {
	o := newDriver(t, "runsc")
	sb := newTestSandbox(t, "runsc")
	startContainer(t, o, sb)
	ctx := context.Background()
	id := sb.spec.ID
	for i := range 6 {
		if err := o.Pause(ctx, id); err != nil {
			t.Fatalf("pause %d: %v", i, err)
		}
		time.Sleep(time.Duration(i%4) * 500 * time.Millisecond) // frozen for a while, as for idleness
		if err := o.Resume(ctx, id); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
		out, err := o.run(ctx, id, []string{"exec", id, "/bin/echo", "alive"})
		if err != nil || strings.TrimSpace(string(out)) != "alive" {
			ok, _ := o.Running(ctx, id)
			t.Fatalf("exec after resume %d: %q %v (running %v)", i, out, err, ok)
		}
	}
}
