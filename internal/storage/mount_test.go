package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

const testHostUID = 0x40000000 + 4001*65536 // a slot no live sandbox uses in tests

func statOwner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

// TestMountUserNS mounts the host template through a real user namespace: the host's /usr
// shows up owned by the sandbox's root, writes land on the drive, and a second mount of
// the same drive finds them.
func TestMountUserNS(t *testing.T) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	const id = "sb-000000000001"
	dir, rootfs := sandboxDirs(t, run, id)
	userns := newUserNS(t, dir, testHostUID)
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, id, 256<<20); err != nil {
		t.Fatal(err)
	}
	req := sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs, UserNS: userns, RootUID: testHostUID}
	if err := s.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"usr/bin/env", "etc/passwd", "usr"} {
		if uid, gid := statOwner(t, filepath.Join(rootfs, p)); uid != testHostUID || gid != testHostUID {
			t.Errorf("%s owned by %d:%d, want the sandbox root %d", p, uid, gid, testHostUID)
		}
	}
	if uid, _ := statOwner(t, filepath.Join(rootfs, "home/user")); uid != testHostUID+1000 {
		t.Errorf("/home/user owned by %d, want %d", uid, testHostUID+1000)
	}
	if target, err := os.Readlink(filepath.Join(rootfs, "bin")); err != nil || target != "usr/bin" {
		t.Errorf("/bin -> %q, %v", target, err)
	}
	// A second Mount while mounted is refused.
	if err := s.Mount(ctx, req); !errdefs.IsConflict(err) {
		t.Errorf("second Mount: %v, want conflict", err)
	}

	// Writes go to the drive, in the uppers of the parts.
	if err := os.WriteFile(filepath.Join(rootfs, "home/user/note"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "usr/new-file"), []byte("usr upper"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "drive/root/upper/home/user/note")); err != nil {
		t.Errorf("write to / not on the drive: %v", err)
	}
	if _, err := os.Stat("/usr/new-file"); err == nil {
		t.Fatal("write to /usr reached the host's /usr")
	}
	if _, err := os.Stat(filepath.Join(dir, "drive/usr/upper/new-file")); err != nil {
		t.Errorf("write to /usr not on the drive: %v", err)
	}
	// The lowers are read-only even for the host's root.
	if err := os.WriteFile(filepath.Join(dir, "lower/1/moat-test"), nil, 0o644); err == nil {
		t.Fatal("wrote into an idmapped lower")
	}

	if err := s.Unmount(ctx, id, rootfs); err != nil {
		t.Fatal(err)
	}
	if m := mountsBelow(t, dir); !onlyNamespaces(m, dir) {
		t.Fatalf("mounts left after Unmount: %v", m)
	}
	if err := s.Unmount(ctx, id, rootfs); err != nil {
		t.Fatalf("second Unmount: %v", err)
	}
	waitLoopGone(t, s.drivePath(id))

	// The data is in the image itself.
	probe := t.TempDir()
	if err := s.loops.MountImage(s.drivePath(id), probe, "ext4", syscall.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(probe, "root/upper/home/user/note"))
	_ = linux.UnmountAll(probe)
	if err != nil || string(data) != "kept" {
		t.Fatalf("note in the image: %q, %v", data, err)
	}
	waitLoopGone(t, s.drivePath(id))

	// Start again: the same drive, the same data.
	if err := s.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(rootfs, "home/user/note")); err != nil || string(data) != "kept" {
		t.Fatalf("after remount: %q, %v", data, err)
	}
	if err := s.Unmount(ctx, id, rootfs); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDrive(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDrive(ctx, id); err != nil {
		t.Fatalf("second DeleteDrive: %v", err)
	}
}

func onlyNamespaces(mounts []string, dir string) bool {
	for _, m := range mounts {
		if m != filepath.Join(dir, "userns") && m != filepath.Join(dir, "netns") {
			return false
		}
	}
	return true
}

