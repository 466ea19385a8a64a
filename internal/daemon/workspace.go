package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/apiserver"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/gitignore"
	"github.com/moatdev/moat/internal/safegit"
	"github.com/moatdev/moat/internal/sandbox"
)

// workspaces answers `moat diff` and `moat export` (apiserver.Workspaces): a snapshot of a
// running sandbox's /workspace, committed on the commit its --repo layer was made from,
// in the sandbox's host-side quarantine (<data>/git/<id>/<hash>, removed with the
// sandbox), compared with that base, and on export written into the host repository as
// an agent/ branch by safegit.Export.
//
// Where the bytes come from: /workspace of the sandbox's root filesystem as mounted on the
// host while it runs (the merged overlay: deletions are seen, a whiteout is not a file),
// read through an os.Root (no link leads out) under the sandbox's lock. Git never runs on
// it. Base objects come from the host repository (packed by git running as its owner),
// never from the sandbox's /workspace/.git, which is not read at all.
//
// What is taken: every path tracked in the base commit (changed, deleted or not), and every
// other path no .gitignore of the workspace ignores (matched in Go, internal/gitignore), so
// node_modules and build outputs stay out as `git add -A` would leave them out; .git
// entries at any depth, sockets, devices and FIFOs never.
type workspaces struct {
	m         *sandbox.Manager
	gitDir    string // <data>/git
	protected *gitgate.PathMatcher
	audit     func(id, kind, detail string)
	log       *slog.Logger
	locks     sync.Map // sandbox id → *sync.Mutex: one diff or export of a sandbox at a time
	qmu       sync.Mutex
}

// exportRemote keys the quarantine of a sandbox's workspace (beside the git gate's, one
// per remote URL): a string no URL is.
const exportRemote = "moat-workspace:"

// workspaceTimeout bounds one diff or export (the sandbox's lock is held while its
// workspace is read).
const workspaceTimeout = 10 * time.Minute

func (w *workspaces) lock(id string) func() {
	v, _ := w.locks.LoadOrStore(id, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// origin is where a sandbox's workspace came from.
type origin struct {
	top  string // the host repository's top-level directory
	base string // the commit of the repository layer
}

// originOf checks that sandbox sb has a repository workspace and finds its origin: the
// base commit from the recorded layer id (repo-<sha256(top)>-<commit>) and the top-level
// directory at or above sb.Repo whose hash that id holds.
func originOf(sb *sandbox.Sandbox) (origin, error) {
	if sb.Repo == "" {
		return origin{}, fmt.Errorf("sandbox %s was not created with --repo: it has no repository workspace: %w", sb.ID, errdefs.ErrInvalidArgument)
	}
	if sb.RepoLayer == nil {
		return origin{}, fmt.Errorf("sandbox %s has no recorded repository layer (made by an older moat; stop and start it to record one, whose base is then the repository's HEAD): %w", sb.ID, errdefs.ErrConflict)
	}
	rest, ok := strings.CutPrefix(sb.RepoLayer.ID, "repo-")
	hash, base, ok2 := strings.Cut(rest, "-")
	if !ok || !ok2 || safegit.CheckObjectID(base) != nil {
		return origin{}, fmt.Errorf("sandbox %s: repository layer %q: %w", sb.ID, sb.RepoLayer.ID, errdefs.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(sb.Repo)
	if err != nil {
		return origin{}, err
	}
	dir, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return origin{}, fmt.Errorf("repository %s of sandbox %s: %w", sb.Repo, sb.ID, errdefs.ErrNotFound)
	}
	for d := dir; ; d = filepath.Dir(d) {
		sum := sha256.Sum256([]byte(d))
		if hex.EncodeToString(sum[:]) == hash {
			if _, err := os.Lstat(filepath.Join(d, ".git")); err != nil {
				return origin{}, fmt.Errorf("repository %s of sandbox %s has no .git any more: %w", d, sb.ID, errdefs.ErrNotFound)
			}
			return origin{top: d, base: base}, nil
		}
		if d == filepath.Dir(d) {
			return origin{}, fmt.Errorf("repository %s of sandbox %s: its top-level directory moved since the sandbox was made: %w", sb.Repo, sb.ID, errdefs.ErrNotFound)
		}
	}
}

// quarantine opens (creating on first use) the quarantine of sandbox id's workspace.
func (w *workspaces) quarantine(ctx context.Context, id, top string) (*safegit.Quarantine, error) {
	dir, err := safegit.Dir(w.gitDir, id, exportRemote+top)
	if err != nil {
		return nil, err
	}
	opt := safegit.Options{Logger: w.log.With("sandbox", id)}
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return nil, fmt.Errorf("quarantine of sandbox %s: %w", id, err)
		}
		return safegit.Create(ctx, dir, opt)
	}
	return safegit.Open(dir, opt)
}

// snap is one snapshot of a workspace.
type snap struct {
	origin
	parent string // the commit the snapshot was made on
	q      *safegit.Quarantine
	res    safegit.SnapshotResult
}

// snapshot commits sandbox id's /workspace on the commit parent(q, origin) returns (the
// base when parent is nil). when is the commit's date.
func (w *workspaces) snapshot(ctx context.Context, id string, when time.Time, parent func(*safegit.Quarantine, origin) (string, error)) (snap, error) {
	sb, err := w.m.Get(ctx, id)
	if err != nil {
		return snap{}, err
	}
	o, err := originOf(sb)
	if err != nil {
		return snap{}, err
	}
	q, err := w.quarantine(ctx, id, o.top)
	if err != nil {
		return snap{}, err
	}
	if err := q.FetchHostCommit(ctx, o.top, o.base); err != nil {
		return snap{}, fmt.Errorf("reading the base %s from %s: %w", o.base, o.top, err)
	}
	from := o.base
	if parent != nil {
		if from, err = parent(q, o); err != nil {
			return snap{}, err
		}
	}
	tracked, err := q.TrackedPaths(ctx, o.base)
	if err != nil {
		return snap{}, err
	}
	keep := keepFunc(tracked)
	meta := safegit.CommitMeta{
		Name:    "moat sandbox " + id,
		Email:   id + "@sandbox.moat.invalid",
		Message: fmt.Sprintf("Workspace of moat sandbox %s\n\nBase: %s\n", id, o.base),
		When:    when,
	}
	s := snap{origin: o, parent: from, q: q}
	err = w.m.WithRootfs(ctx, id, func(_ *sandbox.Sandbox, root *os.Root) error {
		fi, err := root.Lstat("workspace")
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("sandbox %s has no /workspace directory: %w", id, errdefs.ErrNotFound)
		}
		ws, err := root.OpenRoot("workspace")
		if err != nil {
			return fmt.Errorf("opening /workspace of sandbox %s: %w", id, err)
		}
		defer ws.Close()
		s.res, err = q.CommitSnapshotRoot(ctx, ws, from, meta, keep(ws))
		return err
	})
	if err != nil {
		return snap{}, err
	}
	return s, nil
}

