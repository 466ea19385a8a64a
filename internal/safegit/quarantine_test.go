package safegit

import (
	"bytes"
	"context"
	"crypto/sha1"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// TestQuarantineConfigOnly: the only configuration git reads in a quarantine is moat's
// config file and moat's command-line overrides — not the daemon's HOME, system config,
// XDG config, or GIT_* variables of the daemon's environment.
func TestQuarantineConfigOnly(t *testing.T) {
	evilHome := t.TempDir()
	writeFile(t, filepath.Join(evilHome, ".gitconfig"), "[core]\n\tpager = evil-home\n[include]\n\tpath = /etc/evil\n", 0o644)
	writeFile(t, filepath.Join(evilHome, "xdg/git/config"), "[core]\n\tpager = evil-xdg\n", 0o644)
	t.Setenv("HOME", evilHome)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(evilHome, "xdg"))
	t.Setenv("GIT_CONFIG_PARAMETERS", "'core.fsmonitor'='evil-params'")
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "core.editor")
	t.Setenv("GIT_CONFIG_VALUE_0", "evil-count")
	t.Setenv("GIT_DIR", evilHome)

	q := testQuarantine(t, Options{})
	out, err := q.run(context.Background(), invocation{args: []string{"config", "--show-origin", "--show-scope", "--list", "-z"}})
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := "file:" + filepath.Join(q.GitDir(), "config")
	if strings.Contains(string(out), "evil") {
		t.Errorf("config from outside moat: %q", out)
	}
	recs := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(recs)%3 != 0 {
		t.Fatalf("unexpected config listing: %q", out)
	}
	sawFile := false
	// -z --show-scope --show-origin: scope, origin and "key\nvalue", each NUL-terminated.
	for i := 0; i < len(recs); i += 3 {
		scope, origin := recs[i], recs[i+1]
		switch {
		case scope == "command" && origin == "command line:":
		case scope == "local" && origin == cfgFile:
			sawFile = true
		default:
			t.Errorf("config %q read from %s %s", recs[i+2], scope, origin)
		}
	}
	if !sawFile {
		t.Errorf("the quarantine's own config was not read: %q", out)
	}
	if !strings.Contains(string(out), "core.hookspath\n/dev/null") {
		t.Errorf("core.hooksPath override missing: %q", out)
	}

	// The config is moat's, read-only, and Open refuses a changed one.
	st, err := os.Stat(filepath.Join(q.GitDir(), "config"))
	if err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("config mode %v, %v", st.Mode(), err)
	}
	if _, err := Open(q.dir, Options{}); err != nil {
		t.Fatalf("Open of a fresh quarantine: %v", err)
	}
	if err := os.Chmod(filepath.Join(q.GitDir(), "config"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(q.GitDir(), "config"), []byte(quarantineConfig+"[include]\n\tpath = /tmp/x\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(q.dir, Options{}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("Open of a quarantine with a changed config: %v", err)
	}
	// No sample hooks: the repository was made without templates.
	if ents, err := os.ReadDir(filepath.Join(q.GitDir(), "hooks")); err == nil && len(ents) > 0 {
		t.Errorf("quarantine has hooks: %v", ents)
	}
	if st, err := os.Stat(q.dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("quarantine dir mode %v, %v", st.Mode(), err)
	}
	if _, err := Create(context.Background(), q.dir, Options{}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Create over an existing quarantine: %v", err)
	}
}

func TestReceivePack(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)

	t.Run("thin pack needs its bases", func(t *testing.T) {
		q := testQuarantine(t, Options{})
		if _, err := q.ReceivePack(ctx, bytes.NewReader(f.thinPack)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("thin pack without bases: %v", err)
		}
		if ok, _ := q.HasCommit(ctx, f.tip); ok {
			t.Fatal("tip present after a failed receive")
		}
		if err := (PathFetcher{Path: f.remote}).Fetch(ctx, q, []string{"refs/heads/main"}); err != nil {
			t.Fatal(err)
		}
		res, err := q.ReceivePack(ctx, bytes.NewReader(f.thinPack))
		if err != nil {
			t.Fatal(err)
		}
		if res.Bytes != int64(len(f.thinPack)) || res.Objects == 0 {
			t.Errorf("result %+v, pack of %d bytes", res, len(f.thinPack))
		}
		if ok, err := q.HasCommit(ctx, f.tip); !ok || err != nil {
			t.Fatalf("tip missing after receive: %v", err)
		}
	})

	t.Run("empty pack", func(t *testing.T) {
		// A push of a commit the remote has to a new ref sends a pack of no objects.
		hdr := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
		sum := sha1.Sum(hdr)
		q := testQuarantine(t, Options{})
		if res, err := q.ReceivePack(ctx, bytes.NewReader(append(hdr, sum[:]...))); err != nil || res.Objects != 0 || res.Bytes != 32 {
			t.Fatalf("empty pack: %+v, %v", res, err)
		}
	})

	t.Run("limits", func(t *testing.T) {
		q := testQuarantine(t, Options{MaxObjects: 2})
		if _, err := q.ReceivePack(ctx, bytes.NewReader(f.thinPack)); !errors.Is(err, errdefs.ErrResourceExhausted) {
			t.Errorf("too many objects: %v", err)
		}
		q = testQuarantine(t, Options{MaxPackBytes: 100})
		_ = q.FetchPath(ctx, f.remote, []string{"refs/heads/main"})
		if _, err := q.ReceivePack(ctx, bytes.NewReader(f.thinPack)); !errors.Is(err, errdefs.ErrResourceExhausted) {
			t.Errorf("too many bytes: %v", err)
		}
		if ok, _ := q.HasCommit(ctx, f.tip); ok {
			t.Error("tip present after an oversized pack")
		}
	})

	t.Run("malformed", func(t *testing.T) {
		q := testQuarantine(t, Options{})
		_ = q.FetchPath(ctx, f.remote, []string{"refs/heads/main"})
		for name, pack := range map[string][]byte{
			"empty":     nil,
			"not pack":  []byte("GET / HTTP/1.1\r\n\r\n"),
			"version":   append([]byte("PACK\x00\x00\x00\x09\x00\x00\x00\x01"), f.thinPack[12:]...),
			"truncated": f.thinPack[:len(f.thinPack)/2],
			"corrupt":   append(append([]byte{}, f.thinPack[:len(f.thinPack)-5]...), 1, 2, 3, 4, 5),
		} {
			if _, err := q.ReceivePack(ctx, bytes.NewReader(pack)); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s pack: %v", name, err)
			}
		}
		if ok, _ := q.HasCommit(ctx, f.tip); ok {
			t.Error("tip present after malformed packs")
		}
	})

	t.Run("fsck refuses a broken commit", func(t *testing.T) {
		dir := t.TempDir()
		tgit(t, dir, nil, "init", "-q", "--bare", "b.git")
		bad := "tree " + emptyTree + "\nauthor no-email-here 1 +0000\ncommitter x <x@y> 1 +0000\n\nbad\n"
		id := tgit(t, filepath.Join(dir, "b.git"), []byte(bad), "hash-object", "-t", "commit", "-w", "--literally", "--stdin")
		pack := tgitRaw(t, filepath.Join(dir, "b.git"), []byte(id+"\n"), "pack-objects", "--stdout", "-q")
		q := testQuarantine(t, Options{})
		if _, err := q.ReceivePack(ctx, bytes.NewReader(pack)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("broken commit accepted: %v", err)
		}
		if ok, _ := q.HasCommit(ctx, id); ok {
			t.Error("broken commit present")
		}
	})

	t.Run("fsck refuses dangerous trees", func(t *testing.T) {
		// A tree with a .git entry (it would be a repository inside a checkout) and a
		// .gitmodules whose URL is an option (CVE-2018-17456 class).
		dir := t.TempDir()
		tgit(t, dir, nil, "init", "-q", "--bare", "b.git")
		gd := filepath.Join(dir, "b.git")
		blob := tgit(t, gd, []byte("[core]\n\tfsmonitor = /tmp/x\n"), "hash-object", "-w", "--stdin")
		gm := tgit(t, gd, []byte("[submodule \"x\"]\n\tpath = x\n\turl = --upload-pack=touch${IFS}/tmp/pwned\n"), "hash-object", "-w", "--stdin")
		sub := tgit(t, gd, []byte("100644 blob "+blob+"\tconfig\n"), "mktree")
		for name, entry := range map[string]string{
			".git dir":    "040000 tree " + sub + "\t.git\n",
			".GIT dir":    "040000 tree " + sub + "\t.GIT\n",
			".gitmodules": "100644 blob " + gm + "\t.gitmodules\n",
		} {
			tree := tgit(t, gd, []byte(entry), "mktree")
			commit := tgit(t, gd, []byte("x\n"), "commit-tree", tree)
			pack := tgitRaw(t, gd, []byte(commit+"\n"), "pack-objects", "--revs", "--stdout", "-q")
			q := testQuarantine(t, Options{})
			_, err := q.ReceivePack(ctx, bytes.NewReader(pack))
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "fsck error") {
				t.Errorf("%s: not refused by fsck: %v", name, err)
			}
			if ok, _ := q.HasCommit(ctx, commit); ok {
				t.Errorf("%s: commit present", name)
			}
		}
	})

	t.Run("cancel kills git", func(t *testing.T) {
		q := testQuarantine(t, Options{})
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		pr, pw := io.Pipe()
		defer pw.Close()
		go pw.Write(f.thinPack[:100]) // then nothing: index-pack waits for more
		start := time.Now()
		_, err := q.ReceivePack(ctx, pr)
		if err == nil || time.Since(start) > 10*time.Second {
			t.Fatalf("receive of a stalled pack: %v after %v", err, time.Since(start))
		}
	})
}

