package linux

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SyncFS writes out the whole filesystem that holds path (syncfs(2)): one call instead of an
// fsync per file, for trees that are complete only once durable (such as a layer about to
// be renamed into place).
func SyncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", path, err)
	}
	return nil
}
