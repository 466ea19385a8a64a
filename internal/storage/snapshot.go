package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

// Snapshots of drives (docs/internals.md, "Snapshots and forks").
//
// A snapshot is drives/snap-<id>.snap, a clone (FICLONE: a reflink, no data copied) of a
// sandbox's drive image taken while the drive's ext4 is frozen (FIFREEZE), and its record
// drives/snap-<id>.json. The record is written last: a snapshot exists once its record
// does; an image without one is a leftover of an interrupted snapshot, removed by
// Cleanup. A drive made from a snapshot is again a clone. Clones share blocks, so the
// admission (capacity.go) counts what a writable drive shares with any other file as
// promised: its writes there need new blocks.
//
// When the drives directory cannot clone (an ext4 data directory without the XFS pool),
// snapshots copy the image's data extents instead (Method "copy"): correct, but the cost
// grows with the workspace; `moat doctor` says so.

// Snapshot methods.
const (
	MethodReflink = "reflink"
	MethodCopy    = "copy"
)

var snapshotIDRE = regexp.MustCompile(`^snap-[a-z0-9]{1,40}$`)

func validSnapshotID(id string) error {
	if !snapshotIDRE.MatchString(id) {
		return fmt.Errorf("snapshot id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Linux ioctls not in x/sys/unix.
const (
	fiFreeze    = 0xC0045877 // FIFREEZE: _IOWR('X', 119, int)
	fiThaw      = 0xC0045878 // FITHAW
	fsIocFiemap = 0xC020660B // FS_IOC_FIEMAP
)

// CanReflink reports whether the drives directory clones files without copying them.
func (s *Store) CanReflink() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reflink != nil {
		return *s.reflink
	}
	ok := probeReflink(s.drivePathRaw(""))
	s.reflink = &ok
	return ok
}

func probeReflink(dir string) bool {
	a, err := os.CreateTemp(dir, tmpPrefix+"probe-")
	if err != nil {
		return false
	}
	defer os.Remove(a.Name())
	defer a.Close()
	_, _ = a.Write(make([]byte, 4096))
	b, err := os.CreateTemp(dir, tmpPrefix+"probe-")
	if err != nil {
		return false
	}
	defer os.Remove(b.Name())
	defer b.Close()
	return unix.IoctlFileClone(int(b.Fd()), int(a.Fd())) == nil
}

// driveMount is where sandbox id's drive is mounted while it runs.
func (s *Store) driveMount(id string) string {
	return filepath.Join(s.runDir, "sandboxes", id, "drive")
}

// cloneDrive makes drives/dst a copy of drives/src: a reflink when the directory can,
// otherwise a copy of the data extents (allocated in full unless overcommitting).
func (s *Store) cloneDrive(src, dst string) (string, error) {
	in, err := s.drives.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := s.drives.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	method := MethodReflink
	err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
		method = MethodCopy
		var fi os.FileInfo
		if fi, err = in.Stat(); err == nil {
			err = copyExtents(in, out, fi.Size())
			if err == nil && !s.policy.Overcommit {
				err = allocateDrive(out, fi.Size(), s.dir)
			}
		}
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return method, err
}

// frozen runs fn with sandbox id's mounted drive frozen (FIFREEZE: its ext4 writes out
// everything and blocks new writes), so an image clone taken in fn is consistent. A drive
// that is not mounted is stable as it is. The drive is thawed however fn ends; a daemon
// killed in between leaves it frozen until ThawAll at the next start.
func (s *Store) frozen(id string, fn func() error) error {
	dir := s.driveMount(id)
	if s.runDir == "" || !linux.IsMountPoint(dir) {
		return fn()
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0); err != nil {
		return fmt.Errorf("freezing the drive of sandbox %s: %w", id, err)
	}
	defer func() { _ = unix.IoctlSetInt(int(f.Fd()), fiThaw, 0) }()
	return fn()
}

// ThawAll thaws every mounted drive of the run directory: after a daemon was killed while
// it held one frozen for a snapshot. Drives that are not frozen are left as they are.
func (s *Store) ThawAll() {
	if s.runDir == "" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(s.runDir, "sandboxes", "*", "drive"))
	for _, d := range dirs {
		if !linux.IsMountPoint(d) {
			continue
		}
		if f, err := os.Open(d); err == nil {
			if unix.IoctlSetInt(int(f.Fd()), fiThaw, 0) == nil {
				s.log.Warn("thawed a drive left frozen by an interrupted snapshot", "drive", d)
			}
			f.Close()
		}
	}
}

// SnapshotRecord is what storage keeps of a snapshot: the sandbox package's record as
// JSON, besides the image.
type snapFile struct {
	Record json.RawMessage `json:"record"`
	Method string          `json:"method"`
	Size   int64           `json:"size"`
	IDBase uint32          `json:"id_base"` // host uid of root of the files in the image
}

// SnapshotDrive clones sandbox id's drive into snapshot snap (record: the caller's record,
// stored with it). idBase is the host uid the drive's files of the sandbox's root have
// (its range's start; 0 for runsc). It returns how the image was made (MethodReflink or
// MethodCopy). The new snapshot's shared blocks are admitted as a drive of the drive's
// size (the sandbox may overwrite all of them); ErrResourceExhausted when that does not
// fit. Nothing remains on error.
func (s *Store) SnapshotDrive(ctx context.Context, id, snap string, idBase uint32, record any) (string, error) {
	if err := validSandboxID(id); err != nil {
		return "", err
	}
	if err := validSnapshotID(snap); err != nil {
		return "", err
	}
	fi, err := s.drives.Lstat(id + ".img")
	if err != nil {
		return "", fmt.Errorf("drive of sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return s.makeSnapshot(snap, fi.Size(), idBase, record, func(tmp string) (string, error) {
		var method string
		err := s.frozen(id, func() error {
			var err error
			method, err = s.cloneDrive(id+".img", tmp)
			s.at("snapshot-frozen")
			return err
		})
		return method, err
	})
}

// SetHook sets the failpoint hook, called at named points of snapshot operations (tests;
// nil: none). Call it before the store is used.
func (s *Store) SetHook(h func(point string)) { s.hook = h }

func (s *Store) at(point string) {
	if s.hook != nil {
		s.hook(point)
	}
}

func (s *Store) makeSnapshot(snap string, size int64, idBase uint32, record any, clone func(tmp string) (string, error)) (string, error) {
	img, meta := snap+".snap", snap+".json"
	if _, err := s.drives.Lstat(meta); err == nil {
		return "", fmt.Errorf("snapshot %s: %w", snap, errdefs.ErrAlreadyExists)
	}
	tmp := tmpPrefix + snap + "-" + randHex(4) + ".img"
	s.mark(tmp)
	defer s.unmark(tmp)
	ok := false
	defer func() {
		if !ok {
			_ = s.drives.Remove(tmp)
			_ = s.drives.Remove(img)
		}
	}()
	// The promise: the clone's blocks, shared with the drive, may all be overwritten.
	if err := s.admit(tmp, size); err != nil {
		return "", err
	}
	if !s.CanReflink() {
		// The copy below allocates what admit promised.
		_ = s.drives.Remove(tmp)
	}
	method, err := clone(tmp)
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", snap, err)
	}
	s.at("snapshot-image")
	data, err := json.Marshal(record)
	if err != nil {
		return "", err
	}
	sf, err := json.Marshal(snapFile{Record: data, Method: method, Size: size, IDBase: idBase})
	if err != nil {
		return "", err
	}
	if err := s.drives.Rename(tmp, img); err != nil {
		return "", err
	}
	if err := s.writeAtomic(meta, sf); err != nil {
		return "", err
	}
	ok = true
	return method, nil
}

