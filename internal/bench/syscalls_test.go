package bench_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/bench"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

func TestParseTimer(t *testing.T) {
	for _, tc := range []struct {
		out  string
		code int
		d    time.Duration
		bad  bool
	}{
		{out: "moat-bench-time 0 1733100000.123456 1733100000.223457\n", d: 100001 * time.Microsecond},
		{out: "noise\nmoat-bench-time 1 1733100000.999999 1733100001.000000\n", code: 1, d: time.Microsecond},
		{out: "moat-bench-time 0 5.000000 5.000000", d: 0},
		{out: "", bad: true},
		{out: "moat-bench-time 0 1733100000.2 1733100000.3", bad: true},                   // not micros
		{out: "moat-bench-time 0 1733100001.000000 1733100000.000000", bad: true},         // clock back
		{out: "moat-bench-time 0 1733100000,000000 1733100000,000001", bad: true},         // locale comma
		{out: "moat-bench-time 256 1733100000.000000 1733100000.000001", bad: true},       // code
		{out: "moat-bench-time -1 1733100000.000000 1733100000.000001", bad: true},        // code
		{out: "moat-bench-time 0 -1.000000 1.000000", bad: true},                          // sign
		{out: "moat-bench-time 0 99999999999999.000000 99999999999999.000001", bad: true}, // overflow guard
		{out: "moat-bench-time 0 1.000000", bad: true},
		{out: "xmoat-bench-time 0 1.000000 2.000000", bad: true},
	} {
		code, d, err := bench.ParseTimer(tc.out)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseTimer(%q) = %d, %v; want an error", tc.out, code, d)
			}
			continue
		}
		if err != nil || code != tc.code || d != tc.d {
			t.Errorf("ParseTimer(%q) = %d, %v, %v; want %d, %v", tc.out, code, d, err, tc.code, tc.d)
		}
	}
}

// FuzzParseTimer: the timer line comes from the sandbox: no input panics, and an accepted
// line gives an exit code of a process and a duration that is not negative.
func FuzzParseTimer(f *testing.F) {
	f.Add("moat-bench-time 0 1733100000.123456 1733100000.223457\n")
	f.Add("moat-bench-time 0 1.000000 0.999999")
	f.Add("moat-bench-time 7 000000000001.000000 000000000002.999999")
	f.Fuzz(func(t *testing.T, out string) {
		code, d, err := bench.ParseTimer(out)
		if err == nil && (code < 0 || code > 255 || d < 0) {
			t.Fatalf("ParseTimer(%q) = %d, %v", out, code, d)
		}
	})
}

func figures(medians ...float64) []bench.WorkloadFigure {
	names := []string{bench.WorkloadDD, bench.WorkloadGitStatus, bench.WorkloadPython}
	var out []bench.WorkloadFigure
	for i, m := range medians {
		out = append(out, bench.WorkloadFigure{Workload: names[i], Median: m})
	}
	return out
}

func TestSyscallVerdicts(t *testing.T) {
	const cur = "runsc (current)"
	rs := []bench.SyscallRuntime{
		{Label: "runc", Runtime: "runc", Workloads: figures(100, 50, 40)},
		{Label: "runsc (2022)", Runtime: "runsc", Workloads: figures(55000, 3000, 400)},
		{Label: cur, Runtime: "runsc", Workloads: figures(1000, 101, 79)},
	}
	bench.SetRatios(rs)
	if got := rs[0].Workloads[0].Ratio; got != 1 {
		t.Errorf("runc's own ratio = %v, want 1", got)
	}
	if got := rs[1].Workloads[0].Ratio; got != 550 {
		t.Errorf("runsc (2022) dd ratio = %v, want 550", got)
	}
	v := bench.SyscallVerdicts(rs, cur)
	want := []struct {
		ratio float64
		met   bool
	}{{10, true}, {2.02, false}, {1.975, true}}
	if len(v) != len(want) {
		t.Fatalf("verdicts = %+v", v)
	}
	for i, w := range want {
		if d := v[i].Ratio - w.ratio; d > 1e-9 || d < -1e-9 || v[i].Met != w.met || v[i].Note != "" {
			t.Errorf("verdict %d = %+v, want ratio %v met %v", i, v[i], w.ratio, w.met)
		}
	}
	if !strings.Contains(v[0].What, bench.WorkloadDD) || v[0].Max != bench.TargetDDRatio || v[1].Max != bench.TargetRealRatio {
		t.Errorf("verdict names/targets: %+v", v)
	}

	// Without runc, or with the current runsc failed, skipped or absent: not met, and why.
	for name, rs := range map[string][]bench.SyscallRuntime{
		"no runc":  {{Label: "runc", Runtime: "runc", Error: "boom"}, {Label: cur, Runtime: "runsc", Workloads: figures(1, 1, 1)}},
		"failed":   {{Label: "runc", Runtime: "runc", Workloads: figures(1, 1, 1)}, {Label: cur, Runtime: "runsc", Error: "create: boom"}},
		"skipped":  {{Label: "runc", Runtime: "runc", Workloads: figures(1, 1, 1)}, {Label: cur, Runtime: "runsc", Skipped: "not installed"}},
		"absent":   {{Label: "runc", Runtime: "runc", Workloads: figures(1, 1, 1)}},
		"zero run": {{Label: "runc", Runtime: "runc", Workloads: figures(0, 0, 0)}, {Label: cur, Runtime: "runsc", Workloads: figures(1, 1, 1)}},
	} {
		bench.SetRatios(rs)
		for _, v := range bench.SyscallVerdicts(rs, cur) {
			if v.Met || v.Note == "" || v.Ratio != 0 {
				t.Errorf("%s: %+v, want not met with a note", name, v)
			}
		}
	}
}

