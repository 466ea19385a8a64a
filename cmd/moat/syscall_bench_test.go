package main

import (
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
