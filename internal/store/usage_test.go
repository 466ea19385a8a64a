package store

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/usage"
)

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

// span is a time interval known to lie between two bounds: a state was entered between
// from0 and from1 and left between to0 and to1.
type span struct{ from0, from1, to0, to1 time.Time }

func (s span) holds(t *testing.T, what string, secs float64) {
	t.Helper()
	lo, hi := s.to0.Sub(s.from1).Seconds(), s.to1.Sub(s.from0).Seconds()
	if secs < lo-1e-6 || secs > hi+1e-6 {
		t.Errorf("%s = %.4fs, want within [%.4f, %.4f]", what, secs, lo, hi)
	}
}

func usageRows(t *testing.T, st *Store, q UsageQuery) map[string]v1.UsageRow {
	t.Helper()
	rows, _, err := st.Usage(context.Background(), q, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]v1.UsageRow{}
	for _, r := range rows {
		out[r.Key] = r
	}
	return out
}

// The ledger across a sandbox's life: wall time by state charged at each transition, CPU
// from samples (a stale sample of a stopped run ignored, a new run's counter from 0),
// memory at the sampled gauge, egress by destination, all kept after the delete and
// attributed to the creating key; a reopened store (a daemon restart) repeating the last
// sample adds nothing.
func TestUsageLedger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	a, b := newSB("a"), newSB("b")
	a.Owner, a.Template, a.Limits.DiskBytes = "k1", "base", 1<<30
	b.Owner, b.Template = "k2", "py"
	for _, sb := range []*sandbox.Sandbox{a, b} {
		if err := st.Insert(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	set := func(id string, to sandbox.State) (before, after time.Time) {
		t.Helper()
		before = time.Now()
		if _, err := st.Update(ctx, id, func(s *sandbox.Sandbox) error { s.State = to; return nil }); err != nil {
			t.Fatal(err)
		}
		return before, time.Now()
	}
	rec := func(id string, state string, cpu uint64) {
		t.Helper()
		if err := st.RecordUsage(ctx, id, usage.Reading{At: time.Now(), State: state, CPUNs: u64(cpu), MemBytes: i64(1 << 30)}); err != nil {
			t.Fatal(err)
		}
	}
	wait := func() { time.Sleep(30 * time.Millisecond) } // the interval being measured
	run0, run1 := set("a", sandbox.StateRunning)
	set("b", sandbox.StateRunning)
	rec("a", "running", 2e9)
	wait()
	rec("a", "running", 3e9)
	rec("b", "running", 5e9)
	p0, p1 := set("a", sandbox.StatePaused)
	rec("a", "paused", 3e9)
	wait()
	s0, s1 := set("a", sandbox.StateStopped)
	rec("a", "running", 9e9) // a sample read before the stop, recorded after: ignored
	wait()
	r0, r1 := set("a", sandbox.StateRunning)
	rec("a", "running", 1e9) // the new run's cgroup counts from 0
	wait()
	rec("a", "running", 1.5e9)
	if err := st.WriteEgress(ctx, []*egress.Entry{
		{Sandbox: "a", Time: time.Now(), Name: "x.example", Addr: "10.0.0.1", Up: 10, Down: 20},
		{Sandbox: "a", Time: time.Now(), Addr: "10.0.0.2", Up: 1, Down: 2},
		{Sandbox: "b", Time: time.Now(), Name: "x.example", Up: 100},
	}, nil); err != nil {
		t.Fatal(err)
	}
	x0, x1 := set("a", sandbox.StateDeleting)
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := st.AddAPICalls(ctx, map[string]int64{"k1": 3, "": 2}, time.Now()); err != nil {
		t.Fatal(err)
	}

	rows := usageRows(t, st, UsageQuery{})
	ra, ok := rows["a"]
	if !ok {
		t.Fatalf("deleted sandbox a not in the ledger: %+v", rows)
	}
	if ra.APIKey != "k1" || ra.Template != "base" || ra.DeletedAt == nil || ra.Creations != 1 {
		t.Errorf("row a: %+v", ra)
	}
	if math.Abs(ra.CPUSeconds-4.5) > 1e-9 {
		t.Errorf("cpu of a = %v s, want 4.5 (3 in the first run, 1.5 in the second)", ra.CPUSeconds)
	}
	// running: run→pause plus restart→deleting
	lo := p0.Sub(run1) + x0.Sub(r1)
	hi := p1.Sub(run0) + x1.Sub(r0)
	if got := time.Duration(ra.RunningSeconds * 1e9); got < lo-time.Millisecond || got > hi+time.Millisecond {
		t.Errorf("running %v, want within [%v, %v]", got, lo, hi)
	}
	span{p0, p1, s0, s1}.holds(t, "paused", ra.PausedSeconds)
	span{s0, s1, r0, r1}.holds(t, "stopped", ra.StoppedSeconds)
	if ra.MemoryGiBHours <= 0 || ra.DriveGiBHours <= 0 {
		t.Errorf("memory %v, drive %v GiB-h: want > 0", ra.MemoryGiBHours, ra.DriveGiBHours)
	}
	if ra.EgressBytes["x.example"] != 30 || ra.EgressBytes["10.0.0.2"] != 3 || ra.EgressBytesTotal != 33 {
		t.Errorf("egress of a: %v total %d", ra.EgressBytes, ra.EgressBytesTotal)
	}
	// the deleted sandbox's figures are frozen
	later := usageRows(t, st, UsageQuery{})["a"]
	if later.RunningSeconds != ra.RunningSeconds || later.CPUSeconds != ra.CPUSeconds {
		t.Errorf("deleted sandbox's usage still grows: %+v then %+v", ra, later)
	}
	// a key sees its own
	k2 := "k2"
	own := usageRows(t, st, UsageQuery{Owner: &k2})
	if len(own) != 1 || own["b"].CPUSeconds != 5 || own["b"].EgressBytesTotal != 100 {
		t.Errorf("k2's usage: %+v", own)
	}
	_, calls, err := st.Usage(ctx, UsageQuery{Owner: &k2}, time.Now())
	if err != nil || len(calls) != 0 {
		t.Errorf("k2's calls: %v %v", calls, err)
	}
	_, calls, _ = st.Usage(ctx, UsageQuery{}, time.Now())
	if calls["k1"] != 3 || calls[""] != 2 {
		t.Errorf("calls %v", calls)
	}
	// a window that ends before everything
	if old := usageRows(t, st, UsageQuery{Until: time.Now().Add(-48 * time.Hour)}); len(old) != 0 {
		t.Errorf("usage before anything existed: %+v", old)
	}

	// A restarted daemon: the store reopened, the same counter read again adds nothing.
	st.Close()
	if st, err = Open(path); err != nil {
		t.Fatal(err)
	}
	rec("b", "running", 5e9)
	rec("b", "running", 6e9)
	if got := usageRows(t, st, UsageQuery{})["b"].CPUSeconds; got != 6 {
		t.Errorf("b's cpu after a restart = %v, want 6", got)
	}
}

// A warm pool sandbox is the platform's until it is handed to a key, then that key's.
func TestUsageWarmHandover(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := newSB("w")
	w.Warm = true
	if err := st.Insert(ctx, w); err != nil {
		t.Fatal(err)
	}
	if rows := usageRows(t, st, UsageQuery{}); len(rows) != 0 {
		t.Fatalf("a warm sandbox in the usage: %+v", rows)
	}
	if _, err := st.Update(ctx, "w", func(s *sandbox.Sandbox) error { s.Warm, s.Owner = false, "k9"; return nil }); err != nil {
		t.Fatal(err)
	}
	if r := usageRows(t, st, UsageQuery{})["w"]; r.APIKey != "k9" {
		t.Fatalf("handed-over sandbox: %+v", r)
	}
}

// Snapshots are charged to the sandbox they were taken of, from when they were made, each
// span once however often the sampler sees them; one no longer listed stops being charged.
func TestUsageSnapshots(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sb := newSB("s")
	if err := st.Insert(ctx, sb); err != nil {
		t.Fatal(err)
	}
	made := time.Now().Add(-30 * time.Minute)
	snaps := []sandbox.SnapshotUsage{{ID: "snap-1", Sandbox: "s", SizeBytes: 2 << 30, CreatedAt: made}}
	for _, at := range []time.Time{made.Add(10 * time.Minute), made.Add(10 * time.Minute), made.Add(20 * time.Minute)} {
		if err := st.RecordSnapshots(ctx, snaps, at); err != nil {
			t.Fatal(err)
		}
	}
	if got := usageRows(t, st, UsageQuery{})["s"].SnapshotGiBHours; math.Abs(got-2.0/3) > 1e-6 {
		t.Fatalf("2 GiB for 20 min = %v GiB-h, want 0.667", got)
	}
	if err := st.RecordSnapshots(ctx, nil, made.Add(30*time.Minute)); err != nil { // deleted
		t.Fatal(err)
	}
	if got := usageRows(t, st, UsageQuery{})["s"].SnapshotGiBHours; math.Abs(got-2.0/3) > 1e-6 {
		t.Fatalf("after the snapshot went: %v GiB-h, want 0.667", got)
	}
}

// BenchmarkRecordUsage: the cost of one sample of one sandbox (a transaction reading the
// mark, adding an hourly row and moving the mark): the sampler pays it per live sandbox per
// interval.
func BenchmarkRecordUsage(b *testing.B) {
	ctx := context.Background()
	st, err := Open(filepath.Join(b.TempDir(), "moat.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sb := newSB("bench")
	sb.State = sandbox.StateRunning
	if err := st.Insert(ctx, sb); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cpu := uint64(i) * 1e6
		if err := st.RecordUsage(ctx, "bench", usage.Reading{At: time.Now(), State: "running", CPUNs: &cpu, MemBytes: i64(1 << 28)}); err != nil {
			b.Fatal(err)
		}
	}
}