func (s *Store) writeAtomic(name string, data []byte) error {
	tmp := tmpPrefix + name + "-" + randHex(4)
	f, err := s.drives.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.drives.Rename(tmp, name)
	}
	if err != nil {
		_ = s.drives.Remove(tmp)
	}
	return err
}

// Snapshots lists the snapshots whose records exist, oldest first (by record time).
func (s *Store) Snapshots() ([]sandbox.StoredSnapshot, error) {
	entries, err := fs.ReadDir(s.drives.FS(), ".")
	if err != nil {
		return nil, err
	}
	type withTime struct {
		sandbox.StoredSnapshot
		t time.Time
	}
	var out []withTime
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, "snap-") || !strings.HasSuffix(n, ".json") {
			continue
		}
		sn, err := s.snapshot(strings.TrimSuffix(n, ".json"))
		if err != nil {
			s.log.Warn("unreadable snapshot record", "file", n, "err", err)
			continue
		}
		fi, _ := e.Info()
		var t time.Time
		if fi != nil {
			t = fi.ModTime()
		}
		out = append(out, withTime{sn, t})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].t.Before(out[j].t) })
	res := make([]sandbox.StoredSnapshot, len(out))
	for i := range out {
		res[i] = out[i].StoredSnapshot
	}
	return res, nil
}

