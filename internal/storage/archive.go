package storage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
)

// ArchiveDir is where drive archives go, under the data directory.
const ArchiveDir = "archives"

// ArchivePath is where ArchiveDrive writes sandbox id's archive.
func (s *Store) ArchivePath(id string) string {
	return filepath.Join(s.dir, ArchiveDir, id+".tar.zst")
}

// ArchiveDrive writes the content of stopped sandbox id's drive to
// <data>/archives/<id>.tar.zst and returns that path: every file of the drive (the upper
// directory of each overlay part, "root/upper/…" for "/", and the work directories) with
// its mode, owner (host ids), times and, for directories, overlayfs's opaque mark; whiteouts
// (character devices 0:0) as they are. The drive is mounted read-only, nodev, nosuid and
// noexec at a directory of its own under the archives directory, and read without
// following any link in it; it is unmounted after. The archive is written to a temporary
// file and renamed into place when complete, so a crash leaves either the whole archive or
// none (an older one of the same id is replaced). A drive that is mounted (its sandbox
// runs) gives ErrConflict, a missing one ErrNotFound.
func (s *Store) ArchiveDrive(ctx context.Context, id string) (path string, err error) {
	if err := validSandboxID(id); err != nil {
		return "", err
	}
	if _, err := s.drives.Lstat(id + ".img"); err != nil {
		return "", fmt.Errorf("drive of sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	unlock, err := s.locks.lock(ctx, "mount/"+id)
	if err != nil {
		return "", err
	}
	defer unlock()
	if dev, err := linux.LoopDeviceOf(s.drivePath(id)); err == nil && dev != "" && mountedDevice(dev) {
		return "", fmt.Errorf("drive of sandbox %s is in use (%s is mounted): stop the sandbox first: %w", id, dev, errdefs.ErrConflict)
	}
	dir := filepath.Join(s.dir, ArchiveDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	mnt := filepath.Join(dir, ".mnt-"+id)
	// Leftovers of an interrupted archive.
	if err := linux.UnmountAll(mnt); err != nil {
		return "", err
	}
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return "", err
	}
	defer func() {
		if uerr := linux.UnmountAll(mnt); uerr != nil && err == nil {
			err = uerr
		}
		_ = os.Remove(mnt)
	}()
	if err := s.loops.MountImage(s.drivePath(id), mnt, "ext4",
		syscall.MS_RDONLY|syscall.MS_NODEV|syscall.MS_NOSUID|syscall.MS_NOEXEC|syscall.MS_NOATIME, ""); err != nil {
		return "", fmt.Errorf("mounting drive of sandbox %s read-only: %w", id, err)
	}
	what := "an archive of sandbox " + id + "'s drive"
	if err := s.roomForLayer(what); err != nil {
		return "", err
	}
	final := s.ArchivePath(id)
	tmp := filepath.Join(dir, ".tmp-"+id+"-"+randHex(4))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// The archive may not take the reserve either: it is looked at again as it grows.
	rw := &roomWriter{w: f, room: func() error { return s.roomForLayer(what) }}
	if err := writeTarZst(ctx, rw, mnt); err != nil {
		return "", fmt.Errorf("archiving drive of sandbox %s: %w", id, err)
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return final, nil
}

// roomCheckEvery is how many bytes a roomWriter writes between two looks at the space.
const roomCheckEvery = 16 << 20

// roomWriter writes to w and calls room after each roomCheckEvery bytes, failing the write
// with its error: an archive stops before it eats into the data filesystem's reserve.
type roomWriter struct {
	w       io.Writer
	room    func() error
	written int64
}

func (rw *roomWriter) Write(p []byte) (int, error) {
	if rw.written/roomCheckEvery != (rw.written+int64(len(p)))/roomCheckEvery {
		if err := rw.room(); err != nil {
			return 0, err
		}
	}
	n, err := rw.w.Write(p)
	rw.written += int64(n)
	return n, err
}

// mountedDevice says whether block device dev is mounted anywhere (mountinfo's source).
func mountedDevice(dev string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return true // assume the worst
	}
	for _, line := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(line, " - "); ok {
			if f := strings.Fields(rest); len(f) >= 2 && f[1] == dev {
				return true
			}
		}
	}
	return false
}

// writeTarZst writes the tree at dir (mounted read-only: nothing changes under it) to w
// as a zstd-compressed tar. Entries are read through an os.Root of dir, by names walked
// without following links: a symlink is archived as a symlink.
func writeTarZst(ctx context.Context, w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	zw, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == "." || name == "lost+found" {
			if d.IsDir() && name == "lost+found" {
				return fs.SkipDir
			}
			return nil
		}
		return addEntry(tw, root, dir, name)
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	return err
}

// addEntry writes one entry of root (at host path dir) to tw.
func addEntry(tw *tar.Writer, root *os.Root, dir, name string) error {
	fi, err := root.Lstat(name)
	if err != nil {
		return err
	}
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = root.Readlink(name); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
		var buf [8]byte
		// The directory was reached through the walk, with no link on the way; the
		// filesystem is read-only, so the name still is that directory.
		if n, err := unix.Lgetxattr(filepath.Join(dir, name), "trusted.overlay.opaque", buf[:]); err == nil && n > 0 {
			hdr.PAXRecords = map[string]string{"SCHILY.xattr.trusted.overlay.opaque": string(buf[:n])}
			hdr.Format = tar.FormatPAX
		}
	}
	hdr.Uname, hdr.Gname = "", ""
	hdr.ModTime = fi.ModTime().Truncate(time.Second)
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if n, err := io.Copy(tw, io.LimitReader(f, fi.Size())); err != nil {
		return err
	} else if n != fi.Size() {
		return fmt.Errorf("%s: read %d of %d bytes: %w", name, n, fi.Size(), errors.ErrUnsupported)
	}
	return nil
}

