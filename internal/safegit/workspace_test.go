package safegit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// TestFetchHostCommit: the base of a workspace snapshot comes from the user's repository
// (owned by another user when the test runs as root) by pack; a KeepFunc leaves out what it
// refuses; TrackedPaths and TreeOf read the result; HostBranch reads the user's branch.
func TestFetchHostCommit(t *testing.T) {
	f := newFixture(t)
	ctx := ctxT(t)
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	host := filepath.Join(tmp, "host")
	tgit(t, tmp, nil, "clone", "-q", f.remote, host)
	if os.Geteuid() == 0 {
		if err := filepath.Walk(host, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 65534, 65534)
		}); err != nil {
			t.Fatal(err)
		}
	}
	q := testQuarantine(t, Options{})
	if err := q.FetchHostCommit(ctx, host, f.tip); !errdefs.IsNotFound(err) {
		t.Fatalf("fetching a commit the host lacks: %v, want not found", err)
	}
	if err := q.FetchHostCommit(ctx, host, f.base); err != nil {
		t.Fatal(err)
	}
	if ok, _ := q.HasCommit(ctx, f.base); !ok {
		t.Fatal("base not in the quarantine")
	}
	if err := q.FetchHostCommit(ctx, host, f.base); err != nil { // again: nothing to do
		t.Fatal(err)
	}
	paths, err := q.TrackedPaths(ctx, f.base)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "go.sum", "old/name.txt"}; !slices.Equal(paths, want) {
		t.Errorf("TrackedPaths = %q, want %q", paths, want)
	}

	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "README.md"), "x\n", 0o644)
	writeFile(t, filepath.Join(ws, "node_modules/a/index.js"), "x\n", 0o644)
	writeFile(t, filepath.Join(ws, "keep/b.txt"), "b\n", 0o644)
	writeFile(t, filepath.Join(ws, "keep/skip.log"), "b\n", 0o644)
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var asked []string
	res, err := q.CommitSnapshotRoot(ctx, root, f.base, CommitMeta{Name: "t", Email: "t@x"}, func(p string, dir bool) bool {
		asked = append(asked, p)
		return p != "node_modules" && p != "keep/skip.log"
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 2 || res.Ignored != 2 {
		t.Errorf("result %+v, want 2 files, 2 ignored", res)
	}
	if slices.Contains(asked, "node_modules/a") {
		t.Error("walked into a refused directory")
	}
	got, err := q.TrackedPaths(ctx, res.Commit)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README.md", "keep/b.txt"}; !slices.Equal(got, want) {
		t.Errorf("snapshot tree = %q, want %q", got, want)
	}
	if tr, err := q.TreeOf(ctx, f.base); err != nil || tr != tgit(t, host, nil, "-c", "safe.directory=*", "rev-parse", f.base+"^{tree}") {
		t.Errorf("TreeOf = %q, %v", tr, err)
	}
	if id, err := q.HostBranch(ctx, host, "agent/none"); err != nil || id != "" {
		t.Errorf("HostBranch(missing) = %q, %v", id, err)
	}
	if _, err := q.Export(ctx, host, res.Commit, "agent/ws"); err != nil {
		t.Fatal(err)
	}
	if id, err := q.HostBranch(ctx, host, "agent/ws"); err != nil || id != res.Commit {
		t.Errorf("HostBranch = %q, %v, want %s", id, err, res.Commit)
	}
	if _, err := q.HostBranch(ctx, host, "main"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("HostBranch(main) = %v, want invalid argument", err)
	}
}

// TestSnapshotFIFOSwap: a file swapped for a FIFO between the directory read and the open
// is skipped, not waited on (the sandbox could otherwise hang the daemon's snapshot).
func TestSnapshotFIFOSwap(t *testing.T) {
	q := testQuarantine(t, Options{})
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "a.txt"), "a\n", 0o644)
	writeFile(t, filepath.Join(ws, "b.txt"), "b\n", 0o644)
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := q.CommitSnapshotRoot(ctx, root, "", CommitMeta{Name: "t", Email: "t@x"}, func(p string, dir bool) bool {
		if p == "b.txt" { // after the walk saw a regular file
			if err := os.Remove(filepath.Join(ws, p)); err != nil {
				t.Error(err)
			}
			if err := syscall.Mkfifo(filepath.Join(ws, p), 0o644); err != nil {
				t.Error(err)
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 1 || res.Skipped != 1 {
		t.Errorf("result %+v, want 1 file and the FIFO skipped", res)
	}
}

// TestHostRepoOwners: a work tree whose .git file names a git directory of another user is
// refused (moat would otherwise write there as that user).
func TestHostRepoOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	f := newFixture(t)
	q := testQuarantine(t, Options{})
	tmp := t.TempDir()
	other := filepath.Join(tmp, "other.git")
	tgit(t, tmp, nil, "clone", "-q", "--bare", f.remote, other)
	wt := filepath.Join(tmp, "wt")
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: "+other+"\n", 0o644)
	if err := os.Lchown(wt, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := q.FetchHostCommit(ctxT(t), wt, f.base); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("fetch through a .git file to another owner's repository: %v, want permission denied", err)
	}
	if _, err := q.HostBranch(ctxT(t), wt, "agent/x"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("HostBranch: %v, want permission denied", err)
	}
}