// keepFunc returns, for a workspace root, the snapshot filter: a path tracked in the base
// (or a directory holding one) is always taken, anything else unless a .gitignore of the
// workspace ignores it.
func keepFunc(tracked []string) func(*os.Root) safegit.KeepFunc {
	files := make(map[string]bool, len(tracked))
	dirs := map[string]bool{}
	for _, p := range tracked {
		files[p] = true
		for d := filepath.Dir(p); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	return func(root *os.Root) safegit.KeepFunc {
		m := gitignore.NewMatcher(gitignore.RootReader(root))
		return func(p string, dir bool) bool {
			ignored := m.Ignored(p, dir)
			return !ignored || files[p] || (dir && dirs[p])
		}
	}
}

// protectedPaths returns the paths of paths the protected globs match; a path that is not
// a valid repository path counts as protected (with no glob).
func (w *workspaces) protectedPaths(paths []string) []v1.ProtectedPath {
	var out []v1.ProtectedPath
	for _, p := range paths {
		hits, err := w.protected.Match([]string{p})
		if err != nil {
			out = append(out, v1.ProtectedPath{Path: p})
			continue
		}
		for _, h := range hits {
			out = append(out, v1.ProtectedPath{Path: h.Path, Glob: h.Glob})
		}
	}
	return out
}

func snapshotInfo(r safegit.SnapshotResult) v1.WorkspaceSnapshot {
	return v1.WorkspaceSnapshot{Commit: r.Commit, Files: r.Files, Bytes: r.Bytes, Ignored: r.Ignored, Skipped: r.Skipped}
}

// Diff reports what sandbox id's /workspace changes against its base.
func (w *workspaces) Diff(ctx context.Context, id string) (v1.WorkspaceDiff, error) {
	ctx, cancel := context.WithTimeout(ctx, workspaceTimeout)
	defer cancel()
	unlock := w.lock(id)
	defer unlock()
	s, err := w.diffSnapshot(ctx, id)
	if err != nil {
		return v1.WorkspaceDiff{}, err
	}
	rep, err := s.q.Report(ctx, s.base, s.res.Commit)
	if err != nil {
		return v1.WorkspaceDiff{}, err
	}
	paths, err := s.q.ChangedPaths(ctx, s.base, s.res.Commit)
	if err != nil {
		return v1.WorkspaceDiff{}, err
	}
	return v1.WorkspaceDiff{Sandbox: id, Repo: s.top, Base: s.base, Snapshot: snapshotInfo(s.res), Report: apiserver.ToAPIReport(rep), Protected: w.protectedPaths(paths)}, nil
}

// Patch writes the patch from sandbox id's base to its /workspace (git diff format, binary
// included) to out.
func (w *workspaces) Patch(ctx context.Context, id string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, workspaceTimeout)
	defer cancel()
	unlock := w.lock(id)
	defer unlock()
	s, err := w.diffSnapshot(ctx, id)
	if err != nil {
		return err
	}
	r, err := s.q.Patch(ctx, s.base, s.res.Commit)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, r)
	return err
}