// ArchivedDrive is one archive of ArchiveDir.
type ArchivedDrive struct {
	ID    string    `json:"id"`
	Path  string    `json:"path"`
	Bytes int64     `json:"bytes"`
	Time  time.Time `json:"time"`
}

// Archives lists the drive archives, oldest first.
func (s *Store) Archives() ([]ArchivedDrive, error) {
	dir := filepath.Join(s.dir, ArchiveDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ArchivedDrive
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".tar.zst")
		if !ok || strings.HasPrefix(id, ".") || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, ArchivedDrive{ID: id, Path: filepath.Join(dir, e.Name()), Bytes: fi.Size(), Time: fi.ModTime().UTC()})
	}
	return out, nil
}

// DeleteArchive removes sandbox id's drive archive (ErrNotFound when there is none).
func (s *Store) DeleteArchive(id string) error {
	if err := validSandboxID(id); err != nil {
		return err
	}
	err := os.Remove(s.ArchivePath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no drive archive of sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return err
}

// ExpireArchives removes the drive archives written before cutoff and returns them.
func (s *Store) ExpireArchives(cutoff time.Time) ([]ArchivedDrive, error) {
	list, err := s.Archives()
	if err != nil {
		return nil, err
	}
	var gone []ArchivedDrive
	var errs []error
	for _, x := range list {
		if !x.Time.Before(cutoff) {
			continue
		}
		if err := os.Remove(x.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		gone = append(gone, x)
	}
	return gone, errors.Join(errs...)
}

// CleanupArchives removes what an archive interrupted by a crash left in the archives
// directory: the read-only mount of a drive (.mnt-<id>, unmounted, so that the drive can
// be mounted again when its sandbox starts) and partial archives (.tmp-*). Complete
// archives stay. For daemon start, before any sandbox starts.
func (s *Store) CleanupArchives() error {
	dir := filepath.Join(s.dir, ArchiveDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".mnt-"):
			if err := linux.UnmountAll(p); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		case strings.HasPrefix(e.Name(), ".tmp-") && e.Type().IsRegular():
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
