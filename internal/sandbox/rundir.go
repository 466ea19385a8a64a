package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// A sandbox's run directory (<run>/sandboxes/<id>) holds its root filesystem, drive, layer
// mounts and pinned namespaces. Under runsc the sandbox's files belong to host root there;
// under runc and crun to the sandbox's own host uids, and the root overlay honours set-id
// bits (sudo inside needs it). No host account but root may reach any of it.
//
// runc and crun set up the root filesystem from inside the sandbox's user namespace, as
// the sandbox's root (host uid and gid ids.Host): that identity alone must be able to
// pass through to the root filesystem. So:
//
//	<run>/sandboxes        root:root 0711  every sandbox's root passes through; nobody lists it
//	<run>/sandboxes/<id>   root:<ids.Host> 0710 in a user namespace of its own (its root
//	                       passes through: runc, crun, a current runsc), root:root 0700
//	                       otherwise (runsc 2022-12: the Sentry and gofer are host root)
//
// No host account holds a sandbox's gid (the range is moat's own, clear of host users and
// other sandboxes), and the sandbox's processes never see these host paths.

// sandboxDirAccess returns the group and mode of the run directory of a sandbox whose user
// namespace maps to ids (mapped) or that runs as host root (see above).
func sandboxDirAccess(mapped bool, ids IDRange) (gid int, mode fs.FileMode) {
	if !mapped {
		return 0, 0o700
	}
	return int(ids.Host), 0o710
}

// prepareSandboxDir creates (or repairs) dir, a sandbox's run directory, and its parent with
// the ownership and modes above. It refuses a dir that is not a directory.
func prepareSandboxDir(dir string, mapped bool, ids IDRange) error {
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(parent, 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("sandbox directory %s is not a directory", dir)
	}
	gid, mode := sandboxDirAccess(mapped, ids)
	// Close it first, then hand the group its search permission.
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || int(st.Gid) != gid {
		if err := os.Lchown(dir, 0, gid); err != nil {
			return err
		}
	}
	return os.Chmod(dir, mode)
}