func TestLatencyVerdict(t *testing.T) {
	for _, tc := range []struct {
		r   *bench.RuntimeResult
		met bool
	}{
		{&bench.RuntimeResult{Ratio: 1.5}, true},
		{&bench.RuntimeResult{Ratio: 1.51}, false},
		{&bench.RuntimeResult{Ratio: 0.9}, true},
		// A later figure's error (thaw) leaves the measured ratio standing.
		{&bench.RuntimeResult{Ratio: 1.2, Error: "resume after idle freeze: boom"}, true},
		{&bench.RuntimeResult{Error: "raw baseline: boom"}, false},
		{&bench.RuntimeResult{}, false},
		{nil, false},
	} {
		v := bench.LatencyVerdict(tc.r, "runsc (current)")
		if v.Met != tc.met || (v.Note == "") != (tc.r != nil && tc.r.Ratio > 0) {
			t.Errorf("LatencyVerdict(%+v) = %+v, want met %v", tc.r, v, tc.met)
		}
	}
}

// TestSyscallsRunc runs the figure with small counts on runc through a real daemon: every
// workload has its runs, inside-the-sandbox times that are positive and below the exec's
// own, runc's ratio 1, the shortened loop scaled; a runtime that cannot create is reported
// with its error and a skipped one with its reason, the others measured all the same.
func TestSyscallsRunc(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := testutil.Binaries(t)
	run := "/run/moat-test-bench-" + filepath.Base(t.TempDir())
	t.Cleanup(func() { os.RemoveAll(run) })
	d, stop, err := daemon.Start(context.Background(), daemon.Config{
		DataDir: t.TempDir(), RunDir: run, Socket: filepath.Join(run, "moat.sock"),
		InitPath: filepath.Join(bin, "moat-init"), IDBase: testutil.IDBase(t),
		Log:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		DefaultLimits: sandbox.Limits{DiskBytes: 512 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := sdk.NewUnix(filepath.Join(run, "moat.sock"))
	t.Cleanup(func() {
		stop()
		d.Manager.Wait()
	})
	const runs, writes = 2, 20000
	res := bench.Syscalls(context.Background(), []bench.SyscallTarget{
		{Label: "runc", Runtime: "runc", Client: c, DDCount: writes},
		{Label: "broken", Runtime: "nope", Client: c},
		{Label: "runsc (current)", Runtime: "runsc", Skip: "not installed here"},
	}, bench.SyscallOptions{Runs: runs, Files: 300, Progress: func(s string) { t.Log(s) }}, "runsc (current)")
	if len(res.Runtimes) != 3 {
		t.Fatalf("runtimes: %+v", res.Runtimes)
	}
	r := res.Runtimes[0]
	if r.Error != "" || len(r.Workloads) != 3 {
		t.Fatalf("runc: %+v", r)
	}
	for _, w := range r.Workloads {
		if w.Inside.N != runs || w.Exec.N != runs || w.Inside.P50 <= 0 || w.Inside.P50 > w.Exec.P50 || w.Inside.Min > w.Exec.Min || w.Ratio != 1 {
			t.Errorf("runc %s: %+v", w.Workload, w)
		}
		// Plausible: each command forks and execs a program that makes thousands of system
		// calls (≥ 1 ms on any host), and takes well under the 30 s a hung one would.
		if w.Inside.Min < 1 || w.Inside.P50 > 30000 {
			t.Errorf("runc %s: min %v ms, median %v ms", w.Workload, w.Inside.Min, w.Inside.P50)
		}
		wantScale := 1.0
		if w.Workload == bench.WorkloadDD {
			wantScale = float64(bench.DDWrites) / writes
			if !strings.Contains(w.Command, "count=20000") {
				t.Errorf("dd command %q", w.Command)
			}
		}
		if w.Scale != wantScale || w.Median != w.Inside.P50*wantScale {
			t.Errorf("runc %s: scale %v median %v, want scale %v", w.Workload, w.Scale, w.Median, wantScale)
		}
	}
	if b := res.Runtimes[1]; b.Error == "" || len(b.Workloads) != 0 {
		t.Errorf("a runtime that cannot create: %+v, want its error", b)
	}
	if s := res.Runtimes[2]; s.Skipped != "not installed here" || s.Error != "" || len(s.Workloads) != 0 {
		t.Errorf("skipped runtime: %+v", s)
	}
	if len(res.Targets) != 3 || res.Targets[0].Met || !strings.Contains(res.Targets[0].Note, "not installed here") {
		t.Errorf("targets: %+v", res.Targets)
	}
	if res.Files != 300 || res.DDWrites != bench.DDWrites {
		t.Errorf("result: files %d writes %d", res.Files, res.DDWrites)
	}
	// Deletes finish in the background: every sandbox goes.
	testutil.WaitFor(t, time.Minute, "the figure's sandboxes deleted", func() bool {
		list, err := c.List(context.Background())
		return err == nil && len(list) == 0
	})
}
