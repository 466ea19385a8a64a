package gitignore

import (
	"io"
	"os"
	"path"
	"strings"
	"syscall"
)

// MaxFileBytes bounds what is read of one .gitignore file.
const MaxFileBytes = 1 << 20

// Matcher answers whether paths of one tree are ignored, reading each directory's
// .gitignore once, when first needed. Paths are "/"-separated and relative to the tree's
// top ("a/b"); the top is ".". Not safe for concurrent use.
type Matcher struct {
	read func(dir string) []byte // dir/.gitignore's content, nil if none
	pats map[string][]Pattern
	dirs map[string]bool // directories decided: ignored or not
}

// NewMatcher makes a matcher whose .gitignore files come from read (called with "." for
// the top, "a/b" for deeper directories).
func NewMatcher(read func(dir string) []byte) *Matcher {
	return &Matcher{read: read, pats: map[string][]Pattern{}, dirs: map[string]bool{}}
}

// Ignored reports whether p (a directory when dir) is ignored: below an ignored directory,
// or the deciding pattern of the deepest .gitignore that has a matching one ignores it.
// A path that is not clean and relative ("/a", "a/../b", "a/") is never ignored.
func (m *Matcher) Ignored(p string, dir bool) bool {
	if p == "" || p == "." || p[0] == '/' || path.Clean(p) != p || strings.HasPrefix(p, "../") || p == ".." {
		return false
	}
	if dir {
		if v, ok := m.dirs[p]; ok {
			return v
		}
	}
	parent := path.Dir(p)
	ign := false
	if parent != "." && m.Ignored(parent, true) {
		ign = true
	} else {
		for d := parent; ; d = path.Dir(d) {
			rel := p
			if d != "." {
				rel = strings.TrimPrefix(p, d+"/")
			}
			if v, matched := Decide(m.patterns(d), rel, dir); matched {
				ign = v
				break
			}
			if d == "." {
				break
			}
		}
	}
	if dir {
		m.dirs[p] = ign
	}
	return ign
}

func (m *Matcher) patterns(dir string) []Pattern {
	if p, ok := m.pats[dir]; ok {
		return p
	}
	var p []Pattern
	if b := m.read(dir); len(b) > 0 {
		p = Parse(b)
	}
	m.pats[dir] = p
	return p
}

// RootReader reads dir/.gitignore inside root: a regular file only (a link is not
// followed, as git does not follow a symbolic .gitignore), at most MaxFileBytes of it.
// Anything unreadable counts as no file.
func RootReader(root *os.Root) func(dir string) []byte {
	return func(dir string) []byte {
		f, err := root.OpenFile(path.Join(dir, ".gitignore"), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes))
		if err != nil {
			return nil
		}
		return b
	}
}
