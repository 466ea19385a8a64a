package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"github.com/spf13/pflag"

	"github.com/moatdev/moat/api/envd/filesystem"
	"github.com/moatdev/moat/internal/tarcopy"
	"github.com/moatdev/moat/sdk"
)

// fileFlags are run's and create's flags that put host files into the new sandbox:
// --upload and --repo-dirty.
type fileFlags struct {
	uploads   []string
	repoDirty bool

	parsed []uploadSpec
	dirty  *repoChanges // the --repo's uncommitted changes, when --repo-dirty copies them
}

func (f *fileFlags) register(fl *pflag.FlagSet) {
	fl.StringArrayVar(&f.uploads, "upload", nil, "copy the host file or directory `HOST_PATH:SANDBOX_PATH` into the sandbox before anything runs, as moat cp does (repeatable)")
	fl.BoolVar(&f.repoDirty, "repo-dirty", false, "with --repo, also copy the work tree's uncommitted changes (modified, staged, deleted and untracked files not ignored by git) into /workspace")
}

// prepare checks the flags before the sandbox is made: the --upload paths exist, and the
// --repo work tree (repo; "" none) is looked at for uncommitted changes: they are
// reported on stderr unless --repo-dirty will copy them.
func (f *fileFlags) prepare(ctx context.Context, repo string) error {
	var err error
	if f.parsed, err = parseUploads(f.uploads); err != nil {
		return err
	}
	if repo == "" {
		if f.repoDirty {
			return fmt.Errorf("--repo-dirty needs --repo")
		}
		return nil
	}
	ch, err := readRepoChanges(ctx, repo)
	if err != nil {
		// The daemon says what is wrong with the repository; the warning is a courtesy.
		return nil
	}
	switch {
	case ch.empty():
	case f.repoDirty:
		f.dirty = ch
	default:
		fmt.Fprintf(os.Stderr, "moat: warning: %s has %s; the sandbox gets the last commit only (commit them, or give --repo-dirty to copy them in)\n", termSafe(ch.top), ch.summary())
	}
	return nil
}

// apply puts the files into sandbox id: the uncommitted changes first, then the uploads.
func (f *fileFlags) apply(ctx context.Context, c *sdk.Client, id, user string) error {
	if f.dirty != nil {
		if err := f.dirty.apply(ctx, c, id, user); err != nil {
			return fmt.Errorf("--repo-dirty: %w", err)
		}
	}
	return upload(ctx, c, id, user, f.parsed)
}

// repoChanges are a git work tree's uncommitted changes against HEAD.
type repoChanges struct {
	top      string
	owner    *syscall.Credential // runs git as the work tree's owner when we are root; nil: as us
	modified []string            // tracked paths that differ from HEAD (staged or not), relative to top
	deleted  []string            // tracked paths gone from the work tree or the index
	added    []string            // untracked, not ignored
}

func (r *repoChanges) empty() bool {
	return len(r.modified)+len(r.deleted)+len(r.added) == 0
}

func (r *repoChanges) summary() string {
	var parts []string
	for _, p := range []struct {
		n    int
		what string
	}{{len(r.modified), "modified"}, {len(r.deleted), "deleted"}, {len(r.added), "untracked"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	return "uncommitted changes (" + strings.Join(parts, ", ") + " files)"
}

// readRepoChanges lists the uncommitted changes of the git work tree holding dir. git
// runs as the directory's owner when we are root (as the daemon's repository layer
// does), with the file-system monitor and hooks off, so nothing the repository's
// configuration names is run.
func readRepoChanges(ctx context.Context, dir string) (*repoChanges, error) {
	r := &repoChanges{}
	if os.Geteuid() == 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(dir, &st); err != nil {
			return nil, err
		}
		if st.Uid != 0 {
			r.owner = &syscall.Credential{Uid: st.Uid, Gid: st.Gid}
		}
	}
	top, err := r.git(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	r.top = strings.TrimSpace(string(top))
	changed, err := r.git(ctx, r.top, "diff", "--name-only", "-z", "--no-renames", "HEAD", "--")
	if err != nil {
		return nil, err
	}
	deleted, err := r.git(ctx, r.top, "diff", "--name-only", "-z", "--no-renames", "--diff-filter=D", "HEAD", "--")
	if err != nil {
		return nil, err
	}
	added, err := r.git(ctx, r.top, "ls-files", "-z", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	r.modified, r.deleted, r.added = classifyChanges(splitZ(changed), splitZ(deleted), splitZ(added))
	return r, nil
}

// classifyChanges sorts git's lists: changed (every path differing from HEAD), deleted
// (the deleted ones among them), added (untracked). A path staged as deleted but present
// in the work tree untracked is both deleted and added: the sandbox gets the work tree's.
func classifyChanges(changed, deleted, added []string) (modified, gone, untracked []string) {
	isDeleted := map[string]bool{}
	for _, p := range deleted {
		isDeleted[p] = true
	}
	for _, p := range changed {
		if !isDeleted[p] {
			modified = append(modified, p)
		}
	}
	gone = append(gone, deleted...)
	untracked = append(untracked, added...)
	sort.Strings(modified)
	sort.Strings(gone)
	sort.Strings(untracked)
	return modified, gone, untracked
}

// splitZ splits git's NUL-terminated output.
func splitZ(b []byte) []string {
	var out []string
	for _, p := range bytes.Split(b, []byte{0}) {
		if len(p) > 0 {
			out = append(out, string(p))
		}
	}
	return out
}

func (r *repoChanges) git(ctx context.Context, dir string, args ...string) ([]byte, error) {
	argv := append([]string{"-C", dir, "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "--no-optional-locks"}, args...)
	cmd := exec.CommandContext(ctx, "git", argv...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if r.owner != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.owner}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// apply copies the changes into /workspace of sandbox id: modified and untracked files
// (as the work tree has them, modes and symlinks kept) in one tar stream, then removes the
// deleted ones.
func (r *repoChanges) apply(ctx context.Context, c *sdk.Client, id, user string) error {
	files := append(append([]string{}, r.modified...), r.added...)
	if len(files) > 0 {
		root, err := os.OpenRoot(r.top)
		if err != nil {
			return err
		}
		defer root.Close()
		if _, err := c.WriteTar(ctx, id, "/workspace", user, true, treeReader(ctx, func(tw *tar.Writer) error {
			return tarcopy.WriteFiles(ctx, tw, root, files, nil)
		})); err != nil {
			return err
		}
	}
	fs := c.Filesystem(id, user)
	for _, p := range r.deleted {
		if _, err := fs.Remove(ctx, connect.NewRequest(&filesystem.RemoveRequest{Path: "/workspace/" + p})); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			return fmt.Errorf("removing %s: %w", p, err)
		}
	}
	return nil
}