// waitLoopGone waits for the autoclear loop device of image to detach.
func waitLoopGone(t *testing.T, image string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		dev, err := linux.LoopDeviceOf(image)
		if err != nil {
			t.Fatal(err)
		}
		if dev == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop device %s of %s still attached", dev, image)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMountPlain mounts without a user namespace (gVisor): files keep their host owners.
func TestMountPlain(t *testing.T) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	const id = "sb-000000000002"
	_, rootfs := sandboxDirs(t, run, id)
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, id, 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := s.Mount(ctx, sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs}); err != nil {
		t.Fatal(err)
	}
	defer s.Unmount(ctx, id, rootfs)
	if uid, gid := statOwner(t, filepath.Join(rootfs, "usr/bin/env")); uid != 0 || gid != 0 {
		t.Errorf("/usr/bin/env owned by %d:%d, want 0:0", uid, gid)
	}
	if uid, _ := statOwner(t, filepath.Join(rootfs, "home/user")); uid != 1000 {
		t.Errorf("/home/user owned by %d, want 1000", uid)
	}
	// Plain lowers are nosuid: set-id programs of the host do not gain host privileges.
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(filepath.Dir(rootfs), "lower/0"), &sfs); err != nil {
		t.Fatal(err)
	}
	if sfs.Flags&syscall.MS_RDONLY == 0 || sfs.Flags&syscall.MS_NOSUID == 0 {
		t.Errorf("plain lower flags %#x, want ro,nosuid", sfs.Flags)
	}
	// Set-id programs through the root filesystem: TestMountHostView.
}

// TestMountRefusesSymlinkedMountPoint: a sandbox that replaced /usr by a symlink in its
// upper cannot make the next Mount put an overlay where the symlink points.
func TestMountRefusesSymlinkedMountPoint(t *testing.T) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	const id = "sb-000000000003"
	dir, rootfs := sandboxDirs(t, run, id)
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, id, 64<<20); err != nil {
		t.Fatal(err)
	}
	req := sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs}
	if err := s.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := s.Unmount(ctx, id, rootfs); err != nil {
		t.Fatal(err)
	}
	// What a hostile sandbox could leave in its upper: /usr -> a host directory.
	victim := t.TempDir()
	probe := filepath.Join(dir, "probe")
	if err := s.loops.MountImage(s.drivePath(id), probe, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(probe, "root/upper/usr")); err != nil {
		t.Fatal(err)
	}
	if err := linux.UnmountAll(probe); err != nil {
		t.Fatal(err)
	}
	err = s.Mount(ctx, req)
	if !errdefs.IsConflict(err) {
		t.Fatalf("Mount with /usr a symlink: %v, want conflict", err)
	}
	if m := mountsBelow(t, victim); len(m) > 0 {
		t.Fatalf("mounted onto the symlink's target: %v", m)
	}
	if m := mountsBelow(t, dir); len(m) > 0 {
		t.Fatalf("failed Mount left mounts: %v", m)
	}
}

