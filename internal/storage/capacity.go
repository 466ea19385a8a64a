package storage

import (
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
)

// DiskPolicy says how the data filesystem's space is handed out to drives.
//
// By default (Overcommit false) a drive's whole size is allocated on the data filesystem
// when it is created (fallocate), so the sum of the drives' sizes can never exceed what the
// filesystem holds: a sandbox that fills its drive gets ENOSPC inside its own ext4 and no
// other sandbox, nor the daemon's database, is touched. A create that does not fit is
// refused with errdefs.ErrResourceExhausted before anything is made.
//
// With Overcommit, drives stay sparse (they take only what their sandbox wrote) and a
// create is refused only when the filesystem's free space is under Reserve. Then the sizes
// are promises the filesystem may not keep: once it is full, every sandbox that writes to a
// part of its drive not yet allocated gets I/O errors (see docs/internals.md, "Drives and
// the data filesystem's space").
type DiskPolicy struct {
	Overcommit bool
	// Reserve is the space kept free for the daemon's database, logs, layers and templates:
	// no drive is admitted into it. Zero: DefaultReserve of the filesystem's size.
	Reserve int64
	// PerDrive is what each sandbox may write to the data filesystem outside its drive (its
	// capped init log), counted against the space with each drive.
	PerDrive int64
}

// DefaultReserve is the reserve kept on a data filesystem of fsSize bytes: 2 % of it, at
// least 256 MiB and at most 4 GiB (SQLite and the logs need room to write and to shrink,
// not a share of a large disk).
func DefaultReserve(fsSize int64) int64 {
	return min(max(256<<20, fsSize/50), 4<<30)
}

// driveAsk is one admission question: may a new drive of Size bytes be made now?
type driveAsk struct {
	FS   string // the data filesystem, for the message
	Size int64  // the new drive's size
	// Free is what the filesystem can still allocate (statfs f_bavail).
	Free int64
	// Promised is space already promised but not yet allocated: the unallocated parts of
	// existing drives, drives being created, and each sandbox's share outside its drive.
	Promised int64
	Policy   DiskPolicy // Reserve already resolved
}

// admitDrive decides whether a new drive fits on the data filesystem. It returns nil, or
// an ErrResourceExhausted error that tells the client what is free, what the drive needs
// and what stays reserved. Pure: callers serialize the decision with the allocation.
func admitDrive(a driveAsk) error {
	p := a.Policy
	if p.Overcommit {
		if a.Free >= p.Reserve {
			return nil
		}
		return fmt.Errorf("data filesystem %s has %s free, less than the %s kept for the daemon's database and logs "+
			"(drives are overcommitted: they take space as sandboxes write): delete sandboxes or enlarge the filesystem: %w",
			a.FS, sizeText(a.Free), sizeText(p.Reserve), errdefs.ErrResourceExhausted)
	}
	need := a.Size + p.PerDrive
	left := a.Free - a.Promised
	if left-need >= p.Reserve {
		return nil
	}
	promised := ""
	if a.Promised > 0 {
		promised = fmt.Sprintf(" (%s of it promised to other sandboxes)", sizeText(a.Promised))
	}
	return fmt.Errorf("data filesystem %s has %s free%s, a %s drive needs %s and %s stays reserved for the daemon's database and logs: "+
		"delete sandboxes, ask for a smaller disk, or enlarge the filesystem: %w",
		a.FS, sizeText(a.Free), promised, sizeText(a.Size), sizeText(need), sizeText(p.Reserve), errdefs.ErrResourceExhausted)
}

