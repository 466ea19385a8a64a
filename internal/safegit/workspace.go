package safegit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// FetchHostCommit copies commit and its history from the user's repository hostRepo (as
// Export finds it) into the quarantine and keeps it as refs/moat/base/<commit>. git in the
// user's repository runs as the repository's owner (like Export) and only packs
// (`pack-objects --revs`, no upload-pack, no transport); the quarantine indexes the pack
// with `index-pack --strict`, so every object is fsck'd. A commit the repository does not
// have is errdefs.ErrNotFound; a pack over MaxPackBytes errdefs.ErrResourceExhausted.
// Nothing is done when the quarantine has the commit already.
func (q *Quarantine) FetchHostCommit(ctx context.Context, hostRepo, commit string) error {
	if err := CheckObjectID(commit); err != nil {
		return fmt.Errorf("fetching %s: %w", commit, err)
	}
	if ok, err := q.HasCommit(ctx, commit); err != nil {
		return err
	} else if ok {
		return nil
	}
	h, err := q.hostRepo(hostRepo)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", commit, err)
	}
	out, err := h.run(ctx, invocation{args: []string{"cat-file", "-t", commit}, okCodes: []int{1, 128}})
	var ec exitCode
	if errors.As(err, &ec) || (err == nil && strings.TrimSpace(string(out)) != "commit") {
		return fmt.Errorf("commit %s is not in %s (was the branch rewritten and collected?): %w", commit, hostRepo, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("fetching %s: %w", commit, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	packErr := make(chan error, 1)
	go func() {
		_, err := h.run(ctx, invocation{args: []string{"pack-objects", "--revs", "--stdout", "--quiet"}, stdin: strings.NewReader(commit + "\n"), stdout: pw, maxOut: q.opt.MaxPackBytes})
		pw.CloseWithError(err)
		packErr <- err
	}()
	_, idxErr := q.run(ctx, invocation{args: []string{"index-pack", "--stdin", "--strict"}, stdin: pr})
	pr.CloseWithError(errors.New("index-pack ended"))
	if idxErr != nil {
		cancel()
	}
	if err := <-packErr; err != nil {
		return fmt.Errorf("packing %s in %s: %w", commit, hostRepo, err)
	}
	if idxErr != nil {
		return fmt.Errorf("indexing %s: %w", commit, idxErr)
	}
	if _, err := q.run(ctx, invocation{args: []string{"update-ref", "refs/moat/base/" + commit, commit}}); err != nil {
		return fmt.Errorf("fetching %s: %w", commit, err)
	}
	return nil
}

// TrackedPaths returns every path of commit's tree (files, links and submodule entries;
// not directories), as git stores them.
func (q *Quarantine) TrackedPaths(ctx context.Context, commit string) ([]string, error) {
	if err := CheckObjectID(commit); err != nil {
		return nil, err
	}
	out, err := q.run(ctx, invocation{args: []string{"ls-tree", "-r", "-z", "--name-only", "--full-tree", "--end-of-options", commit}})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", commit, err)
	}
	var paths []string
	for p := range bytes.SplitSeq(out, []byte{0}) {
		if len(p) > 0 {
			paths = append(paths, string(p))
		}
	}
	return paths, nil
}

// TreeOf returns the tree id of commit.
func (q *Quarantine) TreeOf(ctx context.Context, commit string) (string, error) {
	if err := CheckObjectID(commit); err != nil {
		return "", err
	}
	out, err := q.run(ctx, invocation{args: []string{"rev-parse", "--verify", "--end-of-options", commit + "^{tree}"}})
	if err != nil {
		return "", fmt.Errorf("tree of %s: %w", commit, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// HostBranch returns the commit refs/heads/<branch> of the user's repository hostRepo
// points at ("" when there is no such branch). git runs as the repository's owner.
func (q *Quarantine) HostBranch(ctx context.Context, hostRepo, branch string) (string, error) {
	if err := CheckExportBranch(branch); err != nil {
		return "", err
	}
	h, err := q.hostRepo(hostRepo)
	if err != nil {
		return "", err
	}
	out, err := h.run(ctx, invocation{args: []string{"for-each-ref", "--format=%(objectname)", "--end-of-options", "refs/heads/" + branch}})
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(out))
	if id != "" {
		if err := CheckObjectID(id); err != nil {
			return "", err
		}
	}
	return id, nil
}
