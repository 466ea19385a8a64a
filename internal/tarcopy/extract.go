package tarcopy

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/errdefs"
)

// ExtractOptions configure Extract.
type ExtractOptions struct {
	// Top, when not "", renames the stream's one tree (see NewChecker).
	Top string
	// MaxBytes bounds what the stream may make, counted before each entry is written:
	// its size plus 512 bytes per entry (0: no bound). An entry over it is refused before
	// anything of it is written, with ErrTooLarge.
	MaxBytes int64
}

// ErrTooLarge is returned (wrapped, with class ErrResourceExhausted) when a stream would
// make more than ExtractOptions.MaxBytes.
var ErrTooLarge = errors.New("the copy is larger than its limit")

// Stats count what Extract made.
type Stats struct {
	Entries int   `json:"entries"`
	Bytes   int64 `json:"bytes"` // regular files' content
}

// entryCost is what one entry counts against MaxBytes besides its content.
const entryCost = 512

// Extract writes the tar stream r under root. Every entry's place is decided by a
// Checker (nothing lands outside root, nothing is written through a symlink the stream
// made) and made through root, so a symlink already in the destination cannot lead
// outside it either. Regular files replace whatever non-directory was at their path;
// directories are created or kept; symlinks are made as links. Modes keep their 0o777
// bits (directories get theirs last, so a read-only directory can still be filled);
// modification times are kept for files and directories. On error, what was made so far
// stays: callers that want all or nothing extract into a fresh directory and rename it.
func Extract(ctx context.Context, root *os.Root, r io.Reader, o ExtractOptions) (Stats, error) {
	var st Stats
	c, err := NewChecker(o.Top)
	if err != nil {
		return st, err
	}
	type dirMeta struct {
		rel   string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirMeta
	var used int64
	if o.MaxBytes > 0 {
		// The stream itself is bounded too: headers the reader consumes without
		// returning an entry (GNU long names, PAX records) must not go on forever.
		r = &capReader{r: r, left: 2*o.MaxBytes + 1<<20}
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return st, fmt.Errorf("reading the tar stream: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		rel, err := c.Check(h)
		if err != nil {
			return st, err
		}
		cost := int64(entryCost)
		if h.Typeflag == tar.TypeReg {
			cost += h.Size
		}
		if o.MaxBytes > 0 && used+cost > o.MaxBytes {
			return st, fmt.Errorf("%s (%d bytes) would bring the copy over %d bytes: %w: %w", rel, h.Size, o.MaxBytes, ErrTooLarge, errdefs.ErrResourceExhausted)
		}
		used += cost
		mode := fs.FileMode(h.Mode) & fs.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if rel != "." {
				if err := mkdirAll(root, rel); err != nil {
					return st, err
				}
			}
			dirs = append(dirs, dirMeta{rel, mode, h.ModTime})
		case tar.TypeReg:
			if err := prepare(root, rel); err != nil {
				return st, err
			}
			n, err := writeFile(root, rel, tr, mode, h.ModTime)
			st.Bytes += n
			if err != nil {
				return st, err
			}
		case tar.TypeSymlink:
			if err := prepare(root, rel); err != nil {
				return st, err
			}
			if err := root.Symlink(h.Linkname, rel); err != nil {
				return st, fmt.Errorf("making symlink %s: %w", rel, err)
			}
		}
		st.Entries++
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		f, err := root.Open(d.rel)
		if err == nil {
			err = setMeta(f, d.mode, d.mtime)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return st, fmt.Errorf("setting the mode of %s: %w", d.rel, err)
		}
	}
	return st, nil
}

// setMeta gives the open file f mode and, when not zero, mtime (also as its access time;
// a failure to set times is ignored). It works on the descriptor (fchmod, futimens): no
// path is looked up again, and gVisor's *at calls with AT_SYMLINK_NOFOLLOW are avoided.
func setMeta(f *os.File, mode fs.FileMode, mtime time.Time) error {
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if !mtime.IsZero() {
		ts := unix.NsecToTimespec(mtime.UnixNano())
		_ = unix.UtimesNanoAt(int(f.Fd()), "", []unix.Timespec{ts, ts}, unix.AT_EMPTY_PATH)
	}
	return nil
}

// mkdirAll makes rel and its parents under root; an existing directory (or a symlink to
// one inside root) is kept.
func mkdirAll(root *os.Root, rel string) error {
	if err := root.MkdirAll(rel, 0o755); err != nil {
		return fmt.Errorf("making directory %s: %w", rel, err)
	}
	return nil
}

// prepare makes rel's parents and removes a non-directory at rel, so that a new file or
// link can take its place; a directory at rel is an error.
func prepare(root *os.Root, rel string) error {
	if dir := path.Dir(rel); dir != "." {
		if err := mkdirAll(root, dir); err != nil {
			return err
		}
	}
	fi, err := root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("checking %s: %w", rel, err)
	case fi.IsDir():
		return fmt.Errorf("%s is a directory in the destination; a file cannot replace it: %w", rel, errdefs.ErrConflict)
	}
	if err := root.Remove(rel); err != nil {
		return fmt.Errorf("replacing %s: %w", rel, err)
	}
	return nil
}

// writeFile creates rel (which must not exist) with the entry's content and mode.
func writeFile(root *os.Root, rel string, r io.Reader, mode fs.FileMode, mtime time.Time) (int64, error) {
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("creating %s: %w", rel, err)
	}
	n, err := io.Copy(f, r)
	if err == nil {
		err = setMeta(f, mode, mtime)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("writing %s: %w", rel, err)
	}
	return n, nil
}

// capReader fails with ErrTooLarge once more than left bytes were read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("the tar stream is longer than twice the limit: %w: %w", ErrTooLarge, errdefs.ErrResourceExhausted)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