// admitLayer decides whether a layer build (what: a template build, import or pull, a
// repository layer) may start: only while what the filesystem has free beyond the drives'
// promises is above the reserve. A layer's size is not known before it is built, so a
// running build can still take part of the reserve; it cannot start inside it. Pure.
func admitLayer(what string, a driveAsk) error {
	p := a.Policy
	left := a.Free
	if !p.Overcommit {
		left -= a.Promised
	}
	if left > p.Reserve {
		return nil
	}
	promised := ""
	if !p.Overcommit && a.Promised > 0 {
		promised = fmt.Sprintf(" (%s of it promised to sandboxes' drives)", sizeText(a.Promised))
	}
	return fmt.Errorf("data filesystem %s has %s free%s and %s stays reserved for the daemon's database and logs: no room to build %s; "+
		"delete sandboxes or templates, or enlarge the filesystem: %w",
		a.FS, sizeText(a.Free), promised, sizeText(p.Reserve), what, errdefs.ErrResourceExhausted)
}

// roomForLayer measures the data filesystem and asks admitLayer whether the layer build
// what may start.
func (s *Store) roomForLayer(what string) error {
	ask, err := s.space()
	if err != nil {
		return err
	}
	return admitLayer(what, ask)
}

// space measures the data filesystem for an admission: what it has free, what the drives
// have been promised (none counted when overcommitting) and the policy with its reserve.
func (s *Store) space() (driveAsk, error) {
	fsSize, free, err := linux.FSSpace(s.drivePathRaw(""))
	if err != nil {
		return driveAsk{}, fmt.Errorf("measuring the data filesystem: %w", err)
	}
	p := s.policy
	p.Reserve = s.reserve(fsSize)
	ask := driveAsk{FS: s.dir, Free: free, Policy: p}
	if !p.Overcommit {
		ask.Promised = s.unallocated(p.PerDrive)
	}
	return ask, nil
}

// Space is what the data filesystem holds for drives now (moat doctor).
type Space struct {
	FS         string `json:"fs"`
	Free       int64  `json:"free_bytes"`     // what the filesystem can still allocate
	Promised   int64  `json:"promised_bytes"` // promised to drives but not yet allocated
	Reserve    int64  `json:"reserve_bytes"`  // kept for the database, logs and layers
	Overcommit bool   `json:"overcommit"`
}

// Space measures the data filesystem as drive admission sees it.
func (s *Store) Space() (Space, error) {
	ask, err := s.space()
	if err != nil {
		return Space{}, err
	}
	return Space{FS: ask.FS, Free: ask.Free, Promised: ask.Promised, Reserve: ask.Policy.Reserve, Overcommit: ask.Policy.Overcommit}, nil
}

// DrivesThatFit is how many more drives of size bytes (each with perSandbox bytes of logs
// beside it) the space admits; -1 when it admits any number (overcommit above the reserve).
func (sp Space) DrivesThatFit(size, perSandbox int64) int64 {
	left := sp.Free - sp.Promised - sp.Reserve
	if sp.Overcommit {
		if sp.Free > sp.Reserve {
			return -1
		}
		return 0
	}
	if left <= 0 || size+perSandbox <= 0 {
		return 0
	}
	return left / (size + perSandbox)
}

// SizeText prints n bytes for people: "1.5 GiB", "300 MiB".
func SizeText(n int64) string { return sizeText(n) }

// sizeText prints n bytes for people: "1.5 GiB", "300 MiB", "12 KiB", "17 bytes".
func sizeText(n int64) string {
	const unit = 1024
	if n < 0 {
		return "-" + sizeText(-n)
	}
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[exp]
}

