package gitignore

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestPatterns(t *testing.T) {
	cases := []struct {
		pat     string
		path    string
		dir     bool
		ignored bool
		matched bool
	}{
		{"node_modules/", "node_modules", true, true, true},
		{"node_modules/", "node_modules", false, false, false},
		{"node_modules/", "a/b/node_modules", true, true, true},
		{"*.log", "x.log", false, true, true},
		{"*.log", "a/x.log", false, true, true},
		{"/build", "build", true, true, true},
		{"/build", "a/build", true, false, false},
		{"a/*.c", "a/x.c", false, true, true},
		{"a/*.c", "a/b/x.c", false, false, false},
		{"**/foo", "x/y/foo", false, true, true},
		{"**/foo", "foo", false, true, true},
		{"a/**/b", "a/b", false, true, true},
		{"a/**/b", "a/x/y/b", false, true, true},
		{"a/**", "a/x/y", false, true, true},
		{"a/**", "a", true, false, false},
		{"f?o", "foo", false, true, true},
		{"f?o", "f/o", false, false, false},
		{"[ab].txt", "a.txt", false, true, true},
		{"[!ab].txt", "c.txt", false, true, true},
		{"[!ab].txt", "a.txt", false, false, false},
		{"[[:digit:]]x", "7x", false, true, true},
		{"\\#x", "#x", false, true, true},
		{"#x", "#x", false, false, false},
		{"\\!x", "!x", false, true, true},
		{"x\\ ", "x ", false, true, true},
		{"x  ", "x", false, true, true},
		{"[abc", "a", false, false, false},
		{"x\\", "x", false, false, false},
		{"*.log\n!keep.log", "keep.log", false, false, true},
		{"*\n!*/\n!*.go", "a/b.go", false, false, true},
		{"\xef\xbb\xbf*.tmp", "a.tmp", false, true, true},
	}
	for _, tc := range cases {
		ign, matched := Decide(Parse([]byte(tc.pat)), tc.path, tc.dir)
		if ign != tc.ignored || matched != tc.matched {
			t.Errorf("%q vs %q (dir %v): ignored %v matched %v, want %v %v", tc.pat, tc.path, tc.dir, ign, matched, tc.ignored, tc.matched)
		}
	}
}

// TestMatcher: deeper files win, a path below an ignored directory stays ignored even if a
// pattern re-includes it, and each .gitignore is read once.
func TestMatcher(t *testing.T) {
	files := map[string]string{
		".":   "build/\n*.log\n!important.log\n",
		"sub": "!*.log\nlocal/\n",
	}
	reads := map[string]int{}
	m := NewMatcher(func(dir string) []byte { reads[dir]++; return []byte(files[dir]) })
	for _, tc := range []struct {
		p    string
		dir  bool
		want bool
	}{
		{"a.log", false, true},
		{"important.log", false, false},
		{"sub/x.log", false, false},
		{"sub/local", true, true},
		{"sub/local/x.txt", false, true},
		{"build", true, true},
		{"build/important.log", false, true},
		{"src/main.go", false, false},
	} {
		if got := m.Ignored(tc.p, tc.dir); got != tc.want {
			t.Errorf("Ignored(%q) = %v, want %v", tc.p, got, tc.want)
		}
	}
	for d, n := range reads {
		if n != 1 {
			t.Errorf("%s/.gitignore read %d times", d, n)
		}
	}
}

