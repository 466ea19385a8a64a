package storage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/moatdev/moat/internal/sandbox"
)

func TestOverlayFlags(t *testing.T) {
	for _, c := range []struct {
		idmapped bool
		want     uintptr
	}{
		{false, syscall.MS_NODEV | syscall.MS_NOSUID}, // runsc: files of host root
		{true, syscall.MS_NODEV},                      // runc: the sandbox's own uids, sudo inside
	} {
		if got := overlayFlags(c.idmapped); got != c.want {
			t.Errorf("overlayFlags(%v) = %#x, want %#x", c.idmapped, got, c.want)
		}
	}
}

// TestMountHostView looks at a sandbox's root filesystem from the host, with and without a
// user namespace: every mount is nodev; every mount is nosuid but the idmapped overlays;
// and a setuid-root program, shipped in a layer or written into the upper as runsc writes
// it (host root's), never runs with host root's privileges for another host user, even one
// that holds an open descriptor of it (the directory permissions aside).
func TestMountHostView(t *testing.T) {
	prog, err := os.ReadFile("/usr/bin/id")
	if err != nil {
		t.Skip(err)
	}
	for _, c := range []struct {
		name   string
		userns bool
	}{{"plain", false}, {"userns", true}} {
		t.Run(c.name, func(t *testing.T) {
			s, run := newTestStore(t)
			ctx := ctxT(t)
			id := "sb-00000000001" + strconv.FormatBool(c.userns)[:1]
			dir, rootfs := sandboxDirs(t, run, id)
			// An extra layer as an image would ship it: a setuid-root program.
			extra := t.TempDir()
			if err := os.WriteFile(filepath.Join(extra, "suid-id"), prog, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(extra, "suid-id"), os.ModeSetuid|0o755); err != nil {
				t.Fatal(err)
			}
			tmpl, err := s.Template(ctx, HostTemplate)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CreateDrive(ctx, id, 64<<20); err != nil {
				t.Fatal(err)
			}
			req := sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs, Extra: []sandbox.Layer{{ID: "x", Path: extra}}}
			if c.userns {
				req.UserNS, req.RootUID = newUserNS(t, dir, testHostUID), testHostUID
			}
			if err := s.Mount(ctx, req); err != nil {
				t.Fatal(err)
			}
			defer s.Unmount(ctx, id, rootfs)

			// The flags, as the kernel reports them.
			n := 0
			for _, m := range mountinfoBelow(t, dir) {
				if m.fstype == "nsfs" {
					continue
				}
				n++
				if !m.has("nodev") {
					t.Errorf("%s (%s) is not nodev: %s", m.point, m.fstype, m.opts)
				}
				if setid := c.userns && m.fstype == "overlay"; !setid && !m.has("nosuid") {
					t.Errorf("%s (%s) is not nosuid: %s", m.point, m.fstype, m.opts)
				}
			}
			if n < 5 { // drive, three lowers, two overlays
				t.Errorf("only %d mounts below %s", n, dir)
			}

			// A setuid-root program written into the upper, as root inside runsc writes it
			// (inside a user namespace the writer is the sandbox's root instead).
			owner := 0
			if c.userns {
				owner = testHostUID
			}
			made := filepath.Join(rootfs, "tmp/suid-id")
			if err := os.WriteFile(made, prog, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(made, owner, owner); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(made, os.ModeSetuid|0o755); err != nil {
				t.Fatal(err)
			}
			// Through the overlay: never host root; with a user namespace the program is
			// the sandbox root's and raises to that uid only (what sudo inside needs).
			wantOverlay := "65534"
			if c.userns {
				wantOverlay = strconv.Itoa(testHostUID)
			}
			for _, x := range []struct{ path, want string }{
				{made, wantOverlay},
				{filepath.Join(rootfs, "suid-id"), wantOverlay},
				{filepath.Join(dir, "drive/root/upper/tmp/suid-id"), "65534"},
				{filepath.Join(dir, "lower/0/suid-id"), "65534"},
			} {
				if got := euidAsNobody(t, x.path); got != x.want {
					t.Errorf("%s run by nobody: euid %s, want %s", x.path, got, x.want)
				}
			}
		})
	}
}

// euidAsNobody opens path as root and has uid/gid 65534 execute it through
// /proc/self/fd (so the directories on its path do not matter) with -u; it returns the
// program's output, the effective uid it ran with.
func euidAsNobody(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("/proc/self/fd/3", "-u")
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running %s as nobody: %v\n%s", path, err, out)
	}
	return strings.TrimSpace(string(out))
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct{ point, opts, fstype string }

func (m mountEntry) has(opt string) bool { return strings.Contains(","+m.opts+",", ","+opt+",") }

// mountinfoBelow lists the mounts strictly below dir.
func mountinfoBelow(t *testing.T, dir string) []mountEntry {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []mountEntry
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || !strings.HasPrefix(f[4], dir+"/") {
			continue
		}
		sep := 6
		for sep < len(f) && f[sep] != "-" {
			sep++
		}
		if sep+1 < len(f) {
			out = append(out, mountEntry{point: f[4], opts: f[5], fstype: f[sep+1]})
		}
	}
	return out
}

// TestNewClosesDirectories: layers (set-id programs of images), drives (files of host root
// under runsc) and templates are root's alone, also when they existed with wider modes.
func TestNewClosesDirectories(t *testing.T) {
	requireRoot(t)
	data := t.TempDir()
	for _, d := range []string{"layers", "drives", "templates"} {
		if err := os.Mkdir(filepath.Join(data, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(data, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(data, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range []string{"layers", "drives", "templates"} {
		fi, err := os.Stat(filepath.Join(data, d))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", d, fi.Mode().Perm())
		}
	}
}
