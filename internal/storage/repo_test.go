package storage

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// gitRepo makes a repository in a directory owned by uid, with one commit on branch main.
func gitRepo(t *testing.T, uid int) string {
	t.Helper()
	parent := t.TempDir()
	os.Chmod(parent, 0o755)
	os.Chmod(filepath.Dir(parent), 0o755) // t.TempDir makes its top directory 0700
	dir := filepath.Join(parent, "proj")
	os.Mkdir(dir, 0o755)
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	git("init", "-q", "-b", "main")
	git("remote", "add", "origin", "https://git.example.test/team/proj.git")
	os.WriteFile(filepath.Join(dir, "README"), []byte("v1\n"), 0o644)
	os.Chown(filepath.Join(dir, "README"), uid, uid)
	git("add", "README")
	git("commit", "-q", "-m", "one")
	t.Cleanup(func() {}) // TempDir removal runs as root
	return dir
}

func TestRepoLayer(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	const owner = 4242 // not root: git runs as this user
	dir := gitRepo(t, owner)
	// Uncommitted work is not part of the layer.
	os.WriteFile(filepath.Join(dir, "README"), []byte("dirty\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "untracked"), []byte("x"), 0o644)

	start := time.Now()
	l, err := s.RepoLayer(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first RepoLayer %v", time.Since(start))
	if !strings.HasPrefix(l.ID, "repo-") || l.Path != filepath.Join(s.dir, "layers", l.ID) {
		t.Fatalf("layer %+v", l)
	}
	ws := filepath.Join(l.Path, "workspace")
	if data, err := os.ReadFile(filepath.Join(ws, "README")); err != nil || string(data) != "v1\n" {
		t.Errorf("README = %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "untracked")); err == nil {
		t.Error("untracked file copied")
	}
	if _, err := os.Stat(filepath.Join(ws, "repo.bundle")); err == nil {
		t.Error("bundle left behind")
	}
	if _, err := os.Stat(filepath.Join(l.Path, "repo.bundle")); err == nil {
		t.Error("bundle left in the layer")
	}
	filepath.Walk(l.Path, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if p != l.Path && (st.Uid != 1000 || st.Gid != 1000) {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
			return filepath.SkipAll
		}
		return nil
	})
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", ws}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if b := git("symbolic-ref", "--short", "HEAD"); b != "main" {
		t.Errorf("branch %q", b)
	}
	if o := git("remote", "get-url", "origin"); o != "https://git.example.test/team/proj.git" {
		t.Errorf("origin %q", o)
	}
	if st := git("status", "--porcelain"); st != "" {
		t.Errorf("clone not clean: %q", st)
	}

	// The second call for the same commit returns the layer as it is.
	fi1, _ := os.Stat(ws)
	start = time.Now()
	l2, err := s.RepoLayer(ctx, dir+"/")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second RepoLayer %v", time.Since(start))
	fi2, _ := os.Stat(ws)
	if l2 != l || !fi1.ModTime().Equal(fi2.ModTime()) || fi1.Sys().(*syscall.Stat_t).Ino != fi2.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("second call rebuilt: %+v vs %+v", l2, l)
	}
	// A subdirectory of the work tree names the same repository.
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Chown(filepath.Join(dir, "sub"), owner, owner)
	if l3, err := s.RepoLayer(ctx, filepath.Join(dir, "sub")); err != nil || l3 != l {
		t.Errorf("from a subdirectory: %+v, %v", l3, err)
	}

	// A new commit is a new layer.
	cmd := exec.Command("git", "-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-q", "-am", "two")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_GLOBAL=/dev/null"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: owner, Gid: owner}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	l4, err := s.RepoLayer(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if l4.ID == l.ID {
		t.Error("new commit, same layer")
	}
	if data, _ := os.ReadFile(filepath.Join(l4.Path, "workspace/README")); string(data) != "dirty\n" {
		t.Errorf("README at the second commit = %q", data)
	}
	entries, _ := os.ReadDir(filepath.Join(s.dir, "layers"))
	if len(entries) != 2 {
		t.Errorf("layers: %v", entries)
	}
}

func TestRepoLayerErrors(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	if _, err := s.RepoLayer(ctx, filepath.Join(t.TempDir(), "missing")); !errdefs.IsNotFound(err) {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := s.RepoLayer(ctx, t.TempDir()); !errdefs.IsInvalidArgument(err) {
		t.Errorf("not a repository: %v", err)
	}
	empty := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", empty).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	if _, err := s.RepoLayer(ctx, empty); !errdefs.IsInvalidArgument(err) {
		t.Errorf("no commits: %v", err)
	}
}

// TestConcurrentFirstUse: simultaneous first uses of the host template and of a repository
// layer build each once and agree on the result.
func TestConcurrentFirstUse(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	dir := gitRepo(t, 4243)
	const n = 6
	hosts, repos, errs := make([]string, n), make([]string, n), make(chan error, 2*n)
	done := make(chan struct{})
	for i := range n {
		go func() {
			defer func() { done <- struct{}{} }()
			tmpl, err := s.Template(ctx, HostTemplate)
			if err != nil {
				errs <- err
				return
			}
			hosts[i] = tmpl.Parts[0].Layers[0]
		}()
		go func() {
			defer func() { done <- struct{}{} }()
			l, err := s.RepoLayer(ctx, dir)
			if err != nil {
				errs <- err
				return
			}
			repos[i] = l.Path
		}()
	}
	for range 2 * n {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		if hosts[i] != hosts[0] || repos[i] != repos[0] {
			t.Errorf("call %d: %s %s, want %s %s", i, hosts[i], repos[i], hosts[0], repos[0])
		}
	}
	entries, _ := os.ReadDir(filepath.Join(s.dir, "layers"))
	if len(entries) != 2 {
		t.Errorf("layers/: %v", entries)
	}
}
