package initlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// TestCappedRate: past the burst, only the rate gets through; the dropped bytes are
// counted in the log before the next bytes that get through.
func TestCappedRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	c, err := newCapped(path, Limits{MaxBytes: 1 << 20, Rate: 100, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	if err := c.write(bytes.Repeat([]byte("a"), 1500), t0); err != nil {
		t.Fatal(err)
	}
	if err := c.write([]byte("bbb"), t0); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(path); got != 1000 {
		t.Fatalf("after the burst the log has %d bytes, want 1000", got)
	}
	// Output resumes once the bucket holds the burst again (less than resumeBytes), first
	// with the count of the 503 dropped; in between, everything is dropped.
	if err := c.write([]byte("dropped too\n"), t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := c.write([]byte("later\n"), t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	c.close()
	s := readFile(t, path)
	if !strings.HasSuffix(s, strings.Repeat("a", 1000)+"\n[moat: 515 bytes of output dropped: more than 100 bytes/s]\nlater\n") {
		t.Fatalf("log ends %q", s[max(0, len(s)-120):])
	}
}

// TestCappedRotation: the log and its one predecessor never exceed MaxBytes each.
func TestCappedRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	lim := Limits{MaxBytes: 1000, Rate: 1 << 30, Burst: 1 << 30}
	if err := os.WriteFile(path, bytes.Repeat([]byte("o"), 900), 0o640); err != nil {
		t.Fatal(err)
	}
	c, err := newCapped(path, lim)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	for i := range 50 {
		line := []byte(strings.Repeat(string(rune('a'+i%26)), 99) + "\n")
		if err := c.write(line, now); err != nil {
			t.Fatal(err)
		}
		if s, s1 := fileSize(path), fileSize(path+".1"); s > lim.MaxBytes || s1 > lim.MaxBytes {
			t.Fatalf("after %d lines: %d and %d bytes", i+1, s, s1)
		}
	}
	c.close()
	if s := readFile(t, path); !strings.HasSuffix(s, strings.Repeat("x", 99)+"\n") {
		t.Fatalf("the newest line is not at the end of the log: %q", s)
	}
	if fileSize(path+".1") != lim.MaxBytes {
		t.Fatalf("rotated part has %d bytes", fileSize(path+".1"))
	}
	// A single write larger than the cap is split over rotations, never exceeding it.
	c, _ = newCapped(path, lim)
	if err := c.write(bytes.Repeat([]byte("z"), 5000), now); err != nil {
		t.Fatal(err)
	}
	c.close()
	if s, s1 := fileSize(path), fileSize(path+".1"); s > lim.MaxBytes || s1 > lim.MaxBytes {
		t.Fatalf("after a large write: %d and %d bytes", s, s1)
	}
}

func TestCappedRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "x.log")); err != nil {
		t.Fatal(err)
	}
	if _, err := newCapped(filepath.Join(dir, "x.log"), DefaultLimits); err == nil {
		t.Fatal("opened a log through a symlink")
	}
}

// writeEnd opens the FIFO for writing as a container's process holds it: a descriptor of
// its own, outliving the daemon's reader.
func writeEnd(t *testing.T, fifo string) int {
	t.Helper()
	fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLogAcrossRestart: output reaches the log through the FIFO; with the reader gone
// (daemon killed) a writer gets EPIPE rather than blocking or filling anything; a new
// reader (Attach) reads on into the same log; the ends of every writer end the Log.
func TestLogAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	fifo, path := filepath.Join(dir, "init.fifo"), filepath.Join(dir, "x.log")
	lg, err := Create(fifo, path, DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := writeEnd(t, fifo) // the container's copy
	lg.Release()
	if lg.File() != nil {
		t.Fatal("File after Release")
	}
	unix.Write(w, []byte("one\n"))
	waitFor(t, "the first line", func() bool { return readFile(t, path) == "one\n" })

	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	// No reader: the write fails at once with EPIPE. (Go turns SIGPIPE into an exit only
	// for fds 1 and 2; moat-init notifies SIGPIPE, so that its fds 1 and 2 get EPIPE too.)
	if _, err := unix.Write(w, []byte("lost\n")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write without a reader: %v, want EPIPE", err)
	}

	lg, err = Attach(fifo, path, DefaultLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(w, []byte("two\n"))
	waitFor(t, "the line after the restart", func() bool { return readFile(t, path) == "one\ntwo\n" })
	unix.Close(w)
	if tail := lg.Tail(5 * time.Second); tail != "two\n" {
		t.Fatalf("Tail = %q", tail)
	}
	select {
	case <-lg.done:
	default:
		t.Fatal("the Log did not end when its last writer closed")
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestAttachRefusesNonFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "init.fifo")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(p, filepath.Join(dir, "x.log"), DefaultLimits, nil); err == nil {
		t.Fatal("attached to a regular file")
	}
}

// TestLogFlood: a writer that writes as fast as it can leaves at most the burst plus the
// rate on the host, and the reader keeps draining (the writer never blocks for long).
func TestLogFlood(t *testing.T) {
	dir := t.TempDir()
	fifo, path := filepath.Join(dir, "init.fifo"), filepath.Join(dir, "x.log")
	lim := Limits{MaxBytes: 256 << 10, Rate: 32 << 10, Burst: 128 << 10}
	lg, err := Create(fifo, path, lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	w := writeEnd(t, fifo)
	lg.Release()
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	start := time.Now()
	for written := 0; written < 64<<20; written += len(chunk) {
		if _, err := unix.Write(w, chunk); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	unix.Close(w)
	lg.Tail(5 * time.Second)
	total := fileSize(path) + fileSize(path+".1")
	if limit := lim.Burst + int64((took.Seconds()+1)*float64(lim.Rate)); total > limit {
		t.Fatalf("64 MiB written in %v left %d bytes on the host, want at most %d", took, total, limit)
	}
	if !strings.Contains(readFile(t, path)+readFile(t, path+".1"), "bytes of output dropped") {
		t.Fatal("the drop is not noted in the log")
	}
	t.Logf("64 MiB in %v: %d bytes logged", took, total)
}