func TestCheckNames(t *testing.T) {
	for ref, ok := range map[string]bool{
		"refs/heads/main": true, "refs/heads/agent/x-1": true, "refs/tags/v1.0": true,
		"main": false, "refs/heads/": false, "refs/heads/a..b": false, "refs/heads/a b": false,
		"refs/heads/x.lock": false, "refs/heads/.x": false, "refs/heads/a:b": false, "refs/heads/a@{1}": false,
		"refs/heads/a^": false, "refs/heads/a~1": false, "refs//x": false, "refs/heads/x.": false,
		"refs/heads/a\x00": false, "refs/heads/a\\b": false, "refs/heads/*": false, "--upload-pack=x": false,
	} {
		if err := CheckRefName(ref); (err == nil) != ok {
			t.Errorf("CheckRefName(%q) = %v", ref, err)
		}
		// Whatever CheckRefName accepts, git accepts.
		if ok && exec.Command("git", "check-ref-format", ref).Run() != nil {
			t.Errorf("git check-ref-format refuses %q", ref)
		}
	}
	for b, ok := range map[string]bool{
		"agent/x": true, "agent/a/b": true, "agent/": false, "main": false, "agent/..": false, "agentx": false,
	} {
		if err := CheckExportBranch(b); (err == nil) != ok {
			t.Errorf("CheckExportBranch(%q) = %v", b, err)
		}
	}
	for id, ok := range map[string]bool{
		strings.Repeat("a", 40): true, strings.Repeat("0", 64): true, strings.Repeat("A", 40): false,
		"HEAD": false, strings.Repeat("a", 39): false, "--all": false,
	} {
		if err := CheckObjectID(id); (err == nil) != ok {
			t.Errorf("CheckObjectID(%q) = %v", id, err)
		}
	}
	if d, err := Dir("/var/lib/moat/git", "sb1", "https://github.com/a/b"); err != nil || !strings.HasPrefix(d, "/var/lib/moat/git/sb1/") {
		t.Errorf("Dir = %q, %v", d, err)
	}
	for _, id := range []string{"", "..", "a/b"} {
		if _, err := Dir("/r", id, "u"); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Dir(%q) = %v", id, err)
		}
	}
}

func TestLockfiles(t *testing.T) {
	safe := regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	for _, n := range LockfileNames() {
		if !safe.MatchString(n) {
			t.Errorf("lockfile name %q is not shell-safe", n)
		}
		if !IsLockfile(n) || !IsLockfile("a/b/"+n) {
			t.Errorf("IsLockfile(%q) false", n)
		}
	}
	for _, p := range []string{"go.sum.bak", "lock", "package-lock.json/x", "Cargo.lock.orig"} {
		if IsLockfile(p) {
			t.Errorf("IsLockfile(%q) true", p)
		}
	}
}
