package linux

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// RunAs calls fn with the filesystem credentials of cred: the kernel checks
// every file access fn makes against cred's uid, gid and groups, and files
// and directories fn creates are owned by cred. It works by changing the
// fsuid, fsgid and groups of one locked OS thread, which the Go runtime
// never lends to other goroutines, and restoring them afterwards; a thread
// whose credentials cannot be restored is discarded.
//
// fn must do its file system calls on its own goroutine (no new goroutines
// for the work). When this process is not root, or cred is root, fn runs
// unchanged.
func RunAs(cred Cred, fn func() error) error {
	if os.Geteuid() != 0 || cred.UID == 0 {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		clean := false
		defer func() {
			if clean {
				runtime.UnlockOSThread()
			}
			// Otherwise the goroutine exits locked and the runtime ends the
			// thread with it.
		}()
		oldGroups, err := unix.Getgroups()
		if err != nil {
			clean = true
			errc <- fmt.Errorf("reading groups: %w", err)
			return
		}
		groups := make([]int, len(cred.Groups))
		for i, g := range cred.Groups {
			groups[i] = int(g)
		}
		if err := unix.Setgroups(groups); err != nil {
			clean = true
			errc <- fmt.Errorf("switching groups: %w", err)
			return
		}
		oldGID, _ := unix.SetfsgidRetGid(int(cred.GID))
		oldUID, _ := unix.SetfsuidRetUid(int(cred.UID))
		// setfsuid reports no error; reading the value back is the check.
		uid, _ := unix.SetfsuidRetUid(-1)
		gid, _ := unix.SetfsgidRetGid(-1)
		if uid == int(cred.UID) && gid == int(cred.GID) {
			errc <- fn()
			_, _ = unix.SetfsuidRetUid(oldUID)
			_, _ = unix.SetfsgidRetGid(oldGID)
			uid, _ = unix.SetfsuidRetUid(-1)
			gid, _ = unix.SetfsgidRetGid(-1)
			clean = uid == oldUID && gid == oldGID && unix.Setgroups(oldGroups) == nil
			return
		}
		// gVisor does not implement setfsuid: switch this thread's effective ids instead
		// (raw syscalls act on one thread only). The real and saved ids stay 0, so the
		// thread can switch back; its effective capabilities are cleared meanwhile, so the
		// kernel checks fn's accesses as cred.
		if err := setresid(unix.SYS_SETRESGID, -1, int(cred.GID)); err != nil {
			clean = unix.Setgroups(oldGroups) == nil
			errc <- fmt.Errorf("switching to gid %d: %w", cred.GID, err)
			return
		}
		if err := setresid(unix.SYS_SETRESUID, -1, int(cred.UID)); err != nil {
			errc <- fmt.Errorf("switching to uid %d: %w", cred.UID, err)
			return // thread discarded
		}
		errc <- fn()
		clean = setresid(unix.SYS_SETRESUID, -1, 0) == nil &&
			setresid(unix.SYS_SETRESGID, -1, 0) == nil &&
			unix.Setgroups(oldGroups) == nil &&
			unix.Geteuid() == 0 && unix.Getegid() == 0
	}()
	return <-errc
}

// setresid sets the effective id of the calling thread only (real and saved stay).
func setresid(trap uintptr, real, eff int) error {
	if _, _, errno := unix.RawSyscall(trap, uintptr(real), uintptr(eff), ^uintptr(0)); errno != 0 {
		return errno
	}
	return nil
}
