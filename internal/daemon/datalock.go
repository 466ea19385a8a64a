package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dataLockName is the file under the data directory whose flock says which daemons use
// it: an exclusive daemon (`moat serve`) holds it exclusively, every other daemon (an
// in-process `moat run`, `moat serve --share-data`) shared. The exclusive holder writes
// its pid and socket into it for the others' error messages. (The older "lock" file
// beside it only elects the daemon that reconciles.)
const dataLockName = "daemon.lock"

// lockDataDir takes the data directory's daemon lock without waiting: exclusively when
// exclusive, else shared. It fails, naming the holder where it can, when the directory
// is in use in a way that does not allow it. The returned file holds the lock until
// unlockDataDir.
func lockDataDir(dataDir, socket string, exclusive bool) (*os.File, error) {
	path := filepath.Join(dataDir, dataLockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		holder := lockHolder(f)
		f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if exclusive {
			return nil, fmt.Errorf("data directory %s is in use by another moat daemon (%s): stop it first, or give --share-data to run beside it (both then manage the same sandboxes)", dataDir, holder)
		}
		return nil, fmt.Errorf("data directory %s is in use by a moat daemon that does not share it (%s): use that daemon (--socket), or give this one another --data", dataDir, holder)
	}
	if exclusive {
		// Ours alone now: say who we are (a shared holder never writes).
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(fmt.Sprintf("pid=%d socket=%s\n", os.Getpid(), socket)), 0)
		}
	}
	return f, nil
}

// unlockDataDir releases lockDataDir's lock; an exclusive holder first clears what it
// wrote. Closing f releases the flock.
func unlockDataDir(f *os.File) {
	if f == nil {
		return
	}
	// Whoever can have the lock alone now clears it (a crashed exclusive holder's words
	// included); while others hold it, it is left as it is.
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		_ = f.Truncate(0)
	}
	f.Close()
}

// lockHolder describes who holds the lock: the exclusive holder's pid and socket when it
// wrote them and that process lives, else in-process or shared daemons.
func lockHolder(f *os.File) string {
	b := make([]byte, 512)
	n, _ := f.ReadAt(b, 0)
	var pid int
	var sock string
	for _, field := range strings.Fields(string(b[:n])) {
		k, v, _ := strings.Cut(field, "=")
		switch k {
		case "pid":
			pid, _ = strconv.Atoi(v)
		case "socket":
			sock = v
		}
	}
	if pid > 0 && unix.Kill(pid, 0) == nil {
		return fmt.Sprintf("pid %d, socket %s", pid, sock)
	}
	return "an in-process `moat run` or a `moat serve --share-data`"
}

// clearStaleSocket makes path free for a new listener without ever taking it from a live
// daemon: nothing there is fine; a socket nobody accepts on (the leftover of a daemon
// that died) is removed; a socket something answers on, or a file that is not a socket,
// is an error.
func clearStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket: refusing to replace it", path)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("a daemon already listens on %s: stop it first, or give this one another --socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("checking whether a daemon listens on %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	return nil
}

// sockID identifies a socket file: its inode number alone may be reused at once by the
// next file made in the same directory, its change time with it hardly.
type sockID struct {
	ino   uint64
	ctime syscall.Timespec
}

// inode is path's sockID (zero when it cannot be read).
func inode(path string) sockID {
	st, err := os.Lstat(path)
	if err != nil {
		return sockID{}
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sockID{sys.Ino, sys.Ctim}
	}
	return sockID{}
}

// removeOwnSocket removes the socket at path if it is still the one this daemon made
// (id): a socket another daemon made there since is left alone.
func removeOwnSocket(path string, id sockID) {
	if id != (sockID{}) && inode(path) == id {
		_ = os.Remove(path)
	}
}
