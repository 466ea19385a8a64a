package safegit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// testEnv is the environment of the git commands tests use to build fixtures: isolated
// like the runner's (no system or global config, an empty HOME), plus a fixed identity.
func testEnv(t testing.TB) []string {
	home := t.TempDir()
	return []string{
		"PATH=" + searchPath, "HOME=" + home, "XDG_CONFIG_HOME=" + home, "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_AUTHOR_DATE=1700000000 +0000",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com", "GIT_COMMITTER_DATE=1700000000 +0000",
	}
}

// tgit runs a fixture git command in dir and returns its trimmed stdout.
func tgit(t testing.TB, dir string, stdin []byte, args ...string) string {
	t.Helper()
	return string(bytes.TrimSpace(tgitRaw(t, dir, stdin, args...)))
}

func tgitRaw(t testing.TB, dir string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = testEnv(t)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, stderr.String())
	}
	return out
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func testQuarantine(t testing.TB, opt Options) *Quarantine {
	t.Helper()
	q, err := Create(context.Background(), filepath.Join(t.TempDir(), "q"), opt)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// fixture is a "remote" (bare, trusted) with a base commit on main, and a sandbox work
// tree cloned from it with one more commit.
type fixture struct {
	remote, sandbox string
	base, tip       string
	thinPack        []byte // tip ^base, thin
}

func newFixture(t testing.TB) fixture {
	t.Helper()
	root := t.TempDir()
	f := fixture{remote: filepath.Join(root, "remote.git"), sandbox: filepath.Join(root, "sandbox")}
	tgit(t, root, nil, "init", "-q", "--bare", f.remote)
	tgit(t, root, nil, "init", "-q", f.sandbox)
	big := strings.Repeat("line of a file that stays the same\n", 200)
	writeFile(t, filepath.Join(f.sandbox, "README.md"), "hello\n"+big, 0o644)
	writeFile(t, filepath.Join(f.sandbox, "go.sum"), "a v1 h1:x\n", 0o644)
	writeFile(t, filepath.Join(f.sandbox, "old/name.txt"), big, 0o644)
	tgit(t, f.sandbox, nil, "add", "-A")
	tgit(t, f.sandbox, nil, "commit", "-q", "-m", "base")
	tgit(t, f.sandbox, nil, "push", "-q", f.remote, "HEAD:refs/heads/main")
	f.base = tgit(t, f.sandbox, nil, "rev-parse", "HEAD")

	writeFile(t, filepath.Join(f.sandbox, "README.md"), "hello, world\n"+big+"more\n", 0o644)
	writeFile(t, filepath.Join(f.sandbox, "go.sum"), "a v1 h1:x\nb v2 h1:y\n", 0o644)
	writeFile(t, filepath.Join(f.sandbox, "web/package-lock.json"), "{}\n", 0o644)
	writeFile(t, filepath.Join(f.sandbox, "blob.bin"), "\x00\x01\x02binary\x00", 0o644)
	writeFile(t, filepath.Join(f.sandbox, "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	writeFile(t, filepath.Join(f.sandbox, ".gitattributes"), "* filter=x diff=x\n", 0o644)
	tgit(t, f.sandbox, nil, "mv", "old/name.txt", "new-name.txt")
	tgit(t, f.sandbox, nil, "add", "-A")
	tgit(t, f.sandbox, nil, "commit", "-q", "-m", "change things\n\nbody line")
	f.tip = tgit(t, f.sandbox, nil, "rev-parse", "HEAD")
	f.thinPack = tgitRaw(t, f.sandbox, []byte(f.tip+"\n^"+f.base+"\n"), "pack-objects", "--revs", "--thin", "--stdout", "-q")
	return f
}

// treeHash hashes every file (name, mode, content, link target) under dir, skipping skip.
func treeHash(t testing.TB, dir string, skip ...string) string {
	t.Helper()
	h := sha256.New()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		for _, s := range skip {
			if rel == s {
				return fs.SkipDir
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := rel + " " + info.Mode().String()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			line += " " + hex.EncodeToString(s[:])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	h.Write([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(h.Sum(nil))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
