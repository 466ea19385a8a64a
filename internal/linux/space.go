package linux

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// FSSpace returns the size of the filesystem that holds path and the bytes on it that an
// unprivileged writer can still allocate (statfs f_bavail: the blocks ext4 keeps for root
// are not counted as free).
func FSSpace(path string) (size, avail int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// Allocate makes the filesystem allocate every block of f's first size bytes now
// (fallocate(2), mode 0): holes become unwritten extents, data stays as it is, and later
// writes within size never fail for lack of space on the filesystem. It fails with ENOSPC
// when there is not enough room (what was allocated before the failure may stay allocated),
// and with EOPNOTSUPP on filesystems that cannot preallocate.
func Allocate(f *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		if err != unix.EINTR {
			return err
		}
	}
}

// AllocatedBytes returns the bytes the filesystem has allocated to the file fi describes
// (st_blocks × 512), or -1 if fi does not come from stat(2).
func AllocatedBytes(fi os.FileInfo) int64 {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1
	}
	return st.Blocks * 512
}

// LockExclusive takes an exclusive flock(2) of the file or directory path, waiting for it,
// and returns its release. Each call opens path anew, so it excludes other calls of this
// process as well as other processes.
func LockExclusive(path string) (unlock func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
