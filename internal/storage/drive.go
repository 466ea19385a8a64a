package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
)

// Drive sizes: the 64 MiB minimum keeps room for ext4's metadata and a useful upper; the
// maximum is what one file can be on the usual host filesystems (ext4: 16 TiB).
const (
	MinDriveBytes = 64 << 20
	MaxDriveBytes = 16<<40 - 1<<20
)

// mkfsArgs format a drive. Inode tables are zeroed at mkfs time (on a sparse file that is a
// hole punch, so free) rather than lazily by the kernel after each mount; the journal is not
// zeroed (a fresh journal needs no zeroes). No blocks are reserved for root: the whole size
// is the sandbox's.
func mkfsArgs() []string {
	return []string{"-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=1,nodiscard"}
}

// maxDriveTemplates bounds the formatted images kept for reuse (one per distinct size).
const maxDriveTemplates = 4

// CreateDrive makes drives/<id>.img: a file of sizeBytes formatted ext4. The ext4 size is
// the sandbox's disk limit: writes inside fail with ENOSPC once it is full. Unless the
// store's DiskPolicy overcommits, every block of the file is allocated before it is used
// (fallocate), so the data filesystem can always hold what the sandbox may write; a drive
// that does not fit next to the other drives and the reserve gives ErrResourceExhausted
// (capacity.go) and nothing is made. Formatting is done once per distinct size; later
// drives of that size are sparse copies of that image (a few milliseconds), then
// allocated. Sizes outside [MinDriveBytes, MaxDriveBytes] give ErrInvalidArgument, an
// existing drive ErrAlreadyExists. On error no drive file remains.
func (s *Store) CreateDrive(ctx context.Context, id string, sizeBytes int64) error {
	if err := validSandboxID(id); err != nil {
		return err
	}
	if sizeBytes < MinDriveBytes || sizeBytes > MaxDriveBytes {
		return fmt.Errorf("drive size %d bytes: must be between 64 MiB and 16 TiB: %w", sizeBytes, errdefs.ErrInvalidArgument)
	}
	sizeBytes &^= 4095 // whole ext4 blocks
	final := id + ".img"
	if _, err := s.drives.Lstat(final); err == nil {
		return fmt.Errorf("drive of sandbox %s: %w", id, errdefs.ErrAlreadyExists)
	}
	tmp := tmpPrefix + id + "-" + randHex(4) + ".img"
	s.mark(tmp)
	defer s.unmark(tmp)
	ok := false
	defer func() {
		if !ok {
			_ = s.drives.Remove(tmp)
		}
	}()
	// Creates tmp, the size promised; its refusal is written for the client as it is.
	if err := s.admit(tmp, sizeBytes); err != nil {
		return err
	}
	tpl, err := s.driveTemplate(ctx, sizeBytes)
	if err != nil {
		return err
	}
	if err := s.copySparse(tpl, tmp, sizeBytes, !s.policy.Overcommit); err != nil {
		return fmt.Errorf("creating drive of sandbox %s: %w", id, err)
	}
	// Link, not rename: it fails if a concurrent CreateDrive of the same id won.
	if err := s.drives.Link(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("drive of sandbox %s: %w", id, errdefs.ErrAlreadyExists)
		}
		return err
	}
	ok = true
	_ = s.drives.Remove(tmp)
	return nil
}

// driveTemplate returns the name (in drives/) of a formatted image of exactly size bytes,
// formatting it if missing.
func (s *Store) driveTemplate(ctx context.Context, size int64) (string, error) {
	name := ".format-" + strconv.FormatInt(size, 10) + ".img"
	unlock, err := s.locks.lock(ctx, "drive-format")
	if err != nil {
		return "", err
	}
	defer unlock()
	if fi, err := s.drives.Lstat(name); err == nil && fi.Mode().IsRegular() && fi.Size() == size {
		now := time.Now()
		_ = s.drives.Chtimes(name, now, now) // most recently used
		return name, nil
	}
	s.pruneDriveTemplates()
	tmp := tmpPrefix + "format-" + randHex(4) + ".img"
	s.mark(tmp)
	defer s.unmark(tmp)
	f, err := s.drives.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = mkfs(ctx, s.drivePathRaw(tmp), s.driveBlockArgs()...)
	}
	if err == nil {
		err = s.drives.Rename(tmp, name)
	}
	if err != nil {
		_ = s.drives.Remove(tmp)
		return "", fmt.Errorf("formatting a %d-byte drive: %w", size, err)
	}
	return name, nil
}

