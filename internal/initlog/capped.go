package initlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/tokenbucket"
)

// capped writes to a log file through a byte-rate limit and a size cap with one
// rotation. Not safe for concurrent use (one Log's reader calls it).
type capped struct {
	path string
	lim  Limits
	f    *os.File
	size int64 // of f

	bucket  *tokenbucket.Bucket // bytes that may be written now
	dropped int64               // bytes dropped since the last note
	midLine bool                // the last byte written was not a newline
}

func newCapped(path string, lim Limits) (*capped, error) {
	if lim.MaxBytes <= 0 || lim.Rate <= 0 || lim.Burst <= 0 {
		return nil, fmt.Errorf("init log limits %+v: every one must be positive", lim)
	}
	c := &capped{path: path, lim: lim, bucket: tokenbucket.New(float64(lim.Rate), float64(lim.Burst))}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("opening init log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening init log: %w", err)
	}
	c.f, c.size = f, fi.Size()
	return c, nil
}

// resumeBytes is how much the bucket must hold again before output flows after a drop:
// a flood then gets one note per resumeBytes, not one per read.
const resumeBytes = 4096

// write logs what the rate allows of p at now and drops the rest. After a drop, output
// resumes once the bucket holds resumeBytes (or the whole burst, if smaller), with a line
// saying how much was dropped; that line is paid for from the bucket too.
func (c *capped) write(p []byte, now time.Time) error {
	c.bucket.Refill(now)
	if c.dropped > 0 {
		if c.bucket.Tokens() < float64(min(resumeBytes, c.lim.Burst)) {
			c.dropped += int64(len(p))
			return nil
		}
		n, err := c.note(c.dropped)
		c.bucket.Take(float64(n))
		c.dropped = 0
		if err != nil {
			return err
		}
	}
	k := min(len(p), int(max(c.bucket.Tokens(), 0)))
	c.bucket.Take(float64(k))
	c.dropped += int64(len(p) - k)
	if k == 0 {
		return nil
	}
	return c.append(p[:k])
}

// note writes a line saying n bytes were dropped, and returns its length.
func (c *capped) note(n int64) (int, error) {
	msg := fmt.Sprintf("[moat: %d bytes of output dropped: more than %d bytes/s]\n", n, c.lim.Rate)
	if c.midLine {
		msg = "\n" + msg
	}
	return len(msg), c.append([]byte(msg))
}

// append writes p to the file, rotating it whenever it would grow past MaxBytes.
func (c *capped) append(p []byte) error {
	for len(p) > 0 {
		room := c.lim.MaxBytes - c.size
		if room <= 0 {
			if err := c.rotate(); err != nil {
				return err
			}
			continue
		}
		chunk := p[:min(int64(len(p)), room)]
		n, err := c.f.Write(chunk)
		c.size += int64(n)
		if n > 0 {
			c.midLine = chunk[n-1] != '\n'
		}
		if err != nil {
			return fmt.Errorf("writing init log: %w", err)
		}
		p = p[n:]
	}
	return nil
}

// rotate moves the file to path.1 (replacing the previous one) and starts a new one.
// A failed rotation leaves the file closed and full; the next write tries again.
func (c *capped) rotate() error {
	if err := c.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("rotating init log: %w", err)
	}
	if err := os.Rename(c.path, c.path+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rotating init log: %w", err)
	}
	f, err := os.OpenFile(c.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return fmt.Errorf("rotating init log: %w", err)
	}
	c.f, c.size = f, 0
	return nil
}

// close notes what was dropped last and closes the file.
func (c *capped) close() {
	if c.dropped > 0 {
		_, _ = c.note(c.dropped)
		c.dropped = 0
	}
	c.f.Close()
}

// Remove deletes the log at path and its rotated part. Missing files are no error.
func Remove(path string) error {
	var errs []error
	for _, p := range []string{path, path + ".1"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
