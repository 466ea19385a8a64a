package tarcopy

import (
	"archive/tar"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

type entry struct {
	name string
	typ  byte
	link string
}

func TestCheck(t *testing.T) {
	dir, reg, sym := byte(tar.TypeDir), byte(tar.TypeReg), byte(tar.TypeSymlink)
	for _, tc := range []struct {
		name    string
		top     string
		entries []entry
		want    []string // per entry: the path, or "!" plus a fragment of the error
	}{
		{"plain", "", []entry{{"a/", dir, ""}, {"a/b", reg, ""}, {"./c", reg, ""}, {"a//d/./e", reg, ""}},
			[]string{"a", "a/b", "c", "a/d/e"}},
		{"root dir entry", "", []entry{{"./", dir, ""}, {".", dir, ""}}, []string{".", "."}},
		{"root as a file", "", []entry{{".", reg, ""}}, []string{"!destination itself"}},
		{"dotdot", "", []entry{{"../x", reg, ""}, {"a/../../x", reg, ""}, {"a/..", dir, ""}, {"..", dir, ""}},
			[]string{"!\"..\"", "!\"..\"", "!\"..\"", "!\"..\""}},
		{"dotdot-like names are names", "", []entry{{"..a", reg, ""}, {"a..", reg, ""}, {"...", reg, ""}}, []string{"..a", "a..", "..."}},
		{"absolute", "", []entry{{"/etc/passwd", reg, ""}, {"//x", reg, ""}}, []string{"!absolute", "!absolute"}},
		{"empty and NUL", "", []entry{{"", reg, ""}, {"a\x00b", reg, ""}}, []string{"!empty", "!NUL"}},
		{"overlong", "", []entry{{strings.Repeat("a", 256), reg, ""}, {strings.Repeat("a/", 2049), reg, ""}},
			[]string{"!255", "!4096"}},
		{"types", "", []entry{{"h", tar.TypeLink, "x"}, {"c", tar.TypeChar, ""}, {"b", tar.TypeBlock, ""}, {"f", tar.TypeFifo, ""}, {"old", 0x00, ""}},
			[]string{"!hard link", "!type", "!type", "!type", "old"}},
		{"symlink then write through it", "", []entry{{"l", sym, "/etc"}, {"l/passwd", reg, ""}, {"l/x/y", dir, ""}},
			[]string{"l", "!symlink made earlier", "!symlink made earlier"}},
		{"symlink then write through it, spelled differently", "", []entry{{"d/l", sym, "../../.."}, {"./d//l/./x", reg, ""}},
			[]string{"d/l", "!symlink made earlier"}},
		{"symlink replaced by a directory", "", []entry{{"l", sym, "/"}, {"l/", dir, ""}}, []string{"l", "!twice"}},
		{"directory replaced by a symlink", "", []entry{{"d/", dir, ""}, {"d", sym, "/"}, {"d/x", reg, ""}}, []string{"d", "!twice", "d/x"}},
		{"file twice", "", []entry{{"f", reg, ""}, {"f", reg, ""}}, []string{"f", "!twice"}},
		{"directory twice is fine", "", []entry{{"d/", dir, ""}, {"d", dir, ""}}, []string{"d", "d"}},
		{"symlink target is not followed nor judged", "", []entry{{"l", sym, "../../../etc/shadow"}, {"m", sym, "/abs"}}, []string{"l", "m"}},
		{"symlink without target", "", []entry{{"l", sym, ""}}, []string{"!empty"}},
		{"top renames the tree", "dst", []entry{{"src/", dir, ""}, {"src/a", reg, ""}, {"src/l", sym, "/"}, {"src/l/x", reg, ""}},
			[]string{"dst", "dst/a", "dst/l", "!symlink made earlier"}},
		{"top: a single file", "new", []entry{{"file", reg, ""}}, []string{"new"}},
		{"top: a second tree is refused", "dst", []entry{{"src/a", reg, ""}, {"other/b", reg, ""}, {"./src/c", reg, ""}},
			[]string{"dst/a", "!outside the tree", "dst/c"}},
		{"top: dot is refused", "dst", []entry{{"./", dir, ""}}, []string{"!names no tree"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChecker(tc.top)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range tc.entries {
				got, err := c.Check(&tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link})
				want := tc.want[i]
				if frag, bad := strings.CutPrefix(want, "!"); bad {
					if err == nil || !strings.Contains(err.Error(), frag) || !errors.Is(err, errdefs.ErrInvalidArgument) {
						t.Errorf("%q: got %q, %v; want an invalid-argument error with %q", e.name, got, err, frag)
					}
					continue
				}
				if err != nil || got != want {
					t.Errorf("%q: got %q, %v; want %q", e.name, got, err, want)
				}
			}
		})
	}
}

func TestNewCheckerTop(t *testing.T) {
	for _, top := range []string{"a/b", "..", ".", "/x", "a\x00"} {
		if _, err := NewChecker(top); err == nil {
			t.Errorf("NewChecker(%q) accepted", top)
		}
	}
}

// FuzzCheck: whatever the names and types of a stream, every path Check accepts is local
// (no "..", not absolute) and never passes through a symlink accepted before it.
func FuzzCheck(f *testing.F) {
	f.Add("a/\x00l\x00l/x\x00../y\x00/abs", "dLr", "")
	f.Add("src/\x00src/l\x00src/l/x", "dLr", "dst")
	f.Add("./\x00.//a/./b\x00a", "drL", "")
	f.Fuzz(func(t *testing.T, names, types, top string) {
		c, err := NewChecker(top)
		if err != nil {
			return
		}
		links := map[string]bool{}
		for i, name := range strings.Split(names, "\x00") {
			typ := byte(tar.TypeReg)
			if i < len(types) {
				switch types[i] {
				case 'd':
					typ = tar.TypeDir
				case 'L':
					typ = tar.TypeSymlink
				case 'h':
					typ = tar.TypeLink
				}
			}
			rel, err := c.Check(&tar.Header{Name: name, Typeflag: typ, Linkname: "/target"})
			if err != nil {
				continue
			}
			if rel != "." && !filepath.IsLocal(rel) || filepath.Clean(rel) != rel || strings.Contains(rel, "\\x00") {
				t.Fatalf("%q accepted as %q", name, rel)
			}
			if top != "" && rel != top && !strings.HasPrefix(rel, top+"/") {
				t.Fatalf("%q accepted as %q, outside top %q", name, rel, top)
			}
			for p := filepath.Dir(rel); p != "." && p != "/"; p = filepath.Dir(p) {
				if links[p] {
					t.Fatalf("%q accepted as %q, below the symlink %q", name, rel, p)
				}
			}
			if typ == tar.TypeSymlink {
				links[rel] = true
			}
			if typ == tar.TypeLink {
				t.Fatalf("hard link %q accepted", name)
			}
		}
	})
}
