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
	"sort"
	"syscall"

	"github.com/moatdev/moat/internal/errdefs"
)

// Skipped is told of each file WriteTree leaves out (a device, FIFO or socket) and what
// it is ("a FIFO").
type Skipped func(rel, what string)

// WriteTree writes the file or directory at src to tw as one tree named name (the first
// component of every entry). A symlink at src itself is followed; below it, symlinks are
// written as links and never followed, and devices, FIFOs and sockets are left out
// (skipped is told; it may be nil). src that is neither a directory nor a regular file
// (after following) is refused with ErrInvalidArgument, saying what it is. Regular files
// are opened without blocking and checked on the open file, so nothing swapped in after
// a check can block or slip a device through; a file that shrinks while it is read is
// padded with zeros to its announced size, one that grows is cut there. tw is not
// closed: the caller ends the stream.
func WriteTree(ctx context.Context, tw *tar.Writer, src, name string, skipped Skipped) error {
	if skipped == nil {
		skipped = func(string, string) {}
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode().IsRegular():
		f, fi, err := OpenRegular(nil, src)
		if err != nil {
			return err
		}
		defer f.Close()
		return writeRegular(tw, name, fi, f)
	case fi.IsDir():
		root, err := os.OpenRoot(src)
		if err != nil {
			return err
		}
		defer root.Close()
		return writeDir(ctx, tw, root, ".", name, skipped)
	}
	return fmt.Errorf("%s is %s: only directories, regular files and symlinks are copied: %w", src, Describe(fi.Mode()), errdefs.ErrInvalidArgument)
}

// WriteFiles writes the entries rels (slash-separated paths relative to root, as named
// there; parents are not written) to tw, each as itself: a directory as one entry without
// its content, a regular file, or a symlink as a link. A path that does not exist is
// skipped as "missing"; devices, FIFOs and sockets too.
func WriteFiles(ctx context.Context, tw *tar.Writer, root *os.Root, rels []string, skipped Skipped) error {
	for _, rel := range rels {
		if err := ctx.Err(); err != nil {
			return err
		}
		clean, err := cleanName(rel)
		if err != nil || clean == "." {
			return fmt.Errorf("path %q: want a local path: %w", rel, errdefs.ErrInvalidArgument)
		}
		fi, err := root.Lstat(clean)
		if errors.Is(err, fs.ErrNotExist) {
			if skipped != nil {
				skipped(clean, "missing")
			}
			continue
		}
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if err := tw.WriteHeader(header(clean+"/", fi, tar.TypeDir)); err != nil {
				return err
			}
			continue
		}
		if err := writeEntry(tw, root, clean, clean, fi, skipped); err != nil {
			return err
		}
	}
	return nil
}

// writeDir writes the directory rel of root, and everything below it, as name.
func writeDir(ctx context.Context, tw *tar.Writer, root *os.Root, rel, name string, skipped Skipped) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := root.Open(rel)
	if err != nil {
		return err
	}
	fi, err := d.Stat()
	if err != nil {
		d.Close()
		return err
	}
	if !fi.IsDir() {
		d.Close()
		return fmt.Errorf("%s changed while it was read: %w", rel, errdefs.ErrConflict)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	sort.Strings(names)
	if err := tw.WriteHeader(header(name+"/", fi, tar.TypeDir)); err != nil {
		return err
	}
	for _, n := range names {
		crel, cname := path.Join(rel, n), name+"/"+n
		cfi, err := root.Lstat(crel)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while we read
		}
		if err != nil {
			return err
		}
		if cfi.IsDir() {
			if err := writeDir(ctx, tw, root, crel, cname, skipped); err != nil {
				return err
			}
			continue
		}
		if err := writeEntry(tw, root, crel, cname, cfi, skipped); err != nil {
			return err
		}
	}
	return nil
}

// writeEntry writes the non-directory rel of root (fi from Lstat) as name.
func writeEntry(tw *tar.Writer, root *os.Root, rel, name string, fi fs.FileInfo, skipped Skipped) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := root.Readlink(rel)
		if err != nil {
			return err
		}
		h := header(name, fi, tar.TypeSymlink)
		h.Linkname = target
		return tw.WriteHeader(h)
	case fi.Mode().IsRegular():
		f, ffi, err := OpenRegular(root, rel)
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			skipped(name, "no longer a regular file")
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		return writeRegular(tw, name, ffi, f)
	default:
		skipped(name, Describe(fi.Mode()))
		return nil
	}
}

// writeRegular writes the regular file f (fi from its fstat) as name.
func writeRegular(tw *tar.Writer, name string, fi fs.FileInfo, f *os.File) error {
	h := header(name, fi, tar.TypeReg)
	h.Size = fi.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, h.Size))
	if err != nil {
		return fmt.Errorf("reading %s: %w", name, err)
	}
	if n < h.Size { // shrank while read: keep the stream well-formed
		if _, err := io.CopyN(tw, zeros{}, h.Size-n); err != nil {
			return err
		}
	}
	return nil
}

func header(name string, fi fs.FileInfo, typ byte) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     int64(fi.Mode().Perm()),
		ModTime:  fi.ModTime(),
		Format:   tar.FormatPAX,
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// OpenRegular opens rel (under root, or as a path when root is nil), following symlinks,
// for reading, and returns it with its metadata when it is a regular file; anything else
// is ErrInvalidArgument saying what it is. The check is on the opened file (fstat), so a
// path swapped after a check cannot slip a device through; O_NONBLOCK keeps a FIFO from
// blocking the open and O_NOCTTY keeps a terminal from becoming the caller's controlling
// terminal.
func OpenRegular(root *os.Root, rel string) (*os.File, fs.FileInfo, error) {
	const flags = os.O_RDONLY | syscall.O_NONBLOCK | syscall.O_NOCTTY
	var f *os.File
	var err error
	if root != nil {
		f, err = root.OpenFile(rel, flags, 0)
	} else {
		f, err = os.OpenFile(rel, flags, 0)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s: only regular files can be read: %w", rel, Describe(fi.Mode()), errdefs.ErrInvalidArgument)
	}
	return f, fi, nil
}

// Describe says what kind of file mode m is, for messages: "a directory", "a FIFO"...
func Describe(m fs.FileMode) string {
	switch t := m.Type(); {
	case m.IsRegular():
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symlink"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case t&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}
