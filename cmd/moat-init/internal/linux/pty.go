package linux

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// OpenPTY opens a pseudo-terminal pair sized cols x rows. The master is
// registered with the runtime poller, so a Close or a read deadline
// interrupts a pending Read; the slave is meant for the child and should be
// closed by the caller once the child has started.
func OpenPTY(cols, rows uint16) (master, slave *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("opening pty: %w", err)
	}
	defer m.Close()
	if err := pty.Setsize(s, &pty.Winsize{Cols: cols, Rows: rows}); err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("sizing pty: %w", err)
	}
	// pty.Open used m.Fd(), which made the descriptor blocking for good.
	// A non-blocking duplicate makes os.NewFile register it with the poller.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		s.Close()
		return nil, nil, fmt.Errorf("duplicating pty master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		s.Close()
		return nil, nil, fmt.Errorf("pty master: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), s, nil
}

// SetWinsize resizes the terminal whose master (or slave) is f.
func SetWinsize(f *os.File, cols, rows uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("resizing pty: %w", err)
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows})
	})
	if err == nil {
		err = ioErr
	}
	if err != nil {
		return fmt.Errorf("resizing pty: %w", err)
	}
	return nil
}
