package usage

import (
	"math"
	"reflect"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

func u64(v uint64) *uint64 { return &v }
func i64(v int64) *int64   { return &v }

func TestAccrue(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	hour := t0
	for _, tc := range []struct {
		name string
		prev Mark
		r    Reading
		want []Delta
		next Mark
	}{
		{"running wall, cpu growth and memory at the previous gauge",
			Mark{State: "running", At: sec(0), CPUNs: 1e9, MemBytes: GiB, DriveBytes: 2 * GiB},
			Reading{At: sec(36), State: "running", CPUNs: u64(3e9), MemBytes: i64(GiB / 2)},
			[]Delta{{Hour: hour, RunningNs: 36e9, CPUNs: 2e9, MemGiBHours: 0.01, DriveGiBHours: 0.02}},
			Mark{State: "running", At: sec(36), CPUNs: 3e9, MemBytes: GiB / 2, DriveBytes: 2 * GiB}},
		{"a counter below the mark is a new cgroup: all of it counts",
			Mark{State: "running", At: sec(0), CPUNs: 5e9},
			Reading{At: sec(10), State: "running", CPUNs: u64(1e9)},
			[]Delta{{Hour: hour, RunningNs: 10e9, CPUNs: 1e9}},
			Mark{State: "running", At: sec(10), CPUNs: 1e9}},
		{"stopping charges running time, then resets counter and memory",
			Mark{State: "running", At: sec(0), CPUNs: 5e9, MemBytes: GiB},
			Reading{At: sec(10), State: "stopped"},
			[]Delta{{Hour: hour, RunningNs: 10e9, MemGiBHours: 10.0 / 3600}},
			Mark{State: "stopped", At: sec(10)}},
		{"stopped time charges the drive, not memory",
			Mark{State: "stopped", At: sec(0), DriveBytes: GiB},
			Reading{At: sec(3600), State: "running"},
			[]Delta{{Hour: hour, StoppedNs: 3600e9, DriveGiBHours: 1}},
			Mark{State: "running", At: sec(3600), DriveBytes: GiB}},
		{"paused time, counter unchanged",
			Mark{State: "paused", At: sec(0), CPUNs: 7},
			Reading{At: sec(5), State: "paused", CPUNs: u64(7)},
			[]Delta{{Hour: hour, PausedNs: 5e9}},
			Mark{State: "paused", At: sec(5), CPUNs: 7}},
		{"split at the hour",
			Mark{State: "running", At: t0.Add(-30 * time.Minute)},
			Reading{At: t0.Add(15 * time.Minute), State: "running", CPUNs: u64(9)},
			[]Delta{{Hour: hour.Add(-time.Hour), RunningNs: int64(30 * time.Minute)}, {Hour: hour, RunningNs: int64(15 * time.Minute), CPUNs: 9}},
			Mark{State: "running", At: t0.Add(15 * time.Minute), CPUNs: 9}},
		{"creating and deleting are not charged",
			Mark{State: "creating", At: sec(0)},
			Reading{At: sec(10), State: "running", CPUNs: u64(4)},
			nil,
			Mark{State: "running", At: sec(10)}},
		{"an older reading charges nothing",
			Mark{State: "running", At: sec(10), CPUNs: 4},
			Reading{At: sec(5), State: "running", CPUNs: u64(4)},
			nil,
			Mark{State: "running", At: sec(10), CPUNs: 4}},
		{"a reading without counters charges time only and keeps the mark's counter",
			Mark{State: "running", At: sec(0), CPUNs: 4},
			Reading{At: sec(2), State: "paused"},
			[]Delta{{Hour: hour, RunningNs: 2e9}},
			Mark{State: "paused", At: sec(2), CPUNs: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next := Accrue(tc.prev, tc.r)
			if len(got) != len(tc.want) {
				t.Fatalf("deltas %+v, want %+v", got, tc.want)
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if math.Abs(g.MemGiBHours-w.MemGiBHours) > 1e-9 || math.Abs(g.DriveGiBHours-w.DriveGiBHours) > 1e-9 {
					t.Errorf("delta %d: %+v, want %+v", i, g, w)
				}
				g.MemGiBHours, g.DriveGiBHours, w.MemGiBHours, w.DriveGiBHours = 0, 0, 0, 0
				if !g.Hour.Equal(w.Hour) || g.RunningNs != w.RunningNs || g.PausedNs != w.PausedNs || g.StoppedNs != w.StoppedNs || g.CPUNs != w.CPUNs {
					t.Errorf("delta %d: %+v, want %+v", i, g, w)
				}
			}
			if !next.At.Equal(tc.next.At) {
				t.Errorf("next at %v, want %v", next.At, tc.next.At)
			}
			next.At, tc.next.At = time.Time{}, time.Time{}
			if next != tc.next {
				t.Errorf("next %+v, want %+v", next, tc.next)
			}
		})
	}
}

// Repeated samples of one counter add up to its growth, however they fall.
func TestAccrueNoDoubleCount(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 59, 0, 0, time.UTC)
	m := Mark{State: "running", At: t0}
	var cpu uint64
	var wall int64
	for i, c := range []uint64{5, 5, 9, 20, 20, 21} {
		ds, next := Accrue(m, Reading{At: t0.Add(time.Duration(i+1) * 30 * time.Second), State: "running", CPUNs: u64(c)})
		// the same reading again (a restarted daemon repeating its last sample) adds nothing
		again, _ := Accrue(next, Reading{At: next.At, State: "running", CPUNs: u64(c)})
		if len(again) != 0 {
			t.Fatalf("repeated reading added %+v", again)
		}
		for _, d := range ds {
			cpu += d.CPUNs
			wall += d.RunningNs
		}
		m = next
	}
	if cpu != 21 || wall != int64(3*time.Minute) {
		t.Fatalf("cpu %d wall %v, want 21 and 3m", cpu, time.Duration(wall))
	}
}

