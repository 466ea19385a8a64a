package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataLock: an exclusive daemon (moat serve) is alone on its data directory: it
// refuses one that is in use, naming the holder, and while it holds it neither a shared
// daemon (in-process moat run, serve --share-data) nor another exclusive one starts;
// shared daemons share; released locks free the directory.
func TestDataLock(t *testing.T) {
	dir := t.TempDir()
	ex, err := lockDataDir(dir, "/run/x/moat.sock", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockDataDir(dir, "/run/y.sock", true); err == nil || !strings.Contains(err.Error(), "in use by another moat daemon") ||
		!strings.Contains(err.Error(), "socket /run/x/moat.sock") || !strings.Contains(err.Error(), "--share-data") {
		t.Errorf("a second exclusive lock: %v", err)
	}
	if _, err := lockDataDir(dir, "/run/y.sock", false); err == nil || !strings.Contains(err.Error(), "does not share it") {
		t.Errorf("a shared lock beside an exclusive one: %v", err)
	}
	unlockDataDir(ex)
	if b, _ := os.ReadFile(filepath.Join(dir, dataLockName)); len(b) != 0 {
		t.Errorf("the released lock still names its holder: %q", b)
	}

	sh1, err := lockDataDir(dir, "/run/a.sock", false)
	if err != nil {
		t.Fatal(err)
	}
	sh2, err := lockDataDir(dir, "/run/b.sock", false)
	if err != nil {
		t.Fatalf("two shared daemons: %v", err)
	}
	if _, err := lockDataDir(dir, "/run/c.sock", true); err == nil || !strings.Contains(err.Error(), "in-process") {
		t.Errorf("an exclusive lock beside shared ones: %v", err)
	}
	unlockDataDir(sh1)
	unlockDataDir(sh2)
	ex, err = lockDataDir(dir, "/run/c.sock", true)
	if err != nil {
		t.Fatalf("exclusive once the others left: %v", err)
	}
	unlockDataDir(ex)
}

// TestClearStaleSocket: a socket a live listener answers on, and a file that is not a
// socket, are never removed; a dead daemon's socket is; a missing one is fine.
func TestClearStaleSocket(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := clearStaleSocket(live); err == nil || !strings.Contains(err.Error(), "already listens") {
		t.Errorf("live socket: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live socket was removed: %v", err)
	}

	dead := filepath.Join(dir, "dead.sock")
	dl, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	dl.(*net.UnixListener).SetUnlinkOnClose(false)
	dl.Close()
	if err := clearStaleSocket(dead); err != nil {
		t.Errorf("dead socket: %v", err)
	}
	if _, err := os.Lstat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead socket is still there: %v", err)
	}

	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	if err := clearStaleSocket(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the file was removed: %v", err)
	}
	if err := clearStaleSocket(filepath.Join(dir, "none")); err != nil {
		t.Errorf("missing socket: %v", err)
	}

	// removeOwnSocket leaves a socket another daemon made at the same path.
	ino := inode(live)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	os.Remove(live)
	l2, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if inode(live) == ino {
		t.Log("the new socket got the old one's inode and change time: cannot tell them apart here")
	} else {
		removeOwnSocket(live, ino)
		if _, err := os.Stat(live); err != nil {
			t.Errorf("another daemon's socket was removed: %v", err)
		}
	}
	removeOwnSocket(live, inode(live))
	if _, err := os.Stat(live); !os.IsNotExist(err) {
		t.Errorf("the daemon's own socket was kept: %v", err)
	}
}
