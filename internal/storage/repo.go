package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

var commitRE = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)

// RepoLayer returns the layer layers/repo-<sha256(path)>-<commit> holding, at /workspace, a
// git clone of the repository that contains dir, checked out at its HEAD commit (on HEAD's
// branch, or detached), owned by the sandbox's user (uid/gid 1000). Only committed work is
// included: uncommitted changes and untracked files are not. The clone's origin is the
// source repository's origin URL, if it has one.
//
// The first call for a commit builds the layer; later calls return it at once. The source
// repository is read only by git processes running as the directory's owner, which hand a
// bundle to the daemon: the daemon never runs git on files a user controls as root. dir
// that does not exist gives ErrNotFound; one that is not in a git work tree, or a
// repository without commits, ErrInvalidArgument.
func (s *Store) RepoLayer(ctx context.Context, dir string) (sandbox.Layer, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return sandbox.Layer{}, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return sandbox.Layer{}, fmt.Errorf("repository %s: %w", dir, errdefs.ErrNotFound)
	}
	if err != nil {
		return sandbox.Layer{}, err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return sandbox.Layer{}, err
	}
	if !fi.IsDir() {
		return sandbox.Layer{}, fmt.Errorf("repository %s is not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	st := fi.Sys().(*syscall.Stat_t)
	src := gitAs{dir: real, uid: st.Uid, gid: st.Gid}
	top, err := src.output(ctx, "rev-parse", "--show-toplevel")
	if err != nil {
		return sandbox.Layer{}, fmt.Errorf("%s is not in a git work tree: %v: %w", dir, err, errdefs.ErrInvalidArgument)
	}
	commit, err := src.output(ctx, "rev-parse", "--verify", "--end-of-options", "HEAD^{commit}")
	if err != nil || !commitRE.MatchString(commit) {
		return sandbox.Layer{}, fmt.Errorf("repository %s has no commit at HEAD: %w", top, errdefs.ErrInvalidArgument)
	}
	sum := sha256.Sum256([]byte(top))
	id := "repo-" + hex.EncodeToString(sum[:]) + "-" + commit
	layer := sandbox.Layer{ID: id, Path: s.layerPath(id)}
	if _, err := s.layers.Lstat(id); err == nil {
		return layer, nil
	}

	unlock, err := s.locks.lock(ctx, id)
	if err != nil {
		return sandbox.Layer{}, err
	}
	defer unlock()
	if _, err := s.layers.Lstat(id); err == nil {
		return layer, nil // built while we waited
	}
	if err := s.roomForLayer("the layer of repository " + top); err != nil {
		return sandbox.Layer{}, err
	}
	s.mark(id)
	defer s.unmark(id)
	if err := s.buildRepoLayer(ctx, src, top, commit, id); err != nil {
		return sandbox.Layer{}, fmt.Errorf("copying repository %s at %s: %w", top, commit[:12], err)
	}
	s.log.Info("built repository layer", "repo", top, "commit", commit, "layer", id)
	return layer, nil
}

func (s *Store) buildRepoLayer(ctx context.Context, src gitAs, top, commit, id string) error {
	tmp, tmpPath, done, err := s.newTemp("repo")
	if err != nil {
		return err
	}
	defer done()
	src.dir = top
	branch, _ := src.output(ctx, "symbolic-ref", "-q", "--short", "HEAD")
	origin, _ := src.output(ctx, "config", "--get", "remote.origin.url")
	refs := []string{"HEAD"}
	if branch != "" {
		refs = append(refs, "refs/heads/"+branch)
	}

	// The owner's git writes a bundle to our pipe; only the daemon writes files.
	bundle := filepath.Join(tmpPath, "repo.bundle")
	f, err := s.layers.OpenFile(tmp+"/repo.bundle", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = src.run(ctx, f, append([]string{"bundle", "create", "--quiet", "-"}, refs...)...)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bundling: %w", err)
	}

	ws := filepath.Join(tmpPath, "workspace")
	local := gitAs{dir: tmpPath, root: true}
	args := []string{"clone", "--quiet", "--no-hardlinks"}
	if branch != "" {
		args = append(args, "--branch", branch)
	}
	if err := local.run(ctx, nil, append(args, "--end-of-options", bundle, ws)...); err != nil {
		return fmt.Errorf("cloning: %w", err)
	}
	local.dir = ws
	head, err := local.output(ctx, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	if head != commit {
		return fmt.Errorf("HEAD moved to %s while copying; try again: %w", head, errdefs.ErrConflict)
	}
	if origin != "" {
		err = local.run(ctx, nil, "remote", "set-url", "origin", "--", origin)
	} else {
		err = local.run(ctx, nil, "remote", "remove", "origin")
	}
	if err != nil {
		return err
	}
	if err := s.layers.Remove(tmp + "/repo.bundle"); err != nil {
		return err
	}
	// Everything belongs to the sandbox's user. Nobody else can reach this directory, so
	// walking it by path is race-free.
	err = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, userUID, userUID)
	})
	if err != nil {
		return err
	}
	if err := os.Chmod(ws, 0o755); err != nil {
		return err
	}
	return s.commitLayer(tmp, id)
}

// gitAs runs git in dir, as uid:gid unless root is set.
type gitAs struct {
	dir      string
	uid, gid uint32
	root     bool
}

func (g gitAs) command(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"}, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Dir = g.dir
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/nonexistent",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if !g.root && g.uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: g.uid, Gid: g.gid, Groups: []uint32{}}
	}
	return cmd
}

// run runs git with stdout going to out (discarded when nil).
func (g gitAs) run(ctx context.Context, out *os.File, args ...string) error {
	cmd := g.command(ctx, args...)
	var stderr bytes.Buffer
	if out != nil {
		cmd.Stdout = out
	}
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// output runs git and returns its trimmed standard output.
func (g gitAs) output(ctx context.Context, args ...string) (string, error) {
	cmd := g.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("git not found: %w", errdefs.ErrUnavailable)
		}
		return "", fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}