// TestAgainstGit compares the matcher with `git check-ignore --no-index` on a real tree:
// hand-picked cases and random patterns from a small alphabet.
func TestAgainstGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	paths := []string{"a", "b", "ab", "a.c", "x/a", "x/b.c", "x/y/a", "x/y/ab", "a b", "[a]", "a*", "d/a/b", "d/x/a/b", "foo", "#f", "!f"}
	dirs := []string{"x", "x/y", "d", "d/a", "d/x", "d/x/a"}
	fixed := []string{
		"a", "/a", "a/", "x/", "x/*", "x/**", "**/a", "x/**/a", "d/**/b", "*.c", "!x/b.c", "[ab]", "[!a]", "[a-b]*", "\\[a]", "a\\*", "a?", "?",
		"*", "*\n!*/", "x\n!x/a", "d/\n!d/a", "a b", "a\\ b", "\\#f", "\\!f", "**", "x/y/", "/x/y", "y", "*/a", "*/*/a",
		"[[:alpha:]]", "[[:punct:]]*", "[]a]", "[a-]", "a**", "**a", "x**/a", "d/*/b", "[^a]b",
	}
	rng := rand.New(rand.NewSource(11))
	alpha := []string{"a", "b", "c", ".", "*", "**", "?", "/", "[ab]", "[!a]", "x", "y", "d", "\\*", " ", "\\ ", "[a-c]", "[]]"}
	var random []string
	for range 600 {
		var lines []string
		for range 1 + rng.Intn(3) {
			var b strings.Builder
			if rng.Intn(5) == 0 {
				b.WriteString("!")
			}
			for range 1 + rng.Intn(4) {
				b.WriteString(alpha[rng.Intn(len(alpha))])
			}
			lines = append(lines, b.String())
		}
		random = append(random, strings.Join(lines, "\n"))
	}
	root := t.TempDir()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range paths {
		if err := os.WriteFile(filepath.Join(root, p), nil, 0o644); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	isDir := map[string]bool{}
	for _, d := range dirs {
		isDir[d] = true
	}
	all := append(append([]string{}, dirs...), paths...)
	git := func(stdin string) []byte {
		cmd := exec.Command("git", "-c", "core.excludesFile=/dev/null", "check-ignore", "--no-index", "--stdin", "-z", "-v", "-n")
		cmd.Dir = root
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_DIR=" + filepath.Join(root, ".git")}
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
			t.Fatalf("git check-ignore: %v", err)
		}
		return out
	}
	init := exec.Command("git", "init", "-q", root)
	init.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	if out, err := init.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	var diffs int
	for _, gi := range append(fixed, random...) {
		if err := os.WriteFile(filepath.Join(root, ".gitignore"), []byte(gi+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := git(strings.Join(all, "\x00") + "\x00")
		// -z -v -n: <source> NUL <linenum> NUL <pattern> NUL <pathname> NUL
		f := bytes.Split(out, []byte{0})
		want := map[string]bool{}
		for i := 0; i+3 < len(f); i += 4 {
			pat := string(f[i+2])
			want[string(f[i+3])] = pat != "" && !strings.HasPrefix(pat, "!")
		}
		m := NewMatcher(func(dir string) []byte {
			if dir == "." {
				return []byte(gi + "\n")
			}
			return nil
		})
		for _, p := range all {
			if got := m.Ignored(p, isDir[p]); got != want[p] {
				diffs++
				t.Errorf(".gitignore %q, path %q (dir %v): ignored %v, git says %v", gi, p, isDir[p], got, want[p])
			}
		}
	}
	if diffs > 0 {
		t.Logf("%d differences", diffs)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"*.log\n!keep.log\n", "a/**/b", "[[:alpha:]-z]", "\\", "[", "**/", "x\\ \\ ", "/", "!"} {
		f.Add([]byte(s), "a/b.log", false)
	}
	f.Fuzz(func(t *testing.T, data []byte, p string, dir bool) {
		pats := Parse(data)
		if len(pats) > MaxPatterns {
			t.Fatalf("%d patterns", len(pats))
		}
		for _, pt := range pats {
			if pt.re == nil {
				t.Fatal("pattern without expression")
			}
			// "/" is never matched by a single-component pattern element.
			if !pt.Anchored && strings.Contains(p, "/") && !strings.Contains(pt.Text, "**") {
				base := p[strings.LastIndexByte(p, '/')+1:]
				if pt.Match(p, dir) != pt.Match(base, dir) {
					t.Fatalf("unanchored %q: %q and its last component differ", pt.Text, p)
				}
			}
		}
		m := NewMatcher(func(string) []byte { return data })
		ign := m.Ignored(p, dir)
		if again := m.Ignored(p, dir); again != ign {
			t.Fatalf("Ignored(%q) not stable", p)
		}
	})
}
