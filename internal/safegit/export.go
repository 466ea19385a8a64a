package safegit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/moatdev/moat/internal/errdefs"
)

// ExportPrefix is the branch namespace Export writes to.
const ExportPrefix = "agent/"

// ExportResult is what Export did.
type ExportResult struct {
	Ref       string `json:"ref"`           // refs/heads/agent/...
	Old       string `json:"old,omitempty"` // the branch before, "" if it was new
	New       string `json:"new"`
	Unchanged bool   `json:"unchanged,omitempty"` // the branch already was New
}

// CheckExportBranch accepts a branch name under agent/ ("agent/fix-1") that is a valid
// ref name. It is pure.
func CheckExportBranch(branch string) error {
	if !strings.HasPrefix(branch, ExportPrefix) || len(branch) == len(ExportPrefix) {
		return fmt.Errorf("branch %q: not under %s: %w", branch, ExportPrefix, errdefs.ErrInvalidArgument)
	}
	return CheckRefName("refs/heads/" + branch)
}

// Export writes commit (present in the quarantine) into the user's repository hostRepo (a
// work tree with .git, or a bare repository) as refs/heads/<branch>, branch under agent/.
//
// Only objects and that one ref change: nothing is checked out, HEAD, the index and the
// work tree are not touched, and no hook of the user's repository runs (git runs with
// core.hooksPath=/dev/null and the isolated environment; the user's repository config is
// read, as it is the user's). The objects are moved as a pack — `git pack-objects` in the
// quarantine piped into `git index-pack --strict --fix-thin` in the user's repository, so
// every object is fsck'd on the way in and no transport or upload-pack runs. When the
// daemon runs as root and the repository belongs to another user, the git processes that
// write into it run as that user.
//
// An existing branch is moved only forward (errdefs.ErrConflict for a rewrite; identical is
// fine and Unchanged), never a branch checked out in a work tree (errdefs.ErrConflict), and
// the update is a compare-and-swap against the value read.
func (q *Quarantine) Export(ctx context.Context, hostRepo, commit, branch string) (ExportResult, error) {
	if err := CheckExportBranch(branch); err != nil {
		return ExportResult{}, fmt.Errorf("export: %w", err)
	}
	ref := "refs/heads/" + branch
	res := ExportResult{Ref: ref, New: commit}
	if ok, err := q.HasCommit(ctx, commit); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("commit %s: %w", commit, errdefs.ErrNotFound)
		}
		return res, fmt.Errorf("export: %w", err)
	}
	h, err := q.hostRepo(hostRepo)
	if err != nil {
		return res, fmt.Errorf("export: %w", err)
	}

	// Where the branch is now, and whether a work tree has it checked out.
	out, err := h.run(ctx, invocation{args: []string{"for-each-ref", "--format=%(objectname) %(worktreepath)", "--end-of-options", ref}})
	if err != nil {
		return res, fmt.Errorf("export: %w", err)
	}
	if line := strings.TrimSpace(string(out)); line != "" {
		old, wt, _ := strings.Cut(line, " ")
		res.Old = old
		if wt != "" {
			return res, fmt.Errorf("export: %s is checked out in %s: %w", ref, wt, errdefs.ErrConflict)
		}
		if old == commit {
			res.Unchanged = true
			return res, nil
		}
	}

	if err := q.sendObjects(ctx, h, commit); err != nil {
		return res, fmt.Errorf("export: %w", err)
	}
	if res.Old != "" {
		_, err := h.run(ctx, invocation{args: []string{"merge-base", "--is-ancestor", res.Old, commit}, okCodes: []int{1}})
		var ec exitCode
		if errors.As(err, &ec) {
			return res, fmt.Errorf("export: %s would be rewritten (%s is not an ancestor of %s): %w", ref, res.Old, commit, errdefs.ErrConflict)
		}
		if err != nil {
			return res, fmt.Errorf("export: %w", err)
		}
	}
	old := res.Old
	if old == "" {
		old = strings.Repeat("0", len(commit))
	}
	if _, err := h.run(ctx, invocation{args: []string{"update-ref", "-m", "moat export", "--end-of-options", ref, commit, old}}); err != nil {
		return res, fmt.Errorf("export: %s changed meanwhile: %w (%w)", ref, err, errdefs.ErrConflict)
	}
	q.log.Info("exported", "repo", h.gitDir, "ref", ref, "old", res.Old, "new", commit)
	return res, nil
}

// hostGit runs git in the user's repository.
type hostGit struct {
	gitDir string
	cred   *syscall.Credential
	q      *Quarantine
}