// Snapshot returns snapshot id (ErrNotFound if it has no record).
func (s *Store) Snapshot(id string) (sandbox.StoredSnapshot, error) {
	if err := validSnapshotID(id); err != nil {
		return sandbox.StoredSnapshot{}, err
	}
	return s.snapshot(id)
}

func (s *Store) snapshot(id string) (sandbox.StoredSnapshot, error) {
	data, err := fs.ReadFile(s.drives.FS(), id+".json")
	if errors.Is(err, fs.ErrNotExist) {
		return sandbox.StoredSnapshot{}, fmt.Errorf("snapshot %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return sandbox.StoredSnapshot{}, err
	}
	var sf snapFile
	if err := json.Unmarshal(data, &sf); err != nil {
		return sandbox.StoredSnapshot{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return sandbox.StoredSnapshot{ID: id, Record: sf.Record, Method: sf.Method, Size: sf.Size, IDBase: sf.IDBase}, nil
}

// DeleteSnapshot removes snapshot id: its record first (it no longer exists), then its
// image. Idempotent.
func (s *Store) DeleteSnapshot(id string) error {
	if err := validSnapshotID(id); err != nil {
		return err
	}
	if err := s.drives.Remove(id + ".json"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := s.drives.Remove(id + ".snap"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// CreateDriveFrom makes sandbox id's drive as a clone of snapshot snap. The clone's blocks
// are shared with the snapshot, so it is admitted as a new drive of the snapshot's size.
// ErrNotFound for an unknown snapshot, ErrAlreadyExists for an existing drive. Nothing
// remains on error. At its first Mount the drive's files are moved into the new
// sandbox's uid range and its machine identity is made new (adoptDrive).
func (s *Store) CreateDriveFrom(ctx context.Context, id, snap string) (string, error) {
	if err := validSandboxID(id); err != nil {
		return "", err
	}
	sn, err := s.Snapshot(snap)
	if err != nil {
		return "", err
	}
	final := id + ".img"
	if _, err := s.drives.Lstat(final); err == nil {
		return "", fmt.Errorf("drive of sandbox %s: %w", id, errdefs.ErrAlreadyExists)
	}
	tmp := tmpPrefix + id + "-" + randHex(4) + ".img"
	s.mark(tmp)
	defer s.unmark(tmp)
	defer func() { _ = s.drives.Remove(tmp) }()
	if err := s.admit(tmp, sn.Size); err != nil {
		return "", err
	}
	method, err := s.cloneDrive(snap+".snap", tmp)
	if err != nil {
		return "", fmt.Errorf("drive of sandbox %s from snapshot %s: %w", id, snap, err)
	}
	if err := s.drives.Link(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("drive of sandbox %s: %w", id, errdefs.ErrAlreadyExists)
		}
		return "", err
	}
	return method, nil
}

// RestoreDrive replaces sandbox id's drive, which must not be mounted, by a clone of
// snapshot snap (the old drive's blocks are freed when nothing else shares them).
func (s *Store) RestoreDrive(ctx context.Context, id, snap string) (string, error) {
	if err := validSandboxID(id); err != nil {
		return "", err
	}
	if s.runDir != "" && linux.IsMountPoint(s.driveMount(id)) {
		return "", fmt.Errorf("drive of sandbox %s is mounted: %w", id, errdefs.ErrConflict)
	}
	sn, err := s.Snapshot(snap)
	if err != nil {
		return "", err
	}
	tmp := tmpPrefix + id + "-" + randHex(4) + ".img"
	s.mark(tmp)
	defer s.unmark(tmp)
	defer func() { _ = s.drives.Remove(tmp) }()
	if err := s.admit(tmp, sn.Size); err != nil {
		return "", err
	}
	method, err := s.cloneDrive(snap+".snap", tmp)
	if err != nil {
		return "", err
	}
	if err := s.drives.Rename(tmp, id+".img"); err != nil {
		return "", err
	}
	return method, nil
}

// Drive identity: the file .moat-drive at the drive's root says which sandbox the drive
// belongs to and which host uid its files of the sandbox's root have. A drive cloned from
// another sandbox's (a snapshot) says another sandbox: at its first Mount its files are
// moved into the new sandbox's uid range and the machine's identity files are renewed.
const driveIdentity = ".moat-drive"

type driveID struct {
	Sandbox string `json:"sandbox"`
	IDBase  uint32 `json:"id_base"`
}

// adoptDrive makes the mounted drive at dir sandbox id's, whose root is host uid rootUID.
// A drive without identity file is the sandbox's own (made empty for it, or by an older
// moat): it gets one. Interrupted, it is redone at the next Mount (the shift moves only ids
// still in the old range, which never overlaps the new one).
func adoptDrive(dir, id string, rootUID uint32) error {
	path := filepath.Join(dir, driveIdentity)
	data, err := os.ReadFile(path)
	var cur driveID
	if err == nil {
		err = json.Unmarshal(data, &cur)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if err == nil && cur.Sandbox != id {
		if cur.IDBase != rootUID {
			if err := shiftIDs(dir, cur.IDBase, rootUID); err != nil {
				return fmt.Errorf("moving the drive's files into the sandbox's uid range: %w", err)
			}
		}
		if err := renewIdentity(filepath.Join(dir, "root", "upper"), rootUID); err != nil {
			return err
		}
	}
	if err == nil && cur.Sandbox == id && cur.IDBase == rootUID {
		return nil
	}
	out, _ := json.Marshal(driveID{Sandbox: id, IDBase: rootUID})
	tmp := path + ".new"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// shiftIDs moves every file's owner and group under dir in [from, from+65536) to the same
// offset from to. Set-id bits, which chown clears, are put back.
func shiftIDs(dir string, from, to uint32) error {
	in := func(v uint32) (uint32, bool) {
		if v >= from && v-from < sandbox.IDRangeSize {
			return to + (v - from), true
		}
		return v, false
	}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		uid, a := in(st.Uid)
		gid, b := in(st.Gid)
		if !a && !b {
			return nil
		}
		if err := os.Lchown(p, int(uid), int(gid)); err != nil {
			return err
		}
		if fi.Mode().IsRegular() && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			return os.Chmod(p, fi.Mode())
		}
		return nil
	})
}

// renewIdentity gives a drive cloned from another sandbox a machine identity of its own:
// a new /etc/machine-id in its root upper, and no random seed of the other machine's.
func renewIdentity(upper string, rootUID uint32) error {
	if _, err := os.Lstat(upper); err != nil {
		return nil // nothing written yet: nothing inherited
	}
	for _, seed := range []string{"var/lib/systemd/random-seed", "var/lib/urandom/random-seed"} {
		_ = os.Remove(filepath.Join(upper, seed))
	}
	etc := filepath.Join(upper, "etc")
	if fi, err := os.Lstat(etc); err != nil || !fi.IsDir() {
		if err := os.Mkdir(etc, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := os.Lchown(etc, int(rootUID), int(rootUID)); err != nil {
			return err
		}
	}
	mid := filepath.Join(etc, "machine-id")
	_ = os.Remove(mid)
	if err := os.WriteFile(mid, []byte(randHex(16)+"\n"), 0o444); err != nil {
		return err
	}
	return os.Lchown(mid, int(rootUID), int(rootUID))
}

// sharedBytes is how much of f's data shares blocks with another file (FIEMAP extents
// flagged shared); 0 where the filesystem cannot tell.
func sharedBytes(f *os.File) int64 {
	const count = 256
	const hdr, ext = 32, 56
	buf := make([]byte, hdr+count*ext)
	var start uint64
	var shared int64
	for {
		clear(buf)
		*(*uint64)(unsafe.Pointer(&buf[0])) = start
		*(*uint64)(unsafe.Pointer(&buf[8])) = ^uint64(0) - start
		*(*uint32)(unsafe.Pointer(&buf[24])) = count
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
			return shared
		}
		n := *(*uint32)(unsafe.Pointer(&buf[20]))
		if n == 0 {
			return shared
		}
		last := false
		for i := range n {
			e := buf[hdr+int(i)*ext:]
			logical := *(*uint64)(unsafe.Pointer(&e[0]))
			length := *(*uint64)(unsafe.Pointer(&e[16]))
			flags := *(*uint32)(unsafe.Pointer(&e[40]))
			if flags&0x2000 != 0 { // FIEMAP_EXTENT_SHARED
				shared += int64(length)
			}
			start = logical + length
			if flags&0x1 != 0 { // FIEMAP_EXTENT_LAST
				last = true
			}
		}
		if last {
			return shared
		}
	}
}

// Drive pool: an XFS filesystem (reflink=1) in the file pool.xfs of the data directory,
// loop-mounted on drives/, so drives can be cloned. Its file is allocated in full on the
// data filesystem; inside it the drives are admitted as on any data filesystem.

// PoolFile is the pool's image in the data directory.
const PoolFile = "pool.xfs"

// OpenPool mounts the drive pool on drives/ (making it of size bytes the first time) and
// reopens the drives directory on it. A pool that exists keeps its size. It refuses when
// drives/ holds drives outside a pool (they would be hidden). The pool stays mounted while
// sandboxes use it; Close unmounts it when nothing does.
func (s *Store) OpenPool(ctx context.Context, size int64) error {
	target := filepath.Join(s.dir, "drives")
	image := filepath.Join(s.dir, PoolFile)
	if !linux.IsMountPoint(target) {
		entries, _ := os.ReadDir(target)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".img") && !strings.HasPrefix(e.Name(), ".") {
				return fmt.Errorf("drives/ holds drives of sandboxes made without the drive pool (%s): delete them first or run without --drive-pool: %w", e.Name(), errdefs.ErrConflict)
			}
		}
		if _, err := os.Stat(image); errors.Is(err, fs.ErrNotExist) {
			if err := makePool(ctx, image, size); err != nil {
				return err
			}
		}
		if err := s.loops.MountImage(image, target, "xfs", syscall.MS_NODEV|syscall.MS_NOSUID|syscall.MS_NOEXEC|syscall.MS_NOATIME, ""); err != nil {
			return fmt.Errorf("mounting the drive pool: %w", err)
		}
		if err := os.Chmod(target, 0o700); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.reflink = nil
	s.pool = true
	s.mu.Unlock()
	r, err := os.OpenRoot(target)
	if err != nil {
		return err
	}
	old := s.drives
	s.drives = r
	old.Close()
	return nil
}

// makePool makes the pool's file, allocated in full, and formats it XFS with reflink.
func makePool(ctx context.Context, image string, size int64) error {
	if size < 512<<20 {
		return fmt.Errorf("drive pool of %s: at least 512 MiB: %w", sizeText(size), errdefs.ErrInvalidArgument)
	}
	mkfsXFS, err := findMkfsXFS()
	if err != nil {
		return err
	}
	tmp := image + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if err == nil {
		err = allocateDrive(f, size, filepath.Dir(image))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		out, cerr := runCmd(ctx, mkfsXFS, "-q", "-K", "-m", "reflink=1", tmp)
		if cerr != nil {
			err = fmt.Errorf("mkfs.xfs: %v: %s", cerr, out)
		}
	}
	if err == nil {
		err = os.Rename(tmp, image)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("making the drive pool: %w", err)
	}
	return nil
}

// findMkfsXFS finds mkfs.xfs, or says which package has it.
func findMkfsXFS() (string, error) {
	for _, p := range []string{"/usr/sbin/mkfs.xfs", "/sbin/mkfs.xfs"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("mkfs.xfs not found: the drive pool (copy-free snapshots and forks) needs it (apt-get install xfsprogs, or `make deps`): %w", errdefs.ErrUnavailable)
}

// HasMkfsXFS reports whether the drive pool can be made on this host (moat doctor).
func HasMkfsXFS() error { _, err := findMkfsXFS(); return err }

// closePool unmounts the drive pool if this store mounted it and nothing uses it.
func (s *Store) closePool() {
	if !s.pool {
		return
	}
	target := filepath.Join(s.dir, "drives")
	if err := unix.Unmount(target, 0); err != nil {
		if !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EINVAL) {
			s.log.Warn("unmounting the drive pool", "err", err)
		}
		return
	}
	// Its loop device detaches itself (autoclear), asynchronously: wait a moment so that
	// whoever closed the store finds it gone.
	image := filepath.Join(s.dir, PoolFile)
	for range 100 {
		if dev, err := linux.LoopDeviceOf(image); err != nil || dev == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanupSnapshots removes snapshot images without a record: leftovers of a snapshot
// interrupted between its image and its record.
func (s *Store) cleanupSnapshots() {
	entries, err := fs.ReadDir(s.drives.FS(), ".")
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "snap-") && strings.HasSuffix(n, ".snap") {
			id := strings.TrimSuffix(n, ".snap")
			if _, err := s.drives.Lstat(id + ".json"); errors.Is(err, fs.ErrNotExist) {
				_ = s.drives.Remove(n)
				s.log.Info("removed the image of an interrupted snapshot", "snapshot", id)
			}
		}
	}
}

func runCmd(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// repoLayerGrace keeps a repository layer made this recently: a create may have built it
// and not yet recorded the sandbox that uses it.
const repoLayerGrace = 10 * time.Minute

// CollectRepoLayers removes the repository layers (repo-*) not in inUse, not made within
// repoLayerGrace and not mounted; it returns those removed. (The sandbox manager keeps its
// own creates from racing the GC; the grace covers another moat process building one.)
func (s *Store) CollectRepoLayers(inUse map[string]bool) ([]string, error) {
	entries, err := fs.ReadDir(s.layers.FS(), ".")
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, "repo-") || inUse[n] {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < repoLayerGrace {
			continue
		}
		ids = append(ids, n)
	}
	s.collectLayers(ids)
	var removed []string
	for _, id := range ids {
		if _, err := s.layers.Lstat(id); errors.Is(err, fs.ErrNotExist) {
			removed = append(removed, id)
		}
	}
	return removed, nil
}

// driveBlockArgs are extra mkfs.ext4 arguments for drives in the pool: 4 KiB blocks. The
// drive's loop device does direct I/O, and XFS wants it aligned to its 4 KiB blocks for
// files that share blocks (reflinks); a small ext4 would otherwise get 1 KiB blocks.
func (s *Store) driveBlockArgs() []string {
	if s.pool {
		return []string{"-b", "4096"}
	}
	return nil
}
