package safegit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// canaries is a directory where every hostile hook, filter, driver and helper of a test
// leaves a file when it runs. Nothing may ever appear there.
type canaries struct{ dir, bin string }

func newCanaries(t *testing.T) canaries {
	root := t.TempDir()
	c := canaries{dir: filepath.Join(root, "fired"), bin: filepath.Join(root, "bin")}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// script returns a canary program: it records name in the canary directory and passes
// its standard input through (so a filter "works").
func (c canaries) script(t *testing.T, name string) string {
	p := filepath.Join(c.bin, name)
	writeFile(t, p, fmt.Sprintf("#!/bin/sh\necho \"$0 $*\" > %s/%s\ncat 2>/dev/null\nexit 0\n", c.dir, name), 0o755)
	return p
}

func (c canaries) fired(t *testing.T) []string {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

var hookNames = []string{"pre-receive", "update", "post-receive", "post-update", "reference-transaction",
	"post-checkout", "post-merge", "pre-commit", "post-commit", "pre-push", "push-to-checkout", "post-index-change", "fsmonitor-watchman", "pre-auto-gc"}

// hostileConfig is git config that runs a canary from every place git could run a program
// or read a file the attacker chose. prefix names the canaries.
func hostileConfig(t *testing.T, c canaries, prefix string) string {
	s := func(n string) string { return c.script(t, prefix+"-"+n) }
	return fmt.Sprintf(`[core]
	fsmonitor = %s
	sshCommand = %s
	askPass = %s
	pager = %s
	editor = %s
	hooksPath = %s
	alternateRefsCommand = %s
	gitProxy = %s
[filter "x"]
	clean = %s
	smudge = %s
	process = %s
	required = true
[diff "x"]
	textconv = %s
	command = %s
[diff]
	external = %s
[uploadpack]
	packObjectsHook = %s
[credential]
	helper = !%s
[gpg]
	program = %s
[log]
	showSignature = true
[receive]
	procReceiveRefs = refs
`, s("fsmonitor"), s("sshcommand"), s("askpass"), s("pager"), s("editor"), filepath.Join(c.bin, prefix+"-hooks"),
		s("alternaterefs"), s("gitproxy"), s("filter-clean"), s("filter-smudge"), s("filter-process"),
		s("textconv"), s("diffcommand"), s("diffexternal"), s("packobjectshook"), s("credential"), s("gpg"))
}

// installHooks puts an executable canary for every hook name in dir.
func installHooks(t *testing.T, c canaries, dir, prefix string) {
	for _, h := range hookNames {
		writeFile(t, filepath.Join(dir, h), fmt.Sprintf("#!/bin/sh\necho \"$0\" > %s/%s-hook-%s\ncat >/dev/null 2>&1\nexit 0\n", c.dir, prefix, h), 0o755)
	}
}

// makeHostile turns a repository's git directory into the attacker's: a config with every
// program-running key, including through include.path, and every hook.
func makeHostile(t *testing.T, c canaries, gitDir, prefix string) {
	inc := filepath.Join(c.bin, prefix+"-include.cfg")
	writeFile(t, inc, hostileConfig(t, c, prefix+"-inc"), 0o644)
	cfg := "[core]\n\trepositoryformatversion = 0\n\tbare = false\n" + hostileConfig(t, c, prefix) +
		"[include]\n\tpath = " + inc + "\n[includeIf \"gitdir:/\"]\n\tpath = " + inc + "\n"
	writeFile(t, filepath.Join(gitDir, "config"), cfg, 0o644)
	installHooks(t, c, filepath.Join(gitDir, "hooks"), prefix)
	installHooks(t, c, filepath.Join(c.bin, prefix+"-hooks"), prefix+"-hookspath")
	installHooks(t, c, filepath.Join(c.bin, prefix+"-inc-hooks"), prefix+"-inc-hookspath")
}

// TestHostileSandboxRepository: a sandbox's repository carries every way git can be made
// to run a program — config with fsmonitor, ssh, askpass, pager, filters, textconv,
// external diff, pack-objects hook, credential helper, gpg, all again through include.path
// and includeIf, hooks in .git/hooks and in a hooksPath, and a .gitattributes in the tree
// that routes every file through the filter and diff driver. Its objects are pushed into a
// quarantine, reported on, patched, snapshotted from its work tree (with the hostile .git
// inside) and exported into a host repository whose own config defines the same filter and
// diff driver and whose hooks are canaries too. No canary fires, and the host repository's
// HEAD, branches, index and work tree are byte-for-byte unchanged.
func TestHostileSandboxRepository(t *testing.T) {
	ctx := ctxT(t)
	c := newCanaries(t)
	f := newFixture(t)

	// The user's repository: a clone of the remote with main checked out, with its own
	// filter/diff config and hooks as canaries (they would fire if the sandbox's
	// .gitattributes were applied or a hook ran).
	host := filepath.Join(t.TempDir(), "host")
	tgit(t, filepath.Dir(host), nil, "clone", "-q", f.remote, host)
	writeFile(t, filepath.Join(host, "untracked.txt"), "user's work in progress\n", 0o644)
	writeFile(t, filepath.Join(host, "README.md"), "user's edit\n", 0o644)
	tgit(t, host, nil, "add", "README.md") // a staged change: the index is not the tree
	hostCfg, err := os.ReadFile(filepath.Join(host, ".git/config"))
	if err != nil {
		t.Fatal(err)
	}
	s := func(n string) string { return c.script(t, "host-"+n) }
	writeFile(t, filepath.Join(host, ".git/config"), string(hostCfg)+fmt.Sprintf(
		"[filter \"x\"]\n\tclean = %s\n\tsmudge = %s\n\tprocess = %s\n[diff \"x\"]\n\ttextconv = %s\n[core]\n\tfsmonitor = %s\n",
		s("filter-clean"), s("filter-smudge"), s("filter-process"), s("textconv"), s("fsmonitor")), 0o644)
	installHooks(t, c, filepath.Join(host, ".git/hooks"), "host")

	// The sandbox turns hostile after making its commits.
	makeHostile(t, c, filepath.Join(f.sandbox, ".git"), "sandbox")
	writeFile(t, filepath.Join(f.sandbox, "snapshot-only.txt"), "new in the work tree\n", 0o644)

	before := map[string]string{
		"tree":  treeHash(t, host, ".git"),
		"git":   treeHash(t, filepath.Join(host, ".git"), "objects", "logs", "refs"),
		"refs":  tgit(t, host, nil, "for-each-ref"),
		"head":  readFile(t, filepath.Join(host, ".git/HEAD")),
		"index": readFile(t, filepath.Join(host, ".git/index")),
	}

	q := testQuarantine(t, Options{})
	if err := q.FetchPath(ctx, f.remote, []string{"refs/heads/main"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ReceivePack(ctx, bytes.NewReader(f.thinPack)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Report(ctx, f.base, f.tip); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Patch(ctx, f.base, f.tip); err != nil {
		t.Fatal(err)
	}
	snap, err := q.CommitSnapshot(ctx, f.sandbox, f.base, CommitMeta{Name: "moat", Email: "moat@localhost", Message: "workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Report(ctx, f.base, snap.Commit); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Export(ctx, host, f.tip, "agent/push"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Export(ctx, host, snap.Commit, "agent/workspace"); err != nil {
		t.Fatal(err)
	}

	if fired := c.fired(t); len(fired) != 0 {
		t.Errorf("canaries fired: %v", fired)
	}
	after := map[string]string{
		"tree":  treeHash(t, host, ".git"),
		"git":   treeHash(t, filepath.Join(host, ".git"), "objects", "logs", "refs"),
		"refs":  withoutAgentRefs(tgit(t, host, nil, "for-each-ref")),
		"head":  readFile(t, filepath.Join(host, ".git/HEAD")),
		"index": readFile(t, filepath.Join(host, ".git/index")),
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("host repository's %s changed by export", k)
		}
	}
	if got := tgit(t, host, nil, "rev-parse", "refs/heads/agent/push", "refs/heads/agent/workspace"); got != f.tip+"\n"+snap.Commit {
		t.Errorf("exported branches: %s", got)
	}
	// The snapshot holds the work tree, not the hostile .git.
	names := tgit(t, host, nil, "ls-tree", "-r", "--name-only", snap.Commit)
	if strings.Contains(names, ".git/") || !strings.Contains(names, "snapshot-only.txt") || !strings.Contains(names, ".gitattributes") {
		t.Errorf("snapshot tree:\n%s", names)
	}
	tgit(t, host, nil, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "fsck", "--strict", "--no-dangling")

	// Control: the canaries are live — plain git in the hostile sandbox fires them.
	cmd := exec.Command("git", "-C", f.sandbox, "status")
	cmd.Env = testEnv(t)
	_ = cmd.Run()
	// git add of a new file runs the clean filter whatever the timestamps (status alone
	// hashes only files whose stat data looks changed, so it fires the filter by timing).
	if err := os.WriteFile(filepath.Join(f.sandbox, "control.txt"), []byte("control\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command("git", "-C", f.sandbox, "add", "control.txt")
	cmd.Env = testEnv(t)
	_ = cmd.Run()
	cmd = exec.Command("git", "-C", f.sandbox, "commit", "-q", "--allow-empty", "-m", "x")
	cmd.Env = testEnv(t)
	_ = cmd.Run()
	if fired := strings.Join(c.fired(t), " "); !strings.Contains(fired, "fsmonitor") || !strings.Contains(fired, "filter") {
		t.Errorf("control: plain git in the hostile repository fired only %q", fired)
	}
}

func withoutAgentRefs(refs string) string {
	var keep []string
	for _, l := range strings.Split(refs, "\n") {
		if !strings.Contains(l, "\trefs/heads/agent/") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestExportRules(t *testing.T) {
	f, q := receivedFixture(t, Options{})
	ctx := ctxT(t)
	host := filepath.Join(t.TempDir(), "host")
	tgit(t, filepath.Dir(host), nil, "clone", "-q", f.remote, host)

	// A bare host repository works too, and exporting the same commit twice is a no-op.
	bare := filepath.Join(t.TempDir(), "bare.git")
	tgit(t, filepath.Dir(bare), nil, "clone", "-q", "--bare", f.remote, bare)
	if res, err := q.Export(ctx, bare, f.tip, "agent/a"); err != nil || res.Unchanged || res.Old != "" {
		t.Fatalf("export to bare: %+v, %v", res, err)
	}

	if _, err := q.Export(ctx, host, f.tip, "agent/a"); err != nil {
		t.Fatal(err)
	}
	if res, err := q.Export(ctx, host, f.tip, "agent/a"); err != nil || !res.Unchanged {
		t.Errorf("identical export: %+v, %v", res, err)
	}
	// Moving agent/a back to base rewrites it: refused.
	if _, err := q.Export(ctx, host, f.base, "agent/a"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("non-fast-forward export: %v", err)
	}
	// A diverging snapshot commit is refused too; forward is fine.
	snapDir := t.TempDir()
	writeFile(t, filepath.Join(snapDir, "x"), "x\n", 0o644)
	snap, err := q.CommitSnapshot(ctx, snapDir, f.base, CommitMeta{Name: "m", Email: "m@x", Message: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Export(ctx, host, snap.Commit, "agent/a"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("diverging export: %v", err)
	}
	fwd, err := q.CommitSnapshot(ctx, snapDir, f.tip, CommitMeta{Name: "m", Email: "m@x", Message: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := q.Export(ctx, host, fwd.Commit, "agent/a"); err != nil || res.Old != f.tip {
		t.Errorf("fast-forward export: %+v, %v", res, err)
	}
	if got := tgit(t, host, nil, "rev-parse", "agent/a"); got != fwd.Commit {
		t.Errorf("agent/a = %s", got)
	}

	// A branch checked out in a work tree is never moved.
	tgit(t, host, nil, "checkout", "-q", "-b", "agent/mine")
	if _, err := q.Export(ctx, host, f.tip, "agent/mine"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("export to the checked-out branch: %v", err)
	}
	// Through a linked work tree (.git is a file): its branch is refused, others land in the
	// shared refs.
	linked := filepath.Join(t.TempDir(), "linked")
	tgit(t, host, nil, "worktree", "add", "-q", "-b", "agent/linked", linked, "main")
	if _, err := q.Export(ctx, host, f.tip, "agent/linked"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("export to a branch checked out in a linked work tree: %v", err)
	}
	if _, err := q.Export(ctx, linked, f.tip, "agent/via-linked"); err != nil {
		t.Errorf("export through a linked work tree: %v", err)
	} else if got := tgit(t, host, nil, "rev-parse", "agent/via-linked"); got != f.tip {
		t.Errorf("agent/via-linked = %s", got)
	}

	// Names outside agent/, bad ids, missing commits, a directory that is no repository.
	for _, b := range []string{"main", "agent/", "agent/../main", "refs/heads/agent/x", "agent/x.lock"} {
		if _, err := q.Export(ctx, host, f.tip, b); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("export to %q: %v", b, err)
		}
	}
	if _, err := q.Export(ctx, host, strings.Repeat("2", 40), "agent/z"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("export of a missing commit: %v", err)
	}
	if _, err := q.Export(ctx, t.TempDir(), f.tip, "agent/z"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("export into a non-repository: %v", err)
	}
}

// TestExportAsOwner: when the daemon is root and the user's repository is another user's,
// the objects and the ref Export writes belong to that user (the git processes writing
// into the repository ran as its owner), so the user can still gc and delete them.
func TestExportAsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	f, q := receivedFixture(t, Options{})
	ctx := ctxT(t)
	tmp := t.TempDir()
	// Let the other user reach its repository inside the test's private temp directory.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	host := filepath.Join(tmp, "host.git")
	tgit(t, tmp, nil, "clone", "-q", "--bare", f.remote, host)
	const uid, gid = 65534, 65534
	if err := filepath.Walk(host, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Export(ctx, host, f.tip, "agent/owned"); err != nil {
		t.Fatal(err)
	}
	err := filepath.Walk(host, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid != uid {
			t.Errorf("%s is owned by uid %d", p, st.Uid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tgit(t, host, nil, "-c", "safe.directory=*", "rev-parse", "refs/heads/agent/owned"); got != f.tip {
		t.Errorf("agent/owned = %s", got)
	}
}

// TestNoHooksInQuarantine: even hooks placed in the quarantine itself (which only moat can
// write) never run: every git process has core.hooksPath=/dev/null.
func TestNoHooksInQuarantine(t *testing.T) {
	ctx := ctxT(t)
	c := newCanaries(t)
	f := newFixture(t)
	q := testQuarantine(t, Options{})
	installHooks(t, c, filepath.Join(q.GitDir(), "hooks"), "quarantine")
	if err := q.FetchPath(ctx, f.remote, []string{"refs/heads/main"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ReceivePack(ctx, bytes.NewReader(f.thinPack)); err != nil {
		t.Fatal(err)
	}
	if _, err := q.CommitSnapshot(ctx, f.sandbox, f.tip, CommitMeta{Name: "m", Email: "m@x", Message: "m"}); err != nil {
		t.Fatal(err)
	}
	if fired := c.fired(t); len(fired) != 0 {
		t.Errorf("quarantine hooks ran: %v", fired)
	}
	// Control: the hooks are live — git told to use them (the quarantine's own config also
	// says /dev/null) runs them on a ref update.
	tgit(t, q.GitDir(), nil, "-c", "core.hooksPath="+filepath.Join(q.GitDir(), "hooks"), "update-ref", "refs/heads/x", f.tip)
	if fired := strings.Join(c.fired(t), " "); !strings.Contains(fired, "reference-transaction") {
		t.Errorf("control: plain git ran %q", fired)
	}
}
