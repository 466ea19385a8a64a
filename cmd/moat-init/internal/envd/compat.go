package envd

// E2B envd behaviour that E2B's own tests found moat-init answering differently (issue 13
// item 11): a file written to a new directory gets its missing parents, made for the user
// wherever the path is; an entry's symlinkTarget is an absolute path.

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
)

// makeParents creates dir and its missing ancestors as E2B's envd does: by moat-init (the
// sandbox's root), each new directory then owned by cred's user and group, so a file can be
// written to a new directory wherever the caller names it — the file itself is then written
// as the user, with the user's permissions (an existing file the user may not write stays
// refused). Existing directories are left as they are.
func makeParents(dir string, cred linux.Cred) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return invalidArgument("%s is not a directory", d)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	chown := os.Geteuid() == 0 && cred.UID != 0
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := os.Mkdir(d, dirMode); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue // made meanwhile by someone else: theirs
			}
			return err
		}
		if chown {
			if err := os.Lchown(d, int(cred.UID), int(cred.GID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// symlinkTarget is what E2B reports as a symlink's target: the absolute path it resolves
// to; for a link that resolves to nothing (dangling, a loop), its own target made absolute
// against the link's directory.
func symlinkTarget(path string) (string, bool) {
	if t, err := filepath.EvalSymlinks(path); err == nil {
		if abs, err := filepath.Abs(t); err == nil {
			return abs, true
		}
	}
	t, err := os.Readlink(path)
	if err != nil {
		return "", false
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(filepath.Dir(path), t)
	}
	return filepath.Clean(t), true
}
