package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/bench"
	"github.com/moatdev/moat/internal/testutil"
)

// TestCLIBenchSyscallFlags: bad counts of the system-call figure are refused before any
// daemon starts, with the flag named.
func TestCLIBenchSyscallFlags(t *testing.T) {
	bin := filepath.Join(testutil.Binaries(t), "moat")
	for _, args := range [][]string{
		{"--syscalls", "--syscall-runs", "0"},
		{"--syscalls", "--syscall-files", "-1"},
		{"--syscall-2022-runs", "0"},
		{"--syscall-2022-writes", "0"},
	} {
		argv := append([]string{"--data", t.TempDir(), "--run-dir", t.TempDir(), "bench"}, args...)
		out, err := exec.Command(bin, argv...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "--syscall-runs, --syscall-files") {
			t.Errorf("moat bench %v: %v %s", args, err, out)
		}
	}
}

func TestVerdictText(t *testing.T) {
	for _, tc := range []struct {
		v    bench.Verdict
		want string
	}{
		{bench.Check("x", 1.234, 2, ""), "1.23× met"},
		{bench.Check("x", 2.5, 2, ""), "2.50× NOT met"},
		{bench.Check("x", 0, 2, "runsc (current) failed: boom\x1b[2J"), "unknown (runsc (current) failed: boom"},
	} {
		if got := verdictText(tc.v); !strings.HasPrefix(got, tc.want) || strings.Contains(got, "\x1b") {
			t.Errorf("verdictText(%+v) = %q, want %q…", tc.v, got, tc.want)
		}
	}
}

// TestCLIBenchSyscalls runs `moat bench --syscalls --json` with small counts and no other
// figure: runc, the runsc of 2022 and the current runsc each have the three workloads (or,
// when a binary is missing here, a skipped line saying so), the runsc of 2022 its shortened
// loop scaled, the verdicts are there, and nothing is left mounted.
func TestCLIBenchSyscalls(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := filepath.Join(testutil.Binaries(t), "moat")
	run := cliRunDir(t)
	cmd := exec.Command(bin, "--data", t.TempDir(), "--run-dir", run, "bench", "--json",
		"--runtimes", "", "--idle", "0", "--burst", "0", "--warm", "0", "--burst-warm=false", "--conn-sandboxes", "0",
		"--snapshot-runs", "0", "--checkpoint-runs", "0", "--cp-runs", "0",
		"--syscalls", "--syscall-runs", "1", "--syscall-files", "50", "--syscall-2022-runs", "1", "--syscall-2022-writes", "1000")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("moat bench: %v\n%s", err, stderr.String())
	}
	var res bench.Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	sr := res.Syscalls
	if sr == nil || len(sr.Runtimes) != 3 || len(sr.Targets) != 4 || sr.Files != 50 {
		t.Fatalf("syscalls: %s", out)
	}
	for i, label := range []string{"runc", "runsc (2022)", currentRunscLabel} {
		r := sr.Runtimes[i]
		if r.Label != label || r.Error != "" {
			t.Errorf("runtime %d: %+v", i, r)
			continue
		}
		if r.Skipped != "" {
			if label == "runc" || !strings.Contains(r.Skipped, "not installed") {
				t.Errorf("%s skipped: %s", label, r.Skipped)
			}
			continue
		}
		if len(r.Workloads) != 3 {
			t.Errorf("%s: workloads %+v", label, r.Workloads)
			continue
		}
		for _, w := range r.Workloads {
			if w.Inside.N != 1 || w.Median <= 0 || w.Ratio <= 0 {
				t.Errorf("%s %s: %+v", label, w.Workload, w)
			}
			wantScale := 1.0
			if label == "runsc (2022)" && w.Workload == bench.WorkloadDD {
				wantScale = float64(bench.DDWrites) / 1000
			}
			if w.Scale != wantScale {
				t.Errorf("%s %s: scale %v, want %v", label, w.Workload, w.Scale, wantScale)
			}
		}
	}
	if v := sr.Targets[3]; v.Met || v.Note == "" {
		t.Errorf("latency verdict without a latency figure: %+v", v)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), filepath.Dir(run)+"/moat-bench-") {
		t.Errorf("a bench daemon's mount is left:\n%s", mounts)
	}
}
