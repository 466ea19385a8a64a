package sdk

import (
	"runtime"
	"syscall"
	"testing"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		code   int32
		exited bool
		status string
		want   int
	}{
		{0, true, "exit status 0", 0},
		{3, true, "exit status 3", 3},
		{-1, false, "signal: interrupt", 130},
		{-1, false, "signal: killed", 137},
		{-1, false, "signal: terminated", 143},
		{-1, false, "signal: segmentation fault (core dumped)", 139},
		{-1, false, "signal: aborted (core dumped)", 134},
		{-1, false, "signal: user defined signal 1", 138},
		{-1, false, "signal: signal 34", 162},
		{-1, false, "signal: signal 99", 137},
		{-1, false, "signal: no such name", 137},
		{-1, false, "wait status 0x57f", -1},
	} {
		if got := exitCode(tc.code, tc.exited, tc.status); got != tc.want {
			t.Errorf("exitCode(%d, %v, %q) = %d, want %d", tc.code, tc.exited, tc.status, got, tc.want)
		}
	}
}

// TestSignalNumberMatchesGo: every Linux signal as moat-init (Go on Linux) names it
// maps back to its number.
func TestSignalNumberMatchesGo(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("signal names are Linux's")
	}
	for n := 1; n <= 64; n++ {
		if got, ok := signalNumber(syscall.Signal(n).String()); !ok || got != n {
			t.Errorf("signalNumber(%q) = %d, %v; want %d", syscall.Signal(n).String(), got, ok, n)
		}
	}
}

// FuzzExitCode: any status a sandbox reports gives a code a shell could give.
func FuzzExitCode(f *testing.F) {
	for _, s := range []string{"signal: killed", "signal: signal 64", "signal: signal -1", "signal: signal 9999999999999999999", "exit status 1", "signal: "} {
		f.Add(int32(-1), false, s)
	}
	f.Fuzz(func(t *testing.T, code int32, exited bool, status string) {
		got := exitCode(code, exited, status)
		if !exited && len(status) >= 8 && status[:8] == "signal: " && (got < 129 || got > 192) {
			t.Errorf("exitCode(%q) = %d: not 128+signal", status, got)
		}
	})
}
