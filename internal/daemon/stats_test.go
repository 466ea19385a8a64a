package daemon_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
)

// TestStats: GET /v1/sandboxes/{id}/stats on each runtime reports the sandbox's own figures:
// its limits (CPU cores, memory, pids, drive), the tasks it runs (3 background sleeps more
// than before), CPU time that grows while it spins, and network counters in the right
// direction: a 1 MiB file written into the sandbox (through its link) is received bytes, the
// same file read out is sent bytes. A stopped sandbox has no stats (conflict).
func TestStats(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 384 << 20, CPUs: 1, Pids: 200, DiskBytes: 256 << 20})
			before, err := e.c.Stats(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if before.CPUCores != 1 || before.MemoryLimitBytes != 384<<20 || before.DiskTotalBytes < 200<<20 || before.DiskTotalBytes > 256<<20 {
				t.Errorf("limits in stats: %+v", before)
			}
			if before.Pids == nil || before.PidsLimit == nil || before.NetRxBytes == nil || before.NetTxBytes == nil {
				t.Fatalf("stats without tasks or network: %+v", before)
			}
			if *before.PidsLimit != 200 && rt == "runc" {
				t.Errorf("pids limit %d, want 200", *before.PidsLimit)
			}
			e.mustSh(sb.ID, `for i in 1 2 3; do setsid sleep 120 </dev/null >/dev/null 2>&1 & done; setsid timeout 3 sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &`)
			payload := bytes.Repeat([]byte("moat-stats "), 100_000) // ~1.1 MB
			if err := e.c.WriteFile(ctx, sb.ID, "/tmp/payload", "", bytes.NewReader(payload)); err != nil {
				t.Fatal(err)
			}
			mid, err := e.c.Stats(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got := *mid.Pids; got < *before.Pids+3 {
				t.Errorf("tasks: %d before, %d with 3 sleeps and a spinner running", *before.Pids, got)
			}
			if got := *mid.NetRxBytes - *before.NetRxBytes; got < uint64(len(payload)) {
				t.Errorf("received %d bytes while %d were written into the sandbox", got, len(payload))
			}
			rc, err := e.c.ReadFile(ctx, sb.ID, "/tmp/payload", "")
			if err != nil {
				t.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, rc)
			rc.Close()
			after, err := e.c.Stats(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got := *after.NetTxBytes - *mid.NetTxBytes; got < uint64(n) || n != int64(len(payload)) {
				t.Errorf("sent %d bytes while %d were read out of the sandbox", got, n)
			}
			if after.CPUUsageNs <= before.CPUUsageNs+100_000_000 {
				t.Errorf("CPU time %d ns → %d ns with a spinner running", before.CPUUsageNs, after.CPUUsageNs)
			}
			if after.MemoryBytes <= 0 || after.DiskUsedBytes <= 0 {
				t.Errorf("memory or disk use missing: %+v", after)
			}
			if _, err := e.c.Stop(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.Stats(ctx, sb.ID); err == nil || !strings.Contains(err.Error(), "stopped") {
				t.Errorf("stats of a stopped sandbox: %v", err)
			}
		})
	}
}

// TestPidsLimitEvent: forks refused at a sandbox's pids limit become a "pids_limit" event (how
// many, the limit) and count in stats and the record. runc only: under runsc the host cgroup
// does not see the guest's forks (TestStats covers runsc's task count).
func TestPidsLimitEvent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	sb := e.create(v1.CreateSandboxRequest{Runtime: "runc", Pids: 40})
	// dash does not retry a failed fork (bash would, for seconds); the sleeps end on their own.
	r := e.sh(sb.ID, "", `sh -c 'i=0; while [ $i -lt 60 ]; do sleep 2 & i=$((i+1)); done' 2>/dev/null; echo forked`)
	if !strings.Contains(r.stdout, "forked") {
		t.Fatalf("the fork loop: %+v", r)
	}
	var detail string
	testutil.WaitFor(t, 15*time.Second, "a pids_limit event", func() bool {
		evs, err := e.c.Events(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Kind == "pids_limit" {
				detail = ev.Detail
				return true
			}
		}
		return false
	})
	if !strings.Contains(detail, "pids_limit=40") || !strings.Contains(detail, "forks_refused=") {
		t.Errorf("pids_limit event detail %q", detail)
	}
	st, err := e.c.Stats(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.PidsLimitHits == nil || *st.PidsLimitHits == 0 {
		t.Errorf("stats after refused forks: %+v", st)
	}
	rec, err := e.d.Store.Get(ctx, sb.ID)
	if err != nil || rec.PidsLimitHits == 0 || rec.LastPidsLimitAt == nil {
		t.Errorf("record after refused forks: %+v %v", rec, err)
	}
}