func TestGroup(t *testing.T) {
	rows := []v1.UsageRow{
		{Key: "b", Sandbox: "b", Template: "base", APIKey: "k1", Sandboxes: 1, Creations: 1, CPUSeconds: 2, RunningSeconds: 10, EgressBytes: map[string]int64{"x.com": 5}, EgressBytesTotal: 5},
		{Key: "a", Sandbox: "a", Template: "base", APIKey: "k2", Sandboxes: 1, CPUSeconds: 1, StoppedSeconds: 3, EgressBytes: map[string]int64{"x.com": 1, "y.org": 2}, EgressBytesTotal: 3},
		{Key: "c", Sandbox: "c", Template: "py", APIKey: "k1", Sandboxes: 1, Creations: 1, MemoryGiBHours: 0.5, PausedSeconds: 4},
	}
	for _, tc := range []struct {
		by   string
		want []v1.UsageRow
		err  bool
	}{
		{"", []v1.UsageRow{rows[1], rows[0], rows[2]}, false},
		{"sandbox", []v1.UsageRow{rows[1], rows[0], rows[2]}, false},
		{"template", []v1.UsageRow{
			{Key: "base", Template: "base", Sandboxes: 2, Creations: 1, CPUSeconds: 3, RunningSeconds: 10, StoppedSeconds: 3, EgressBytes: map[string]int64{"x.com": 6, "y.org": 2}, EgressBytesTotal: 8},
			{Key: "py", Template: "py", Sandboxes: 1, Creations: 1, MemoryGiBHours: 0.5, PausedSeconds: 4},
		}, false},
		{"api-key", []v1.UsageRow{
			{Key: "k1", APIKey: "k1", Sandboxes: 2, Creations: 2, CPUSeconds: 2, RunningSeconds: 10, PausedSeconds: 4, MemoryGiBHours: 0.5, EgressBytes: map[string]int64{"x.com": 5}, EgressBytesTotal: 5},
			{Key: "k2", APIKey: "k2", Sandboxes: 1, CPUSeconds: 1, StoppedSeconds: 3, EgressBytes: map[string]int64{"x.com": 1, "y.org": 2}, EgressBytesTotal: 3},
		}, false},
		{"owner", nil, true},
	} {
		got, err := Group(rows, tc.by)
		if (err != nil) != tc.err {
			t.Fatalf("by %q: err %v", tc.by, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("by %q:\n got %+v\nwant %+v", tc.by, got, tc.want)
		}
	}
}

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Time{}, false},
		{"2026-12-01T00:00:00Z", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), false},
		{"2026-11-30", time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), false},
		{"90m", now.Add(-90 * time.Minute), false},
		{"7d", now.Add(-7 * 24 * time.Hour), false},
		{"-5m", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"3x", time.Time{}, true},
		{"99999999999d", time.Time{}, true}, // would overflow
	} {
		got, err := ParseTime(tc.in, now)
		if (err != nil) != tc.err || !got.Equal(tc.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v (err %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestCalls(t *testing.T) {
	var c Calls
	c.Add("k")
	c.Add("k")
	c.Add("")
	n := c.Take()
	if !reflect.DeepEqual(n, map[string]int64{"k": 2, "": 1}) {
		t.Fatalf("take %v", n)
	}
	c.Restore(map[string]int64{"k": 1})
	c.Add("k")
	if n := c.Take(); n["k"] != 2 || len(c.Take()) != 0 {
		t.Fatalf("after restore %v", n)
	}
}

func TestStored(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 30, 0, 0, time.UTC)
	got := Stored(t0, t0.Add(90*time.Minute), 2*GiB)
	if len(got) != 2 || !got[0].Hour.Equal(t0.Truncate(time.Hour)) || math.Abs(got[0].SnapshotGiBHours-1) > 1e-9 || math.Abs(got[1].SnapshotGiBHours-2) > 1e-9 {
		t.Fatalf("90 min of 2 GiB from :30: %+v", got)
	}
	if got := Stored(t0, t0, GiB); len(got) != 0 {
		t.Fatalf("empty span: %+v", got)
	}
	if got := Stored(t0.Add(time.Minute), t0, GiB); len(got) != 0 {
		t.Fatalf("backwards span: %+v", got)
	}
}

// FuzzParseTime: any --since/--until text is refused or read as a time not after now
// (durations) or as given; never a panic.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"", "24h", "7d", "2026-12-01", "2026-12-01T00:00:00Z", "-1d", "99999999999d", "1e9h", "d"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s, now)
		if err != nil {
			return
		}
		if s == "" && !got.IsZero() {
			t.Fatalf("%q: %v", s, got)
		}
		if _, perr := time.Parse(time.RFC3339Nano, s); perr != nil && s != "" && len(s) != 10 && got.After(now) {
			t.Fatalf("duration %q read as %v, after now", s, got)
		}
	})
}
