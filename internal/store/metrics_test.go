package store

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/metrics"
	"github.com/moatdev/moat/internal/sandbox"
)

// TestCounts: the grouped counts /metrics reads at scrape time follow the records.
func TestCounts(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for i, c := range []struct {
		state   sandbox.State
		runtime string
	}{{sandbox.StateRunning, "runc"}, {sandbox.StateRunning, "runc"}, {sandbox.StateRunning, "runsc"}, {sandbox.StateStopped, "runc"}} {
		sb := newSB(fmt.Sprintf("sb-%d", i))
		sb.State, sb.Runtime = c.state, c.runtime
		if err := st.Insert(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	got, err := st.CountSandboxes(ctx)
	want := map[metrics.StateRuntime]int{{State: "running", Runtime: "runc"}: 2, {State: "running", Runtime: "runsc"}: 1, {State: "stopped", Runtime: "runc"}: 1}
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("CountSandboxes = %v, %v; want %v", got, err, want)
	}
	if _, err := st.Update(ctx, "sb-0", func(sb *sandbox.Sandbox) error { sb.State = sandbox.StateStopped; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "sb-2"); err != nil {
		t.Fatal(err)
	}
	got, _ = st.CountSandboxes(ctx)
	want = map[metrics.StateRuntime]int{{State: "running", Runtime: "runc"}: 1, {State: "stopped", Runtime: "runc"}: 2}
	if !maps.Equal(got, want) {
		t.Fatalf("after a stop and a delete: %v, want %v", got, want)
	}
	for i, a := range []struct{ kind, state string }{{"network", "pending"}, {"network", "pending"}, {"push", "approved"}} {
		if err := st.InsertApproval(ctx, approvals.Approval{ID: fmt.Sprintf("ap-%d", i), Kind: a.kind, Sandbox: "sb-1", State: a.state, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	ga, err := st.CountApprovals(ctx)
	wa := map[metrics.KindState]int{{Kind: "network", State: "pending"}: 2, {Kind: "push", State: "approved"}: 1}
	if err != nil || !maps.Equal(ga, wa) {
		t.Fatalf("CountApprovals = %v, %v; want %v", ga, err, wa)
	}
}