// pruneDriveTemplates keeps the most recently used formatted images.
func (s *Store) pruneDriveTemplates() {
	entries, err := fs.ReadDir(s.drives.FS(), ".")
	if err != nil {
		return
	}
	type tpl struct {
		name string
		used time.Time
	}
	var tpls []tpl
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".format-") {
			if fi, err := e.Info(); err == nil {
				tpls = append(tpls, tpl{e.Name(), fi.ModTime()})
			}
		}
	}
	for len(tpls) >= maxDriveTemplates {
		oldest := 0
		for i, t := range tpls {
			if t.used.Before(tpls[oldest].used) {
				oldest = i
			}
		}
		_ = s.drives.Remove(tpls[oldest].name)
		tpls = append(tpls[:oldest], tpls[oldest+1:]...)
	}
}

func (s *Store) drivePathRaw(name string) string { return s.dir + "/drives/" + name }

func mkfs(ctx context.Context, path string, extra ...string) error {
	args := append(append(append([]string(nil), mkfsArgs()...), extra...), path)
	cmd := exec.CommandContext(ctx, "mkfs.ext4", args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("mkfs.ext4 not found (apt-get install e2fsprogs): %w", errdefs.ErrUnavailable)
		}
		return fmt.Errorf("mkfs.ext4: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// copySparse copies drives/src into drives/dst (empty, made by admit) of size bytes, copying only the data
// extents (SEEK_DATA/SEEK_HOLE) so holes stay holes; with allocate, the holes are then
// allocated (linux.Allocate) so the copy's every block is the drive's own.
func (s *Store) copySparse(src, dst string, size int64, allocate bool) error {
	in, err := s.drives.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := s.drives.OpenFile(dst, os.O_WRONLY, 0) // made by admit
	if err != nil {
		return err
	}
	// No fsync: a drive lost to a crash moments after its creation held nothing, and the
	// first journal commit after mounting flushes the image anyway (loop passes flushes on).
	err = copyExtents(in, out, size)
	if err == nil && allocate {
		err = allocateDrive(out, size, s.dir)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// allocateDrive allocates the whole drive file f of size bytes on the data filesystem dir.
func allocateDrive(f *os.File, size int64, dir string) error {
	err := linux.Allocate(f, size)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOSPC):
		// Space taken since the admission by something other than drives (layers, logs).
		return fmt.Errorf("data filesystem %s cannot hold %s more: %w", dir, sizeText(size), errdefs.ErrResourceExhausted)
	case errors.Is(err, syscall.EOPNOTSUPP):
		return fmt.Errorf("data filesystem %s cannot allocate drives ahead (fallocate: %v); use a filesystem that can (ext4, xfs) or run the daemon with --disk-overcommit: %w",
			dir, err, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("allocating %s for the drive: %w", sizeText(size), err)
}

const (
	seekData = 3 // SEEK_DATA
	seekHole = 4 // SEEK_HOLE
)

func copyExtents(in, out *os.File, size int64) error {
	if err := out.Truncate(size); err != nil {
		return err
	}
	for off := int64(0); off < size; {
		data, err := in.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return err
		}
		hole, err := in.Seek(data, seekHole)
		if err != nil {
			return err
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		// *os.File.ReadFrom uses copy_file_range for a LimitedReader of a file.
		if _, err := out.ReadFrom(io.LimitReader(in, hole-data)); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// DeleteDrive removes the drive of sandbox id. Idempotent. If the drive is still mounted
// its space is released when the last mount goes.
func (s *Store) DeleteDrive(ctx context.Context, id string) error {
	if err := validSandboxID(id); err != nil {
		return err
	}
	if err := s.drives.Remove(id + ".img"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting drive of sandbox %s: %w", id, err)
	}
	return nil
}
