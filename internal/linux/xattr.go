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
