package linux

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SetXattr sets the extended attribute name of the open file f to value. It acts on the
// file itself, never on a path, so it cannot be redirected by a symlink.
func SetXattr(f *os.File, name string, value []byte) error {
	if err := unix.Fsetxattr(int(f.Fd()), name, value, 0); err != nil {
		return fmt.Errorf("setxattr %s on %s: %w", name, f.Name(), err)
	}
	return nil
}

// Whiteout makes name, in the directory dir, an overlayfs whiteout (a character device
// 0:0): in an overlay's lower layer it hides whatever the layers below have at that path.
// name must be a single path component; dir is an open directory, so nothing is resolved
// by path above it.
func Whiteout(dir *os.File, name string) error {
	if err := unix.Mknodat(int(dir.Fd()), name, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("mknod whiteout %s in %s: %w", name, dir.Name(), err)
	}
	return nil
}