// diffSnapshot snapshots on the base with the sandbox's creation time as the date, so an
// unchanged workspace gives the same commit again (no new object per diff).
func (w *workspaces) diffSnapshot(ctx context.Context, id string) (snap, error) {
	sb, err := w.m.Get(ctx, id)
	if err != nil {
		return snap{}, err
	}
	return w.snapshot(ctx, id, sb.CreatedAt, nil)
}

// Export writes sandbox id's /workspace into its host repository as req.Branch (default
// agent/<id>): a commit whose tree is the workspace, on the branch's current commit when
// that is an earlier export of this sandbox (so a second export fast-forwards), else on
// the base. Refused: a branch outside agent/ (ErrInvalidArgument), protected paths changed
// since the base unless req.AllowProtected (ErrPermissionDenied, naming them), a branch
// that would be rewritten or is checked out (ErrConflict). Every outcome is an `export`
// event of the sandbox.
func (w *workspaces) Export(ctx context.Context, id string, req v1.ExportRequest) (res v1.ExportResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, workspaceTimeout)
	defer cancel()
	branch := req.Branch
	if branch == "" {
		branch = safegit.ExportPrefix + id
	}
	if err := safegit.CheckExportBranch(branch); err != nil {
		return res, err
	}
	unlock := w.lock(id)
	defer unlock()
	defer func() {
		if err != nil && !errdefs.IsNotFound(err) {
			w.audit(id, "export", fmt.Sprintf("refused: refs/heads/%s: %v", branch, err))
		}
	}()
	s, err := w.snapshot(ctx, id, time.Now(), func(q *safegit.Quarantine, o origin) (string, error) {
		cur, err := q.HostBranch(ctx, o.top, branch)
		if err != nil || cur == "" {
			return o.base, err
		}
		// An earlier export of this sandbox (its commit is in the quarantine, made on
		// the base): build on it. Anything else (the user moved the branch) stays for
		// safegit.Export to refuse as a rewrite.
		if ok, err := q.HasCommit(ctx, cur); err != nil || !ok {
			return o.base, err
		}
		if ok, err := q.IsAncestor(ctx, o.base, cur); err != nil || !ok {
			return o.base, err
		}
		return cur, nil
	})
	if err != nil {
		return res, err
	}
	commit := s.res.Commit
	// Nothing changed since the commit it was made on: that commit, not an empty one.
	if t1, err := s.q.TreeOf(ctx, commit); err == nil {
		if t0, err := s.q.TreeOf(ctx, s.parent); err == nil && t0 == t1 {
			commit = s.parent
		}
	}
	paths, err := s.q.ChangedPaths(ctx, s.base, commit)
	if err != nil {
		return res, err
	}
	hits := w.protectedPaths(paths)
	if len(hits) > 0 && !req.AllowProtected {
		var names []string
		for _, h := range hits {
			if h.Glob == "" {
				names = append(names, fmt.Sprintf("%q (not a valid repository path)", h.Path))
			} else {
				names = append(names, fmt.Sprintf("%q (protected by %q)", h.Path, h.Glob))
			}
		}
		return res, fmt.Errorf("the workspace changes protected or invalid paths: %s; nothing was exported (the operator may pass --allow-protected): %w", strings.Join(names, ", "), errdefs.ErrPermissionDenied)
	}
	ex, err := s.q.Export(ctx, s.top, commit, branch)
	if err != nil {
		return res, err
	}
	rep, err := s.q.Report(ctx, s.base, commit)
	if err != nil {
		return res, err
	}
	res = v1.ExportResult{Sandbox: id, Repo: s.top, Ref: ex.Ref, Old: ex.Old, New: ex.New, Unchanged: ex.Unchanged, Base: s.base, Report: apiserver.ToAPIReport(rep)}
	if len(hits) > 0 {
		res.Protected = hits
	}
	detail := fmt.Sprintf("%s %s..%s in %s (%d files changed since %s)", ex.Ref, short(ex.Old), short(ex.New), s.top, len(paths), short(s.base))
	if ex.Unchanged {
		detail += ", unchanged"
	}
	if len(hits) > 0 {
		detail += fmt.Sprintf(", %d protected paths allowed by the operator", len(hits))
	}
	w.audit(id, "export", detail)
	return res, nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	if id == "" {
		return "(new)"
	}
	return id
}