// admit checks that a drive of size bytes fits (admitDrive) and, if so, creates drives/tmp
// as a sparse file of that size: the promise. The drives directory is the ledger — what
// every drive image (also one being made, by any moat process on this data directory)
// still lacks of its size counts as promised — and the check and the creation of tmp are
// one step under an exclusive lock of that directory, so concurrent creates, also of
// several processes, never both take the same free space. The caller removes tmp on
// failure.
func (s *Store) admit(tmp string, size int64) error {
	unlock, err := linux.LockExclusive(s.drivePathRaw(""))
	if err != nil {
		return fmt.Errorf("locking the drives directory: %w", err)
	}
	defer unlock()
	ask, err := s.space()
	if err != nil {
		return err
	}
	ask.Size = size
	if err := admitDrive(ask); err != nil {
		return err
	}
	f, err := s.drives.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// unallocated sums what drive images may still take from the filesystem: the part of each
// that is not allocated (a drive being made; drives of an overcommitting daemon or of an
// older moat are sparse) plus perDrive for each. Formatted images (.format-*, being
// formatted: .tmp-format-*) are sources of copies, not promises.
func (s *Store) unallocated(perDrive int64) int64 {
	entries, err := fs.ReadDir(s.drives.FS(), ".")
	if err != nil {
		return 0
	}
	var sum int64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".img") || strings.HasPrefix(name, ".format-") || strings.HasPrefix(name, tmpPrefix+"format-") {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if alloc := linux.AllocatedBytes(fi); alloc >= 0 && alloc < fi.Size() {
			sum += fi.Size() - alloc
		}
		// Blocks shared with a snapshot (or a drive cloned from one) need new blocks when
		// this drive writes there (snapshot.go).
		if f, err := s.drives.Open(name); err == nil {
			sum += sharedBytes(f)
			f.Close()
		}
		sum += perDrive
	}
	return sum
}

// driveMountData is the ext4 mount data of drives. A reserved drive is mounted without
// discard: freeing blocks inside it must not punch holes into its file, or the space it
// was promised would go back to the data filesystem. (The sandbox cannot trim either:
// FITRIM needs CAP_SYS_ADMIN of the host, and it sees the drive only through overlayfs or
// gVisor.) An overcommitted drive is mounted with discard, so deleted files give their
// space back. Either way a failed write of the drive's own metadata turns it read-only
// (errors=remount-ro) instead of writing on over a damaged journal.
func (s *Store) driveMountData() string {
	if s.policy.Overcommit {
		return "discard,errors=remount-ro"
	}
	return "errors=remount-ro"
}

// allocateSparse allocates the rest of drive id (fi: its Lstat) when the store reserves
// drives and it is sparse: a drive made by an older moat, or while the daemon overcommitted,
// then holds its space like a new one. Only when that leaves the reserve free; otherwise the
// drive stays sparse (its holes stay counted as promised by admit) and a warning is logged.
// Under the drives directory's lock (admit), so an admission never sees the space both free
// and promised.
func (s *Store) allocateSparse(id string, fi fs.FileInfo) {
	if s.policy.Overcommit || !fi.Mode().IsRegular() {
		return
	}
	alloc := linux.AllocatedBytes(fi)
	if alloc < 0 || alloc >= fi.Size() {
		return
	}
	unlock, err := linux.LockExclusive(s.drivePathRaw(""))
	if err != nil {
		s.log.Warn("drive stays sparse: locking the drives directory", "sandbox", id, "err", err)
		return
	}
	defer unlock()
	fsSize, free, err := linux.FSSpace(s.drivePathRaw(""))
	if err == nil {
		if reserve := s.reserve(fsSize); free-(fi.Size()-alloc) < reserve {
			err = fmt.Errorf("%s free, %s missing, %s reserved", sizeText(free), sizeText(fi.Size()-alloc), sizeText(reserve))
		}
	}
	if err == nil {
		var f *os.File
		if f, err = s.drives.OpenFile(id+".img", os.O_WRONLY, 0); err == nil {
			err = linux.Allocate(f, fi.Size())
			f.Close()
		}
	}
	if err != nil {
		s.log.Warn("drive stays partly sparse: the data filesystem cannot hold all of it", "sandbox", id, "size", fi.Size(), "err", err)
	}
}

// reserve is the space no drive may take on a data filesystem of fsSize bytes.
func (s *Store) reserve(fsSize int64) int64 {
	if s.policy.Reserve > 0 {
		return s.policy.Reserve
	}
	return DefaultReserve(fsSize)
}
