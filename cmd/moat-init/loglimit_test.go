package main

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLogRateLimited: what the sandbox can make moat-init log — signals to PID 1, bad
// requests on its port — is rate-limited, with the dropped lines counted.
func TestLogRateLimited(t *testing.T) {
	in := startInstanceArgs(t, []string{"-log-level", "info"}, "MOAT_DEFAULT_USER=root")
	start := time.Now()
	for range 1000 {
		if err := in.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	addr := strings.TrimPrefix(in.url, "http://")
	for range 300 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// An HTTP/2 preface (prior knowledge) followed by garbage.
		_, _ = c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00garbage-frame"))
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = c.Read(make([]byte, 512))
		c.Close()
	}
	elapsed := time.Since(start)
	time.Sleep(300 * time.Millisecond)
	lines := strings.Count(in.logs(), "\n")
	t.Logf("%d log lines in %v (%d about HTTP/2)", lines, elapsed, strings.Count(in.logs(), "http2"))
	if limit := logBurst + int((elapsed.Seconds()+1)*logRate) + 10; lines > limit {
		t.Fatalf("%d log lines after 1000 signals and 300 bad connections in %v, want at most %d", lines, elapsed, limit)
	}
	// The first line once the bucket has a token again carries the count.
	time.Sleep(2 * time.Second / logRate)
	_ = in.cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, 5*time.Second, "the count of dropped lines", func() bool { return strings.Contains(in.logs(), "log lines dropped") })
}
