package safegit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// TestCommitSnapshot: the snapshot tree is the directory's files byte for byte, with the
// execute bit, odd names and links as links (never followed out of the directory), and
// without any .git.
func TestCommitSnapshot(t *testing.T) {
	ctx := ctxT(t)
	q := testQuarantine(t, Options{})
	dir := t.TempDir()
	odd := []string{"a b.txt", "quote\"d", "back\\slash", "new\nline", "tab\tx", "\"leading", "é-utf8", "bad-\xff-utf8", "ctl\x01"}
	for _, n := range odd {
		writeFile(t, filepath.Join(dir, "odd", n), "content of "+n, 0o644)
	}
	writeFile(t, filepath.Join(dir, "bin/tool"), "#!/bin/sh\n", 0o700)
	writeFile(t, filepath.Join(dir, "sub/.git/config"), "[core]\n\tfsmonitor = /x\n", 0o644)
	writeFile(t, filepath.Join(dir, ".GIT/HEAD"), "ref: x\n", 0o644)
	writeFile(t, filepath.Join(dir, "empty"), "", 0o644)
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../empty", filepath.Join(dir, "bin/rel")); err != nil {
		t.Fatal(err)
	}

	res, err := q.CommitSnapshot(ctx, dir, "", CommitMeta{Name: "moat", Email: "moat@localhost", Message: "snap\n"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != len(odd)+4 || res.Skipped != 2 {
		t.Errorf("result %+v", res)
	}
	out, err := q.run(ctx, invocation{args: []string{"ls-tree", "-r", "-z", res.Commit}})
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]string{} // path -> mode
	for _, rec := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		meta, p, _ := strings.Cut(rec, "\t")
		entries[p] = strings.Fields(meta)[0]
	}
	for _, n := range odd {
		if entries["odd/"+n] != "100644" {
			t.Errorf("odd name %q missing: %q", n, entries)
		}
		b, err := q.run(ctx, invocation{args: []string{"cat-file", "blob", res.Commit + ":odd/" + n}})
		if err != nil || string(b) != "content of "+n {
			t.Errorf("content of %q: %q, %v", n, b, err)
		}
	}
	if entries["bin/tool"] != "100755" || entries["escape"] != "120000" || entries["bin/rel"] != "120000" || entries["empty"] != "100644" {
		t.Errorf("modes: %q", entries)
	}
	for p := range entries {
		if strings.Contains(strings.ToLower(p), ".git/") {
			t.Errorf("snapshot holds %q", p)
		}
	}
	if b, _ := q.run(ctx, invocation{args: []string{"cat-file", "blob", res.Commit + ":escape"}}); string(b) != "/etc/passwd" {
		t.Errorf("link content %q", b)
	}
	if _, err := q.run(ctx, invocation{args: []string{"fsck", "--strict", "--no-dangling"}}); err != nil {
		t.Errorf("fsck of the snapshot: %v", err)
	}

	// Limits, and bad identities.
	small := &Quarantine{dir: q.dir, gitDir: q.gitDir, r: q.r, opt: Options{MaxSnapshotFiles: 3}.withDefaults(), log: q.log}
	if _, err := small.CommitSnapshot(ctx, dir, "", CommitMeta{Name: "m", Email: "m@x"}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("over MaxSnapshotFiles: %v", err)
	}
	small.opt.MaxSnapshotFiles, small.opt.MaxSnapshotBytes = 1000, 10
	if _, err := small.CommitSnapshot(ctx, dir, "", CommitMeta{Name: "m", Email: "m@x"}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("over MaxSnapshotBytes: %v", err)
	}
	for _, m := range []CommitMeta{{Name: "a>b", Email: "m@x"}, {Name: "m", Email: "m@x>\nauthor evil"}, {Name: "", Email: "m@x"}} {
		if _, err := q.CommitSnapshot(ctx, dir, "", m); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("identity %+v: %v", m, err)
		}
	}
	if _, err := q.CommitSnapshot(ctx, dir, strings.Repeat("3", 40), CommitMeta{Name: "m", Email: "m@x"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing base: %v", err)
	}
	if out, _ := q.run(ctx, invocation{args: []string{"for-each-ref", "refs/moat/tmp/"}}); len(out) != 0 {
		t.Errorf("temporary refs left: %s", out)
	}
}
