package daemon_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// usageRow returns sandbox id's row of c's usage report (by sandbox).
func usageRow(t *testing.T, c *sdk.Client, id string) v1.UsageRow {
	t.Helper()
	rep, err := c.Usage(context.Background(), time.Time{}, time.Time{}, "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rows {
		if r.Key == id {
			return r
		}
	}
	t.Fatalf("sandbox %s not in the usage report: %+v", id, rep.Rows)
	return v1.UsageRow{}
}

// within10 fails unless the ledger's CPU-seconds are within 10 % of the cgroup's counter.
func within10(t *testing.T, what string, ledger float64, counterNs uint64) {
	t.Helper()
	want := float64(counterNs) / 1e9
	if math.Abs(ledger-want) > 0.1*want {
		t.Errorf("%s: ledger %.3f CPU-s, the cgroup's counter %.3f s: more than 10 %% apart", what, ledger, want)
	} else {
		t.Logf("%s: ledger %.3f CPU-s, cgroup %.3f s", what, ledger, want)
	}
}

const burn = `timeout %s sh -c 'while :; do :; done'; true`

// TestUsageMetering: on each runtime, a sandbox an API key creates runs a known CPU burn;
// the ledger's CPU-seconds are within 10 % of the cgroup's own counter read at the same
// moment (the sandbox idle after the burn): after a sample, after a stop (the final sample
// before the container goes: no sampler runs in this test, its interval is an hour), and
// after a second run and the delete (the usage is kept, the runs add up). Wall time is
// charged to running, paused and stopped; the usage is the key's, which sees its own
// sandbox and calls and not the operator's; --by api-key groups it. A snapshot is charged
// to its sandbox.
func TestUsageMetering(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) { c.Listen = addr; c.MeterInterval = time.Hour })
	ctx := context.Background()
	key, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kc := sdk.NewHTTP("http://"+addr, key.Key)
	mine := e.create(v1.CreateSandboxRequest{Runtime: "runc"}) // the operator's
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb, err := kc.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, CPUs: 1, MemoryBytes: 512 << 20, DiskBytes: 256 << 20})
			if err != nil {
				t.Fatal(err)
			}
			e.mustSh(sb.ID, fmt.Sprintf(burn, "2"))
			st, err := kc.Stats(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if st.CPUUsageNs < 0.3e9 { // the host is shared: a burn gets what it gets
				t.Fatalf("a 2 s burn used %d ns of CPU", st.CPUUsageNs)
			}
			e.d.Manager.Meter(ctx)
			within10(t, "sampled", usageRow(t, e.c, sb.ID).CPUSeconds, st.CPUUsageNs)

			if _, err := kc.Pause(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := kc.Resume(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			e.mustSh(sb.ID, fmt.Sprintf(burn, "2"))
			st, err = kc.Stats(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kc.Stop(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			run1 := st.CPUUsageNs
			within10(t, "stopped (final sample)", usageRow(t, e.c, sb.ID).CPUSeconds, run1)

			if _, err := kc.Start(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			e.mustSh(sb.ID, fmt.Sprintf(burn, "1"))
			st, err = kc.Stats(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if err := kc.Delete(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			e.d.Manager.Wait()
			row := usageRow(t, kc, sb.ID)
			within10(t, "two runs, deleted", row.CPUSeconds, run1+st.CPUUsageNs)
			if row.DeletedAt == nil || row.APIKey != key.ID || row.Creations != 1 || row.Runtime != rt {
				t.Errorf("row after delete: %+v", row)
			}
			if row.RunningSeconds < 4 || row.PausedSeconds <= 0 || row.StoppedSeconds <= 0 || row.MemoryGiBHours <= 0 || row.DriveGiBHours <= 0 {
				t.Errorf("wall time or GiB-hours missing: %+v", row)
			}
		})
	}
	// The key sees its own sandboxes and calls only; the operator sees all.
	rep, err := kc.Usage(ctx, time.Time{}, time.Time{}, "api-key")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Key != key.ID || rep.Rows[0].Sandboxes != len(runtimesUnderTest(t)) || rep.APICalls[key.ID] < 10 || len(rep.APICalls) != 1 {
		t.Errorf("the key's own usage by api-key: %+v", rep)
	}
	all, err := e.c.Usage(ctx, time.Time{}, time.Time{}, "api-key")
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Rows) != 2 || all.Rows[0].Key != "" || all.Rows[1].Key != key.ID || all.APICalls[""] == 0 {
		t.Errorf("the operator's usage by api-key: %+v", all)
	}
	if r := usageRow(t, e.c, mine.ID); r.APIKey != "" || r.RunningSeconds <= 0 || r.SnapshotGiBHours != 0 {
		t.Errorf("the operator's sandbox: %+v", r)
	}
	// A snapshot is charged to its sandbox while it is kept.
	snap, err := e.c.Snapshot(ctx, mine.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.d.Manager.Meter(ctx)
	if r := usageRow(t, e.c, mine.ID); r.SnapshotGiBHours <= 0 {
		t.Errorf("a snapshot not charged: %+v", r)
	}
	if err := e.c.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}

	// A daemon restart continues without counting twice: the same counter sampled again
	// by the new daemon adds nothing.
	e.mustSh(mine.ID, fmt.Sprintf(burn, "1"))
	e.d.Manager.Meter(ctx)
	before := usageRow(t, e.c, mine.ID).CPUSeconds
	e.stop()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), func(c *daemon.Config) { c.Listen = addr; c.MeterInterval = time.Hour })
	e.d.Manager.Meter(ctx)
	st, err := e.c.Stats(ctx, mine.ID)
	if err != nil {
		t.Fatal(err)
	}
	after := usageRow(t, e.c, mine.ID).CPUSeconds
	within10(t, "after a restart", after, st.CPUUsageNs)
	if after > before*1.1 {
		t.Errorf("CPU-seconds %.3f before a restart, %.3f after: counted twice", before, after)
	}
}
