// Package initlog carries the output of a sandbox's init process (moat-init, and the
// runtime's own messages while it starts the container) to a log file on the host,
// without letting the sandbox decide how much the host writes.
//
// moat-init is untrusted once it runs, and root inside a sandbox can write to its stdout
// (/proc/1/fd/1) — under gVisor any user can. So the container's stdout and stderr are
// not the log file but a FIFO in the sandbox's run directory. The daemon reads the FIFO
// and writes to the log through a byte-rate limit (excess is dropped, and counted in the
// log) and a size cap with one rotation (path and path.1, each at most MaxBytes). A FIFO
// outlives the daemon: a restarted daemon opens it again (Attach) and reads on. While no
// daemon reads, writers get EPIPE (moat-init survives it) or block in open.
package initlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound what one sandbox's output costs the host.
type Limits struct {
	// MaxBytes caps each of the log file and its one rotated predecessor (path.1).
	MaxBytes int64
	// Rate is the sustained number of bytes per second written to the log; Burst is how
	// many may be written at once. Output beyond them is dropped.
	Rate, Burst int64
}

// DefaultLimits: at most 8 MiB on disk per sandbox, 64 KiB/s after a 1 MiB burst.
// moat-init's own lines (rate-limited inside) need a fraction of that.
var DefaultLimits = Limits{MaxBytes: 4 << 20, Rate: 64 << 10, Burst: 1 << 20}

// tailBytes is how much of the latest output Tail keeps.
const tailBytes = 4096

// Log reads one sandbox's FIFO into its log file. Its methods are safe for concurrent use.
type Log struct {
	fifo string
	out  *capped
	r    *os.File // read end (non-blocking, so Close interrupts a read)
	log  *slog.Logger

	mu   sync.Mutex
	w    *os.File // the daemon's write end, from Create until Release
	tail []byte   // the last tailBytes read
	done chan struct{}
}

// Create makes the FIFO at fifo (replacing whatever is there), starts reading it into
// path, and returns with a write end (File) to hand to the container. The caller calls
// Release once the container holds its own copy, and Close when it is gone.
func Create(fifo, path string, lim Limits, log *slog.Logger) (*Log, error) {
	if err := os.Remove(fifo); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("replacing %s: %w", fifo, err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return nil, fmt.Errorf("creating %s: %w", fifo, err)
	}
	l, err := open(fifo, path, lim, log)
	if err != nil {
		return nil, err
	}
	// With a reader present, opening the write end does not block. Blocking mode: the
	// container's processes share this file description.
	wfd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		l.r.Close()
		l.out.close()
		return nil, fmt.Errorf("opening %s for writing: %w", fifo, err)
	}
	l.w = os.NewFile(uintptr(wfd), fifo)
	l.start()
	return l, nil
}

// Attach reads on from the FIFO of a running sandbox (after a daemon restart). It fails
// if fifo is not a FIFO. When nothing holds the FIFO's write end any more, the Log ends
// at once.
func Attach(fifo, path string, lim Limits, log *slog.Logger) (*Log, error) {
	fi, err := os.Lstat(fifo)
	if err != nil {
		return nil, fmt.Errorf("attaching to %s: %w", fifo, err)
	}
	if fi.Mode().Type() != fs.ModeNamedPipe {
		return nil, fmt.Errorf("attaching to %s: not a FIFO", fifo)
	}
	l, err := open(fifo, path, lim, log)
	if err != nil {
		return nil, err
	}
	l.start()
	return l, nil
}

func open(fifo, path string, lim Limits, log *slog.Logger) (*Log, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	out, err := newCapped(path, lim)
	if err != nil {
		return nil, err
	}
	rfd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		out.close()
		return nil, fmt.Errorf("opening %s for reading: %w", fifo, err)
	}
	return &Log{fifo: fifo, out: out, r: os.NewFile(uintptr(rfd), fifo), log: log, done: make(chan struct{})}, nil
}

// File is the write end to give the container as stdout and stderr; nil after Release.
func (l *Log) File() *os.File {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w
}

// Release closes the daemon's copy of the write end. Once every other writer (the
// container) is gone too, reading ends. Idempotent.
func (l *Log) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w != nil {
		l.w.Close()
		l.w = nil
	}
}

// Tail releases the write end, waits up to wait for every writer to be gone and
// everything written to be read, and returns the last output read (at most 4 KiB,
// trimmed to whole lines where possible). For error messages of a container that failed
// to start: stop it first.
func (l *Log) Tail(wait time.Duration) string {
	l.Release()
	select {
	case <-l.done:
	case <-time.After(wait):
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.tail)
}

// Ended is closed once reading has ended: every writer is gone (the container's
// processes, moat-init first among them, have all exited) or Close was called.
func (l *Log) Ended() <-chan struct{} { return l.done }

// Close stops reading (what is still in the FIFO stays there for the next reader) and
// closes the log file. Idempotent.
func (l *Log) Close() error {
	l.Release()
	err := l.r.Close()
	<-l.done
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return err
}

func (l *Log) start() {
	go func() {
		defer close(l.done)
		defer l.out.close()
		buf := make([]byte, 64<<10)
		failing := false // one warning per run of failed writes: the sandbox picks the read sizes
		for {
			n, err := l.r.Read(buf)
			if n > 0 {
				l.keepTail(buf[:n])
				werr := l.out.write(buf[:n], time.Now())
				if werr != nil && !failing {
					l.log.Warn("writing init log (further failures not logged until a write succeeds)", "path", l.out.path, "err", werr)
				}
				failing = werr != nil
			}
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
					l.log.Warn("reading init output", "fifo", l.fifo, "err", err)
				}
				return
			}
		}
	}()
}

func (l *Log) keepTail(p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tail = append(l.tail, p...)
	if len(l.tail) > tailBytes {
		l.tail = append(l.tail[:0], l.tail[len(l.tail)-tailBytes:]...)
	}
}
