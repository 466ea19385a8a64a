package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestSandboxDirAccess(t *testing.T) {
	ids := IDRange{Host: 0x40010000, Size: 65536}
	for _, c := range []struct {
		mapped bool
		gid    int
		mode   fs.FileMode
	}{
		{false, 0, 0o700},         // runsc 2022-12: the Sentry and gofer are host root
		{true, 0x40010000, 0o710}, // runc, crun, a current runsc: the sandbox's root passes through, nobody else
	} {
		gid, mode := sandboxDirAccess(c.mapped, ids)
		if gid != c.gid || mode != c.mode {
			t.Errorf("mapped %v: gid %d mode %v, want %d %v", c.mapped, gid, mode, c.gid, c.mode)
		}
		if mode&0o007 != 0 || mode&0o060 != 0 {
			t.Errorf("mapped %v: mode %v gives others access or the group more than search", c.mapped, mode)
		}
	}
}

// TestPrepareSandboxDir creates and repairs sandbox directories on disk: a directory left
// open (0711, as before) is closed, its parent is searchable but not listable.
func TestPrepareSandboxDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown)")
	}
	run := t.TempDir()
	ids := IDRange{Host: 0x40010000, Size: 65536}
	check := func(p string, gid uint32, mode fs.FileMode) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || st.Uid != 0 || st.Gid != gid || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %d:%d, want a directory 0:%d %v", p, fi.Mode(), st.Uid, st.Gid, gid, mode)
		}
	}
	runc := filepath.Join(run, "sandboxes", "sb-1")
	if err := prepareSandboxDir(runc, true, ids); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(run, "sandboxes"), 0, 0o711)
	check(runc, ids.Host, 0o710)

	old := filepath.Join(run, "sandboxes", "sb-2")
	if err := os.Mkdir(old, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := prepareSandboxDir(old, false, ids); err != nil {
		t.Fatal(err)
	}
	check(old, 0, 0o700)
	// A sandbox's identity does not change on restart, but the group follows it anyway.
	if err := prepareSandboxDir(runc, false, ids); err != nil {
		t.Fatal(err)
	}
	check(runc, 0, 0o700)

	link := filepath.Join(run, "sandboxes", "sb-3")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if err := prepareSandboxDir(link, true, ids); err == nil {
		t.Error("a symlink was accepted as a sandbox directory")
	}
}
