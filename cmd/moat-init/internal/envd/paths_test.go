package envd

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

func TestResolvePathEscapes(t *testing.T) {
	u := &users.User{Name: "user", Home: "/home/user"}
	for in, want := range map[string]string{
		"":                         "/home/user",
		"~":                        "/home/user",
		"~/a/b":                    "/home/user/a/b",
		"notes/a.txt":              "/home/user/notes/a.txt",
		"../../../../etc/passwd":   "/etc/passwd",
		"/../../tmp/x":             "/tmp/x",
		"/a/./b//c/..":             "/a/b",
		"~/../../../../../../../x": "/x",
	} {
		got, err := resolvePath(in, u)
		if err != nil || got != want {
			t.Errorf("resolvePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := resolvePath("a\x00b", u); err == nil {
		t.Errorf("NUL byte accepted")
	}
}

// FuzzResolvePath: whatever a client sends, the result is an absolute, clean path inside
// the sandbox's root: no "..", no NUL. (The path is then used inside the sandbox's own
// mount namespace, so "/" is the sandbox's root, never the host's.)
func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"", "~", "~/x", "../../etc/shadow", "/..", "a/../../b", "~user/x", "/proc/self/root/etc", "\x00"} {
		f.Add(s)
	}
	u := &users.User{Name: "user", Home: "/home/user"}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := resolvePath(p, u)
		if err != nil {
			if !strings.Contains(p, "\x00") {
				t.Fatalf("resolvePath(%q): unexpected error %v", p, err)
			}
			return
		}
		if !filepath.IsAbs(got) || filepath.Clean(got) != got || strings.Contains(got, "\x00") {
			t.Fatalf("resolvePath(%q) = %q: not absolute and clean", p, got)
		}
		for _, part := range strings.Split(got, "/") {
			if part == ".." {
				t.Fatalf("resolvePath(%q) = %q keeps ..", p, got)
			}
		}
	})
}
