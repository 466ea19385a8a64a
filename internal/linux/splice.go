package linux

import (
	"errors"
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// Pipe is a kernel pipe owned by one caller, for Splice. Unlike the pipes the Go runtime
// splices through (kept in a pool and closed by a finalizer, minutes after their
// connection ended when the heap is quiet), it is closed when its owner says so.
type Pipe struct{ r, w int }

// NewPipe returns a non-blocking, close-on-exec pipe (two descriptors until Close) of the
// kernel's default size (64 KiB, 16 slots): a held connection keeps two of them, so they
// stay small (the Go runtime's pooled pipes are 1 MiB, 256 slots each).
func NewPipe() (*Pipe, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	return &Pipe{r: fds[0], w: fds[1]}, nil
}

// Close closes both ends. Idempotent; not safe for use concurrently with Splice.
func (p *Pipe) Close() error {
	if p.r < 0 {
		return nil
	}
	err := errors.Join(unix.Close(p.r), unix.Close(p.w))
	p.r, p.w = -1, -1
	return err
}

// Splice moves up to max bytes from the socket src to the socket dst through p without
// copying them through user space, like io.CopyN between two *net.TCPConn. It returns the
// bytes delivered to dst; io.EOF when src ended before max bytes; otherwise the error of
// the side that failed (a read deadline of src gives its timeout error; a closed socket
// net.ErrClosed, wrapped). It waits through Go's poller: deadlines and Close of either
// connection end it. p is empty when Splice returns nil or io.EOF; one pipe must not be
// used by two Splice calls at once.
func Splice(dst, src syscall.RawConn, p *Pipe, max int64) (int64, error) {
	const flags = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
	var total int64
	for total < max {
		var n int64
		var serr error
		// The pipe is empty here, so EAGAIN means the socket has nothing to read.
		err := src.Read(func(fd uintptr) bool {
			for {
				n, serr = unix.Splice(int(fd), nil, p.w, nil, int(min(max-total, 1<<20)), flags) // the pipe takes what fits
				if serr != unix.EINTR {
					break
				}
			}
			return serr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return total, err
		case serr != nil:
			return total, serr
		case n == 0:
			return total, io.EOF
		}
		left := int(n)
		err = dst.Write(func(fd uintptr) bool {
			for left > 0 {
				m, werr := unix.Splice(p.r, nil, int(fd), nil, left, flags)
				switch werr {
				case nil:
					left -= int(m)
				case unix.EINTR:
				case unix.EAGAIN:
					return false
				default:
					serr = werr
					return true
				}
			}
			return true
		})
		total += n - int64(left)
		if err == nil {
			err = serr
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ReadReady reads once from the socket src into a buffer from get, like net.Conn.Read, but
// takes the buffer only once src has bytes (or its end, or an error) to give: a caller
// waiting on an idle socket holds no buffer. It waits through Go's poller, so src's read
// deadline applies (a timeout error). It returns the buffer and how much of it was read;
// on io.EOF or an error with nothing read, the buffer is given back (put) and b is nil.
func ReadReady(src syscall.RawConn, get func() []byte, put func([]byte)) (b []byte, n int, err error) {
	var rerr error
	err = src.Read(func(fd uintptr) bool {
		b = get()
		for {
			n, rerr = unix.Read(int(fd), b)
			if rerr != unix.EINTR {
				break
			}
		}
		if rerr == unix.EAGAIN {
			put(b)
			b = nil
			return false
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	if err == nil && n == 0 {
		err = io.EOF
	}
	if n < 0 {
		n = 0
	}
	if n == 0 && b != nil {
		put(b)
		b = nil
	}
	return b, n, err
}
