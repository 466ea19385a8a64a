package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
)

// entryPath turns a tar entry name into a clean relative path inside the extraction root
// ("." for the root itself). It refuses absolute names, any ".." component, NUL bytes and
// empty names with ErrInvalidArgument. A leading "./" is accepted.
func entryPath(name string) (string, error) {
	if name == "" || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("tar entry name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("tar entry %q has an absolute name: %w", name, errdefs.ErrInvalidArgument)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", fmt.Errorf("tar entry %q leaves the root: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	p := path.Clean(name)
	if p != "." && !fs.ValidPath(p) {
		return "", fmt.Errorf("tar entry name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	return p, nil
}

// extractStats counts what extractTar did.
type extractStats struct {
	Files, Dirs, Symlinks, Hardlinks int
	Skipped                          int // device nodes, FIFOs, sockets, dangling hard links
	Bytes                            int64
}

// extractor unpacks one tar stream into a directory it owns exclusively.
type extractor struct {
	root *os.Root
	// dirs are paths verified (or made) to be real directories, not symlinks.
	dirs map[string]bool
	// seen are directories whose header was applied; later duplicates (lower layers in a
	// flattened image) do not override the first (topmost) one.
	seen   map[string]bool
	stats  extractStats
	budget int64 // bytes of file content still allowed
}

// maxImageBytes bounds what one extraction may write (file contents as the tar declares
// them, holes included): a few bytes of sparse-file tar can otherwise claim terabytes.
const maxImageBytes = 64 << 30

// extractOptions tune extractTar.
type extractOptions struct {
	// MaxBytes bounds the total size of the regular files; 0 means maxImageBytes.
	MaxBytes int64
	// Progress, when set, is called about once a second.
	Progress func(extractStats)
}

// extractTar unpacks the tar stream r into root, which must be a directory only the caller
// writes to. It keeps ownership, permission bits (set-id included) and the xattrs
// security.capability and user.*; it skips device nodes, FIFOs and sockets; runs of zeroes
// in files become holes. It refuses (ErrInvalidArgument, stopping) entries with absolute
// names or ".." components, hard links whose target is outside, any entry that would be
// written through a symbolic link (a parent component must be a real directory), and
// content beyond opts.MaxBytes. Nothing is ever created outside root.
func extractTar(ctx context.Context, r io.Reader, root *os.Root, opts extractOptions) (extractStats, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = maxImageBytes
	}
	x := &extractor{root: root, dirs: map[string]bool{".": true}, seen: map[string]bool{}, budget: opts.MaxBytes}
	tr := tar.NewReader(r)
	last := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return x.stats, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return x.stats, nil
		}
		if err != nil {
			return x.stats, fmt.Errorf("reading tar: %w", err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return x.stats, err
		}
		if opts.Progress != nil && time.Since(last) > time.Second {
			opts.Progress(x.stats)
			last = time.Now()
		}
	}
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	rel, err := entryPath(hdr.Name)
	if err != nil {
		return err
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid > 1<<31 || hdr.Gid > 1<<31 {
		return fmt.Errorf("tar entry %q: bad owner %d:%d: %w", hdr.Name, hdr.Uid, hdr.Gid, errdefs.ErrInvalidArgument)
	}
	if rel == "." {
		if hdr.Typeflag == tar.TypeDir && !x.seen["."] {
			x.seen["."] = true
			return x.meta(".", hdr)
		}
		return nil
	}
	if hdr.Typeflag == tar.TypeGNUSparse {
		hdr.Typeflag = tar.TypeReg // the reader expands old GNU sparse files
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default: // devices, FIFOs, and anything unknown
		x.stats.Skipped++
		return nil
	}
	if err := x.parents(path.Dir(rel), true); err != nil {
		return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		fi, err := x.root.Lstat(rel)
		switch {
		case err == nil && fi.IsDir():
			if x.seen[rel] {
				return nil
			}
		case err == nil:
			if err := x.remove(rel); err != nil {
				return err
			}
			fallthrough
		default:
			if err := x.root.Mkdir(rel, 0o700); err != nil {
				return err
			}
			x.stats.Dirs++
		}
		x.dirs[rel] = true
		x.seen[rel] = true
		return x.meta(rel, hdr)

	case tar.TypeReg:
		if err := x.remove(rel); err != nil {
			return err
		}
		if hdr.Size > x.budget {
			return fmt.Errorf("tar entry %q: content beyond the %d-byte limit: %w", hdr.Name, maxOr(x.budget), errdefs.ErrInvalidArgument)
		}
		f, err := x.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		n, err := copySparse(f, io.LimitReader(r, x.budget+1))
		x.stats.Bytes += n
		x.budget -= n
		if err == nil && x.budget < 0 {
			err = fmt.Errorf("content beyond the size limit: %w", errdefs.ErrInvalidArgument)
		}
		if err == nil {
			err = f.Chown(hdr.Uid, hdr.Gid)
		}
		if err == nil {
			err = f.Chmod(fileMode(hdr.Mode))
		}
		if err == nil {
			x.xattrs(f, hdr)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w", rel, err)
		}
		x.stats.Files++
		if !hdr.ModTime.IsZero() {
			_ = x.root.Chtimes(rel, hdr.ModTime, hdr.ModTime)
		}
		return nil

	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.ContainsRune(hdr.Linkname, 0) {
			return fmt.Errorf("tar entry %q: bad symlink target: %w", hdr.Name, errdefs.ErrInvalidArgument)
		}
		if err := x.remove(rel); err != nil {
			return err
		}
		// The target is not checked: it is only ever resolved inside the sandbox's root.
		if err := x.root.Symlink(hdr.Linkname, rel); err != nil {
			return err
		}
		x.stats.Symlinks++
		return x.root.Lchown(rel, hdr.Uid, hdr.Gid)

	default: // tar.TypeLink
		target, err := entryPath(hdr.Linkname)
		if err != nil || target == "." {
			return fmt.Errorf("tar entry %q: hard link to %q: %w", hdr.Name, hdr.Linkname, errdefs.ErrInvalidArgument)
		}
		if target == rel {
			return nil
		}
		if err := x.parents(path.Dir(target), false); err != nil {
			return fmt.Errorf("tar entry %q: hard link to %q: %w", hdr.Name, hdr.Linkname, err)
		}
		fi, err := x.root.Lstat(target)
		if errors.Is(err, fs.ErrNotExist) {
			// Its target was removed by an upper layer's whiteout: nothing to link.
			x.stats.Skipped++
			return nil
		}
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("tar entry %q: hard link to directory %q: %w", hdr.Name, hdr.Linkname, errdefs.ErrInvalidArgument)
		}
		if err := x.remove(rel); err != nil {
			return err
		}
		if err := x.root.Link(target, rel); err != nil {
			return err
		}
		x.stats.Hardlinks++
		return nil
	}
}

// parents makes sure every component of dir is a real directory (not a symlink), creating
// missing ones (0755, root) when create is set.
func (x *extractor) parents(dir string, create bool) error {
	if x.dirs[dir] {
		return nil
	}
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		if cur == "" {
			cur = c
		} else {
			cur += "/" + c
		}
		if x.dirs[cur] {
			continue
		}
		fi, err := x.root.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := x.root.Mkdir(cur, 0o755); err != nil {
				return err
			}
			x.stats.Dirs++
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("path component %q is a symbolic link: %w", cur, errdefs.ErrInvalidArgument)
		case !fi.IsDir():
			return fmt.Errorf("path component %q is not a directory: %w", cur, errdefs.ErrInvalidArgument)
		}
		x.dirs[cur] = true
	}
	return nil
}