// TestMountExtraLayer puts a layer above the template's root: it appears, the template
// stays visible below it.
func TestMountExtraLayer(t *testing.T) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	const id = "sb-000000000004"
	dir, rootfs := sandboxDirs(t, run, id)
	userns := newUserNS(t, dir, testHostUID)
	extra := t.TempDir()
	if err := os.MkdirAll(filepath.Join(extra, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(extra, "workspace/README"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(extra, "workspace"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, id, 64<<20); err != nil {
		t.Fatal(err)
	}
	req := sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs, UserNS: userns, RootUID: testHostUID,
		Extra: []sandbox.Layer{{ID: "x", Path: extra}}}
	if err := s.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	defer s.Unmount(ctx, id, rootfs)
	if data, err := os.ReadFile(filepath.Join(rootfs, "workspace/README")); err != nil || string(data) != "hi" {
		t.Fatalf("extra layer: %q, %v", data, err)
	}
	if uid, _ := statOwner(t, filepath.Join(rootfs, "workspace")); uid != testHostUID+1000 {
		t.Errorf("/workspace owned by %d", uid)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "etc/passwd")); err != nil {
		t.Errorf("template below the extra layer: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(rootfs, &st); err != nil || st.Mode&0o7777 != 0o755 || st.Uid != testHostUID {
		t.Errorf("root directory mode %o owner %d: want 755 owned by the sandbox root", st.Mode&0o7777, st.Uid)
	}
}

// TestDiskLimit fills a 64 MiB drive from inside the root filesystem: the writer gets
// ENOSPC, and the host spends no more than the limit on it.
func TestDiskLimit(t *testing.T) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	const id = "sb-000000000005"
	const limit = 64 << 20
	_, rootfs := sandboxDirs(t, run, id)
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, id, limit); err != nil {
		t.Fatal(err)
	}
	var before syscall.Statfs_t
	if err := syscall.Statfs(s.dir, &before); err != nil {
		t.Fatal(err)
	}
	if err := s.Mount(ctx, sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs}); err != nil {
		t.Fatal(err)
	}
	defer s.Unmount(ctx, id, rootfs)
	f, err := os.Create(filepath.Join(rootfs, "tmp/fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0xa5}, 1<<20)
	var written int64
	for {
		n, err := f.Write(buf)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("after %d bytes: %v, want ENOSPC", written, err)
			}
			break
		}
		if written > 2*limit {
			t.Fatal("wrote twice the limit without ENOSPC")
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	f.Close()
	if written > limit {
		t.Errorf("wrote %d bytes into a %d-byte drive", written, limit)
	}
	if written < limit/2 {
		t.Errorf("only %d bytes fit into a %d-byte drive", written, limit)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(s.drivePath(id), &st); err != nil {
		t.Fatal(err)
	}
	// Allocated in full at create; beyond its size only the blocks of its extent tree.
	if used := st.Blocks * 512; used < limit || used > limit+1<<20 {
		t.Errorf("the image takes %d bytes on the host, want its %d-byte limit", used, limit)
	}
	var after syscall.Statfs_t
	if err := syscall.Statfs(s.dir, &after); err != nil {
		t.Fatal(err)
	}
	drop := (int64(before.Bavail) - int64(after.Bavail)) * before.Bsize
	t.Logf("wrote %d MiB before ENOSPC; image uses %d MiB; host free space dropped %d MiB",
		written>>20, st.Blocks*512>>20, drop>>20)
	// The host's free space is logged, not asserted: tests of other packages running at
	// the same time allocate drives of gigabytes. The image's own blocks (above) are what
	// the drive takes.
	// Deleting inside gives the space back to the sandbox.
	if err := os.Remove(filepath.Join(rootfs, "tmp/fill")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "tmp/after"), buf, 0o644); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
}

func TestDriveValidation(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	for _, c := range []struct {
		id   string
		size int64
	}{
		{"sb-000000000010", 63 << 20},
		{"sb-000000000010", -1},
		{"sb-000000000010", 1 << 50},
		{"../etc", 64 << 20},
		{"a/b", 64 << 20},
		{"", 64 << 20},
		{"SB-X", 64 << 20},
	} {
		if err := s.CreateDrive(ctx, c.id, c.size); !errdefs.IsInvalidArgument(err) {
			t.Errorf("CreateDrive(%q, %d): %v, want invalid argument", c.id, c.size, err)
		}
	}
	if err := s.CreateDrive(ctx, "sb-000000000011", 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, "sb-000000000011", 64<<20); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second CreateDrive: %v, want already exists", err)
	}
	entries, _ := os.ReadDir(filepath.Join(s.dir, "drives"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	want := []string{".format-67108864.img", "sb-000000000011.img"}
	if !slices.Equal(names, want) {
		t.Errorf("drives/ holds %v, want %v", names, want)
	}
	if err := s.Mount(ctx, sandbox.MountRequest{ID: "sb-000000000012", Target: "/tmp/x/rootfs"}); err == nil {
		t.Error("Mount outside the run directory accepted")
	}
}

// TestMountMissingDrive: Mount without CreateDrive is ErrNotFound and mounts nothing.
func TestMountMissingDrive(t *testing.T) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	const id = "sb-000000000013"
	dir, rootfs := sandboxDirs(t, run, id)
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Mount(ctx, sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs}); !errdefs.IsNotFound(err) {
		t.Fatalf("Mount: %v, want not found", err)
	}
	if m := mountsBelow(t, dir); len(m) > 0 {
		t.Fatalf("mounts left: %v", m)
	}
}

