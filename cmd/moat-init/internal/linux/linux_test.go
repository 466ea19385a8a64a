package linux

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

func owner(t *testing.T, path string) uint32 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

func TestRunAs(t *testing.T) {
	needRoot(t)
	// t.TempDir's parent is private to root; nobody needs a way in.
	dir, err := os.MkdirTemp("", "moat-runas-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	nobody := Cred{UID: 65534, GID: 65534, Groups: []uint32{65534}}
	// Many calls, so that several threads take a turn.
	for i := 0; i < 50; i++ {
		p := filepath.Join(dir, "f", string(rune('a'+i%26)))
		err := RunAs(nobody, func() error {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			return os.WriteFile(p, nil, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := owner(t, p); got != 65534 {
			t.Fatalf("file made as nobody is owned by %d", got)
		}
		// Credentials do not leak out of RunAs.
		q := filepath.Join(dir, "root-file")
		if err := os.WriteFile(q, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := owner(t, q); got != 0 {
			t.Fatalf("file made after RunAs is owned by %d", got)
		}
		os.Remove(q)
	}
	// The kernel checks permissions against the user.
	err = RunAs(nobody, func() error { return os.WriteFile("/root/moat-runas-test", nil, 0o644) })
	if !os.IsPermission(err) {
		os.Remove("/root/moat-runas-test")
		t.Fatalf("nobody wrote into /root: %v", err)
	}
}

func TestReaperDispatchesStatuses(t *testing.T) {
	needRoot(t)
	r := NewReaper(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	got := make(chan syscall.WaitStatus, 10)
	for code := 0; code < 5; code++ {
		_, err := r.Spawn(func() (int, error) {
			return ForkExec(ExecAttr{
				Path:  "/bin/sh",
				Args:  []string{"sh", "-c", "exit " + string(rune('0'+code))},
				Files: []*os.File{devnull, devnull, devnull},
			})
		}, func(ws syscall.WaitStatus) { got <- ws })
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int]bool{}
	for i := 0; i < 5; i++ {
		select {
		case ws := <-got:
			seen[ws.ExitStatus()] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d statuses arrived", i)
		}
	}
	if len(seen) != 5 {
		t.Fatalf("statuses %v", seen)
	}
	if len(r.Owned()) != 0 {
		t.Fatalf("owners left: %v", r.Owned())
	}
	if _, err := ForkExec(ExecAttr{Path: "/no/such/binary", Files: []*os.File{devnull}}); err == nil {
		t.Fatal("ForkExec of a missing binary succeeded")
	}
}

func TestOpenPTY(t *testing.T) {
	m, s, err := OpenPTY(100, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer s.Close()
	if err := SetWinsize(m, 120, 40); err != nil {
		t.Fatal(err)
	}
	// The master is pollable: a deadline interrupts a read.
	if err := m.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatalf("master has no deadlines: %v", err)
	}
	if _, err := m.Read(make([]byte, 10)); !os.IsTimeout(err) {
		t.Fatalf("read: %v, want a timeout", err)
	}
}

func TestTrimResident(t *testing.T) {
	n, err := TrimResident()
	if err != nil {
		t.Fatal(err)
	}
	if n <= 0 {
		t.Fatalf("trimmed %d bytes", n)
	}
}