// remove deletes whatever is at rel (last entry wins, as with tar), forgetting directories
// verified below it.
func (x *extractor) remove(rel string) error {
	fi, err := x.root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		for d := range x.dirs {
			if d == rel || strings.HasPrefix(d, rel+"/") {
				delete(x.dirs, d)
				delete(x.seen, d)
			}
		}
		return x.root.RemoveAll(rel)
	}
	return x.root.Remove(rel)
}

// meta applies a directory header's owner, mode and xattrs.
func (x *extractor) meta(rel string, hdr *tar.Header) error {
	f, err := x.root.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s changed under extraction", rel)
	}
	if err := f.Chown(hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := f.Chmod(fileMode(hdr.Mode)); err != nil {
		return err
	}
	x.xattrs(f, hdr)
	return nil
}

// xattrs sets the file capability and user.* attributes of hdr on f. Failures (e.g. a
// filesystem without user xattrs) only lose the attribute.
func (x *extractor) xattrs(f *os.File, hdr *tar.Header) {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !(name == "security.capability" || strings.HasPrefix(name, "user.")) {
			continue
		}
		_ = linux.SetXattr(f, name, []byte(v))
	}
}

func maxOr(budget int64) int64 { return max(budget, 0) }

// copySparse copies r to the new, empty file f, leaving holes where whole 64 KiB chunks are
// zero, and returns the number of bytes (holes included).
func copySparse(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, 64<<10)
	var off int64
	hole := false
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if isZero(buf[:n]) {
				hole = true
			} else {
				if _, werr := f.WriteAt(buf[:n], off); werr != nil {
					return off, werr
				}
				hole = false
			}
			off += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return off, err
		}
	}
	if hole {
		if err := f.Truncate(off); err != nil {
			return off, err
		}
	}
	return off, nil
}

var zeroChunk = make([]byte, 64<<10)

func isZero(b []byte) bool { return bytes.Equal(b, zeroChunk[:len(b)]) }

// fileMode converts tar mode bits to an os.FileMode with set-id and sticky bits.
func fileMode(m int64) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}