// measure returns the median duration of n runs of f.
func measure(n int, f func(i int)) time.Duration {
	var ds []time.Duration
	for i := range n {
		start := time.Now()
		f(i)
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkDriveMount reports the median times of CreateDrive (the first, which formats,
// and later ones) and of Mount and Unmount of the host template, beside formatting each drive
// with mkfs.ext4 directly measured in the same run. -benchtime 1x: each iteration is the whole
// measurement.
func BenchmarkDriveMount(b *testing.B) {
	for b.Loop() {
		driveMountFigures(b)
	}
}

func driveMountFigures(t *testing.B) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) string { return "sb-t" + string(rune('a'+i/26)) + string(rune('a'+i%26)) }
	const n = 15
	// Drives are allocated in full: 16 of the default 10 GiB would take 160 GiB of the
	// test host's disk. BenchmarkCreateDrive measures the 10 GiB case.
	const size = 256 << 20
	first := time.Now()
	if err := s.CreateDrive(ctx, "sb-first", size); err != nil {
		t.Fatal(err)
	}
	firstDur := time.Since(first)
	create := measure(n, func(i int) {
		if err := s.CreateDrive(ctx, id(i), size); err != nil {
			t.Fatal(err)
		}
	})
	var users []string
	for i := range n {
		dir, _ := sandboxDirs(t, run, id(i))
		users = append(users, newUserNS(t, dir, testHostUID))
	}
	mount := measure(n, func(i int) {
		_, rootfs := filepath.Split(filepath.Join(run, "sandboxes", id(i), "rootfs"))
		target := filepath.Join(run, "sandboxes", id(i), rootfs)
		err := s.Mount(ctx, sandbox.MountRequest{ID: id(i), Template: tmpl, Target: target, UserNS: users[i], RootUID: testHostUID})
		if err != nil {
			t.Fatal(err)
		}
	})
	unmount := measure(n, func(i int) {
		if err := s.Unmount(ctx, id(i), filepath.Join(run, "sandboxes", id(i), "rootfs")); err != nil {
			t.Fatal(err)
		}
	})
	var st syscall.Stat_t
	_ = syscall.Stat(s.drivePath(id(0)), &st)
	t.ReportMetric(float64(firstDur.Microseconds())/1000, "first-create-ms")
	t.ReportMetric(float64(create.Microseconds())/1000, "create-p50-ms")
	t.ReportMetric(float64(st.Blocks/2), "image-KiB")
	t.ReportMetric(float64(mount.Microseconds())/1000, "mount-p50-ms")
	t.ReportMetric(float64(unmount.Microseconds())/1000, "unmount-p50-ms")

	// For comparison: formatting each drive with mkfs.ext4 directly.
	direct := measure(7, func(i int) {
		p := filepath.Join(t.TempDir(), "d.img")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(size)
		f.Close()
		if err := mkfs(ctx, p); err != nil {
			t.Fatal(err)
		}
	})
	t.ReportMetric(float64(direct.Microseconds())/1000, "mkfs-p50-ms")
	t.ReportMetric(float64(create)/float64(direct), "create/mkfs")
}
