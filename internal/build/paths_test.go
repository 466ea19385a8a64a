package build

import (
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestContextPath(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"a", "a", ""},
		{"a/b/", "a/b", ""},
		{"./a//b/.", "a/b", ""},
		{".", ".", ""},
		{"/", ".", ""},
		{"/etc/passwd", "etc/passwd", ""}, // "/" is the context's root, as in Docker
		{"a/../b", "b", ""},
		{"a/..", ".", ""},
		{"..", "", "outside the build context"},
		{"../x", "", "outside the build context"},
		{"a/../../x", "", "outside the build context"},
		{"/../etc", "", "outside the build context"},
		{"./..", "", "outside the build context"},
		{"a/b/../../..", "", "outside the build context"},
		{"", "", "empty"},
		{"a\x00b", "", "NUL"},
		{"*.go", "", "wildcards"},
		{"a?", "", "wildcards"},
		{"[ab]", "", "wildcards"},
	} {
		got, err := ContextPath(c.in)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("ContextPath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, errdefs.ErrInvalidArgument)):
			t.Errorf("ContextPath(%q) = %q, %v; want an error with %q", c.in, got, err, c.err)
		}
	}
}

func TestImagePath(t *testing.T) {
	for _, c := range []struct {
		in, wd, want string
		dir          bool
	}{
		{"/a/b", "/w", "/a/b", false},
		{"/a/b/", "/w", "/a/b", true},
		{"x", "/w", "/w/x", false},
		{"./", "/w", "/w", true},
		{".", "", "/", true},
		{"../../x", "/w", "/x", false},
	} {
		got, dir, err := ImagePath(c.in, c.wd)
		if err != nil || got != c.want || dir != c.dir {
			t.Errorf("ImagePath(%q, %q) = %q %v %v", c.in, c.wd, got, dir, err)
		}
	}
}

// FuzzContextPath: an accepted path is clean, relative, never "..", and joining it to a
// context directory stays inside it; a refused one is an invalid argument.
func FuzzContextPath(f *testing.F) {
	for _, s := range []string{"a", "../x", "/a/../..", "a/./b/../c", ".", "..a", "a..", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := ContextPath(p)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%q: %v", p, err)
			}
			return
		}
		if rel == "" || strings.HasPrefix(rel, "/") || path.Clean(rel) != rel {
			t.Fatalf("%q → %q: not clean and relative", p, rel)
		}
		for _, c := range strings.Split(rel, "/") {
			if c == ".." {
				t.Fatalf("%q → %q has ..", p, rel)
			}
		}
		if j := path.Join("/ctx", rel); j != "/ctx" && !strings.HasPrefix(j, "/ctx/") {
			t.Fatalf("%q → %q leaves the context: %s", p, rel, j)
		}
	})
}

func TestParseOwner(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1001:u:/home/user:/bin/sh\nbad:x:zz:1:::\n"
	group := "root:x:0:\nstaff:x:50:\nuser:x:1001:\n"
	for _, c := range []struct {
		in       string
		uid, gid int
		err      string
	}{
		{"user", 1000, 1001, ""},
		{"user:staff", 1000, 50, ""},
		{"user:7", 1000, 7, ""},
		{"42", 42, 42, ""},
		{"42:staff", 42, 50, ""},
		{"0:0", 0, 0, ""},
		{"nobody", 0, 0, "no user"},
		{"user:nogroup", 0, 0, "no group"},
		{"bad", 0, 0, "bad /etc/passwd"},
		{"", 0, 0, "want USER"},
		{"user:", 0, 0, "want USER"},
		{"70000", 0, 0, "no user"},
		{"-1", 0, 0, "no user"},
		{"01", 0, 0, "no user"},
	} {
		uid, gid, err := ParseOwner(c.in, passwd, group)
		if c.err == "" && (err != nil || uid != c.uid || gid != c.gid) || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ParseOwner(%q) = %d:%d %v; want %d:%d %q", c.in, uid, gid, err, c.uid, c.gid, c.err)
		}
	}
}