func (h hostGit) run(ctx context.Context, inv invocation) ([]byte, error) {
	inv.gitDir = h.gitDir
	inv.cred = h.cred
	// The repository may belong to another user than the daemon's.
	inv.config = append(inv.config, "safe.directory="+h.gitDir)
	if inv.timeout == 0 {
		inv.timeout = h.q.opt.Timeout
	}
	return h.q.r.run(ctx, inv)
}

// hostRepo finds the git directory of the user's repository at path: path/.git (a
// directory, or a file "gitdir: X" of a linked work tree or submodule), or path itself
// when it is a bare repository.
func (q *Quarantine) hostRepo(path string) (hostGit, error) {
	if !filepath.IsAbs(path) {
		return hostGit{}, fmt.Errorf("repository %q: not absolute: %w", path, errdefs.ErrInvalidArgument)
	}
	gitDir := filepath.Join(path, ".git")
	st, err := os.Lstat(gitDir)
	switch {
	case err == nil && st.Mode().IsRegular():
		b, err := os.ReadFile(gitDir)
		if err != nil {
			return hostGit{}, err
		}
		d, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
		if !ok {
			return hostGit{}, fmt.Errorf("repository %s: bad .git file: %w", path, errdefs.ErrInvalidArgument)
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(path, d)
		}
		gitDir = d
	case err == nil && st.IsDir():
	case errors.Is(err, os.ErrNotExist):
		gitDir = path // bare
	default:
		return hostGit{}, fmt.Errorf("repository %s: %w", path, err)
	}
	st, err = os.Stat(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return hostGit{}, fmt.Errorf("repository %s: no git directory: %w", path, errdefs.ErrNotFound)
	}
	// A .git file naming another user's git directory must not make moat write there as
	// that user: the work tree and its git directory must have one owner.
	if top, err := os.Stat(path); err != nil {
		return hostGit{}, fmt.Errorf("repository %s: %w", path, err)
	} else if a, b := top.Sys().(*syscall.Stat_t), st.Sys().(*syscall.Stat_t); a != nil && b != nil && a.Uid != b.Uid {
		return hostGit{}, fmt.Errorf("repository %s: its git directory %s belongs to uid %d, the directory to uid %d: %w", path, gitDir, b.Uid, a.Uid, errdefs.ErrPermissionDenied)
	}
	h := hostGit{gitDir: gitDir, q: q}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && sys.Uid != 0 {
		h.cred = &syscall.Credential{Uid: sys.Uid, Gid: sys.Gid, NoSetGroups: true}
	}
	return h, nil
}

// sendObjects copies what commit needs and the user's repository lacks: pack-objects in
// the quarantine (thin, excluding every tip of the user's repository the quarantine also
// has) piped into index-pack --strict --fix-thin in the user's repository.
func (q *Quarantine) sendObjects(ctx context.Context, h hostGit, commit string) error {
	out, err := h.run(ctx, invocation{args: []string{"for-each-ref", "--format=%(objectname)"}, maxOut: q.opt.MaxOutput})
	if err != nil {
		return err
	}
	haves, err := q.present(ctx, strings.Fields(string(out)))
	if err != nil {
		return err
	}
	var revs bytes.Buffer
	revs.WriteString(commit + "\n--not\n")
	for _, id := range haves {
		revs.WriteString(id + "\n")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	packErr := make(chan error, 1)
	go func() {
		_, err := q.run(ctx, invocation{args: []string{"pack-objects", "--revs", "--thin", "--stdout", "--quiet"}, stdin: &revs, stdout: pw, maxOut: q.opt.MaxPackBytes})
		pw.CloseWithError(err)
		packErr <- err
	}()
	_, idxErr := h.run(ctx, invocation{args: []string{"index-pack", "--stdin", "--strict", "--fix-thin"}, stdin: pr})
	pr.CloseWithError(errors.New("index-pack ended"))
	if idxErr != nil {
		cancel()
	}
	if err := <-packErr; err != nil {
		return fmt.Errorf("packing %s: %w", commit, err)
	}
	if idxErr != nil {
		return fmt.Errorf("indexing %s: %w", commit, idxErr)
	}
	return nil
}

// present returns the ids of ids that are objects in the quarantine.
func (q *Quarantine) present(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var in bytes.Buffer
	for _, id := range ids {
		if CheckObjectID(id) == nil {
			in.WriteString(id + "\n")
		}
	}
	out, err := q.run(ctx, invocation{args: []string{"cat-file", "--batch-check=%(objectname) %(objecttype)"}, stdin: &in})
	if err != nil {
		return nil, err
	}
	var have []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if id, typ, ok := strings.Cut(sc.Text(), " "); ok && typ == "commit" {
			have = append(have, id)
		}
	}
	return have, nil
}
