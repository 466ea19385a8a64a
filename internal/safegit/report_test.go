package safegit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func receivedFixture(t *testing.T, opt Options) (fixture, *Quarantine) {
	t.Helper()
	f := newFixture(t)
	q := testQuarantine(t, opt)
	ctx := ctxT(t)
	if err := q.FetchPath(ctx, f.remote, []string{"refs/heads/main"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ReceivePack(ctx, bytes.NewReader(f.thinPack)); err != nil {
		t.Fatal(err)
	}
	return f, q
}

func TestReport(t *testing.T) {
	f, q := receivedFixture(t, Options{})
	ctx := ctxT(t)
	rep, err := q.Report(ctx, f.base, f.tip)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.FastForward || rep.Base != f.base || rep.Tip != f.tip {
		t.Errorf("report header %+v", rep)
	}
	if len(rep.Commits) != 1 || rep.Commits[0].ID != f.tip || rep.Commits[0].Subject != "change things" ||
		rep.Commits[0].AuthorEmail != "test@example.com" || len(rep.Commits[0].Parents) != 1 || rep.Commits[0].Parents[0] != f.base ||
		rep.Commits[0].AuthorDate != "2023-11-14T22:13:20+00:00" {
		t.Errorf("commits %+v", rep.Commits)
	}
	files := map[string]FileChange{}
	for _, fc := range rep.Files {
		files[fc.Path] = fc
	}
	want := map[string]FileChange{
		"README.md":             {Path: "README.md", Added: 2, Removed: 1},
		"go.sum":                {Path: "go.sum", Added: 1, Lockfile: true},
		"web/package-lock.json": {Path: "web/package-lock.json", Added: 1, Lockfile: true},
		"blob.bin":              {Path: "blob.bin", Binary: true},
		"run.sh":                {Path: "run.sh", Added: 2},
		".gitattributes":        {Path: ".gitattributes", Added: 1},
		"new-name.txt":          {Path: "new-name.txt", OldPath: "old/name.txt"},
	}
	if len(files) != len(want) {
		t.Errorf("files %+v", rep.Files)
	}
	for p, w := range want {
		if files[p] != w {
			t.Errorf("file %s: %+v, want %+v", p, files[p], w)
		}
	}
	if strings.Join(rep.Lockfiles, ",") != "go.sum,web/package-lock.json" {
		t.Errorf("lockfiles %v", rep.Lockfiles)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}

	// Backwards is not a fast-forward and adds no commits; a new branch lists everything from the root.
	back, err := q.Report(ctx, f.tip, f.base)
	if err != nil || back.FastForward || len(back.Commits) != 0 || len(back.Files) != 7 {
		t.Errorf("reverse report %+v, %v", back, err)
	}
	nb, err := q.Report(ctx, strings.Repeat("0", 40), f.tip)
	if err != nil || !nb.FastForward || nb.Base != "" || len(nb.Commits) != 2 {
		t.Errorf("new-branch report %+v, %v", nb, err)
	}

	// Bad and missing ids.
	if _, err := q.Report(ctx, "HEAD", f.tip); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("symbolic base: %v", err)
	}
	if _, err := q.Report(ctx, f.base, strings.Repeat("1", 40)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing tip: %v", err)
	}

	// Limits: commit and file lists are truncated; output beyond MaxOutput is refused.
	small, err := (&Quarantine{dir: q.dir, gitDir: q.gitDir, r: q.r, opt: Options{MaxCommits: 1, MaxFiles: 2}.withDefaults(), log: q.log}).Report(ctx, "", f.tip)
	if err != nil || len(small.Commits) != 1 || !small.CommitsTruncated || len(small.Files) != 2 || !small.FilesTruncated {
		t.Errorf("truncated report %+v, %v", small, err)
	}
	tiny := &Quarantine{dir: q.dir, gitDir: q.gitDir, r: q.r, opt: Options{MaxOutput: 64, MaxPatchBytes: 64}.withDefaults(), log: q.log}
	if _, err := tiny.Report(ctx, f.base, f.tip); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("report over MaxOutput: %v", err)
	}
	if _, err := tiny.Patch(ctx, f.base, f.tip); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("patch over MaxPatchBytes: %v", err)
	}
}

// TestPatchApplies: the patch, applied to the base in a scratch repository, gives the tip's
// tree.
func TestPatchApplies(t *testing.T) {
	f, q := receivedFixture(t, Options{})
	r, err := q.Patch(ctxT(t), f.base, f.tip)
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := io.ReadAll(r)
	if !bytes.Contains(patch, []byte("GIT binary patch")) || !bytes.Contains(patch, []byte("rename from old/name.txt")) {
		t.Errorf("patch lacks the binary file or the rename:\n%s", patch)
	}
	dir := t.TempDir()
	tgit(t, dir, nil, "init", "-q", "--bare", "s.git")
	gd := dir + "/s.git"
	tgit(t, gd, nil, "fetch", "-q", f.remote, "main")
	tgit(t, gd, nil, "read-tree", f.base)
	tgit(t, gd, patch, "apply", "--cached", "--binary", "-")
	if got, want := tgit(t, gd, nil, "write-tree"), tgit(t, f.sandbox, nil, "rev-parse", f.tip+"^{tree}"); got != want {
		t.Errorf("patched tree %s, tip tree %s", got, want)
	}
}

// TestReportIgnoresMailmap: a .mailmap in the quarantine's HEAD (which a bare repository
// would read by default) cannot rename the authors a report shows.
func TestReportIgnoresMailmap(t *testing.T) {
	f, q := receivedFixture(t, Options{})
	ctx := ctxT(t)
	dir := t.TempDir()
	writeFile(t, dir+"/.mailmap", "Trusted Maintainer <boss@corp.example> Test <test@example.com>\n", 0o644)
	snap, err := q.CommitSnapshot(ctx, dir, "", CommitMeta{Name: "m", Email: "m@x", Message: "mailmap"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.run(ctx, invocation{args: []string{"update-ref", "refs/heads/master", snap.Commit}}); err != nil {
		t.Fatal(err)
	}
	rep, err := q.Report(ctx, f.base, f.tip)
	if err != nil {
		t.Fatal(err)
	}
	if c := rep.Commits[0]; c.AuthorName != "Test" || c.AuthorEmail != "test@example.com" || c.CommitterName != "Test" {
		t.Errorf("report shows %+v", c)
	}
	// Control: git's default in a bare repository does read HEAD:.mailmap.
	if got := tgit(t, q.GitDir(), nil, "log", "-1", "--format=%aN", f.tip); got != "Trusted Maintainer" {
		t.Errorf("control: default mailmap gives %q", got)
	}
	if err := q.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}
