package runtime

import (
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// nullNetNS is where runsc (2023 on) pins the empty network namespace of its gofers, a bind
// mount in its --root kept from one container to the next (gVisor's
// specutils.NullNetNSFilename). gVisor's rule: unmount it before removing the root.
const nullNetNS = "null-netns"

// Close releases what the runtime keeps mounted in its state directory: for runsc the pinned
// gofer network namespace (<root>/null-netns; bind mounts may be stacked, so all of them).
// The next runsc command pins it again. Containers are not touched. Idempotent; for runc
// and crun it does nothing.
func (o *OCI) Close() error {
	if o.name != "runsc" {
		return nil
	}
	return unmountStacked(filepath.Join(o.root, nullNetNS))
}

// unmountStacked unmounts every mount stacked on path.
func unmountStacked(path string) error {
	for range 64 {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // not (or no longer) a mount point
		}
		if err != nil {
			return err
		}
	}
	return errors.New(path + ": mounts keep reappearing")
}
