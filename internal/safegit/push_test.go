package safegit

import (
	"errors"
	"slices"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// TestPushHelpers: ChangedPaths lists both sides of a rename and every other change,
// bounded by MaxFiles; IsAncestor answers both ways; ResolveRef finds refs and says ""
// for missing ones; FetchHTTP refuses URLs that carry credentials or other schemes.
func TestPushHelpers(t *testing.T) {
	f, q := receivedFixture(t, Options{})
	ctx := ctxT(t)
	paths, err := q.ChangedPaths(ctx, f.base, f.tip)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "go.sum", "web/package-lock.json", "blob.bin", "run.sh", ".gitattributes", "new-name.txt", "old/name.txt"} {
		if !slices.Contains(paths, want) {
			t.Errorf("changed paths %q lack %q", paths, want)
		}
	}
	if all, err := q.ChangedPaths(ctx, "", f.tip); err != nil || len(all) < len(paths)-1 {
		t.Errorf("paths from the empty tree: %q, %v", all, err)
	}
	small := &Quarantine{dir: q.dir, gitDir: q.gitDir, r: q.r, opt: q.opt, log: q.log}
	small.opt.MaxFiles = 2
	if _, err := small.ChangedPaths(ctx, f.base, f.tip); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("over MaxFiles: %v", err)
	}
	if ok, err := q.IsAncestor(ctx, f.base, f.tip); !ok || err != nil {
		t.Errorf("base is an ancestor of tip: %v %v", ok, err)
	}
	if ok, err := q.IsAncestor(ctx, f.tip, f.base); ok || err != nil {
		t.Errorf("tip is not an ancestor of base: %v %v", ok, err)
	}
	if id, err := q.ResolveRef(ctx, RemoteHEAD); id != "" || err != nil {
		t.Errorf("missing ref: %q %v", id, err)
	}
	if _, err := q.ResolveRef(ctx, "HEAD"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ResolveRef(HEAD): %v", err)
	}
	for _, u := range []string{"https://user:pw@example.test/r.git", "file:///tmp/r.git", "ext::sh -c x", "-https://x/r.git", "http:///r.git"} {
		if err := q.FetchHTTP(ctx, u, "", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("FetchHTTP(%q): %v, want invalid argument", u, err)
		}
	}
	if err := q.FetchHTTP(ctx, "http://127.0.0.1:1/r.git", "", []string{"refs/tags/v1"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("FetchHTTP of a tag: %v", err)
	}
	if err := q.FetchHTTP(ctx, "http://127.0.0.1:1/r.git", "X-A: b\r\nX-C: d", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("FetchHTTP with a header of two lines: %v", err)
	}
}
