package daemon_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// userRepo is a host repository owned by a non-root user (65534), as a developer's
// checkout would be, with hooks and an fsmonitor that touch a canary if anything runs them.
type userRepo struct {
	t      *testing.T
	dir    string
	canary string // directory the canary script writes fired-<what> into
	fire   string // the canary script
	base   string
}

const repoUID = 65534

func newUserRepo(t *testing.T) *userRepo {
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &userRepo{t: t, dir: filepath.Join(tmp, "repo"), canary: filepath.Join(tmp, "canary")}
	r.fire = filepath.Join(r.canary, "fire")
	for _, d := range []string{r.dir, r.canary} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(r.fire, []byte("#!/bin/sh\ntouch "+r.canary+"/fired-\"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The canary works.
	if out, err := exec.Command(r.fire, "selftest").CombinedOutput(); err != nil {
		t.Fatalf("canary: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(r.canary, "fired-selftest")); err != nil {
		t.Fatal("the canary does not fire")
	}
	os.Remove(filepath.Join(r.canary, "fired-selftest"))
	if err := os.Chown(r.dir, repoUID, repoUID); err != nil {
		t.Fatal(err)
	}
	r.git("init", "-q", "-b", "main")
	files := map[string]string{
		"README":      "hello\n",
		"keep.txt":    "kept\n",
		"del.txt":     "to be deleted\n",
		"sub/x.txt":   "in a directory\n",
		".gitignore":  "node_modules/\n*.log\n",
		"tracked.log": "tracked although ignored\n",
	}
	for p, c := range files {
		r.write(p, c)
	}
	r.git("add", "-A")
	r.git("add", "-f", "tracked.log")
	r.git("commit", "-q", "-m", "base")
	r.base = r.git("rev-parse", "HEAD")
	// Uncommitted work of the user: a staged change and an untracked file.
	r.write("keep.txt", "kept, staged change\n")
	r.git("add", "keep.txt")
	r.write("untracked.txt", "the user's\n")
	// Hooks and an fsmonitor that fire the canary.
	for _, h := range []string{"pre-commit", "post-commit", "reference-transaction", "post-update", "post-receive", "pre-receive", "update", "post-checkout", "post-index-change", "pre-auto-gc", "post-rewrite"} {
		r.write(".git/hooks/"+h, "#!/bin/sh\n"+r.fire+" user-hook-"+h+"\n")
		if err := os.Chmod(filepath.Join(r.dir, ".git/hooks", h), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.git("config", "core.fsmonitor", r.fire+" user-fsmonitor")
	return r
}

// git runs git in the repository as its owner, with hooks and fsmonitor off (the test's
// own reads must not fire the canary).
func (r *userRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", r.dir, "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
		"-c", "user.name=u", "-c", "user.email=u@example.test"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: repoUID, Gid: repoUID, NoSetGroups: true}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func (r *userRepo) write(p, content string) {
	r.t.Helper()
	full := filepath.Join(r.dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
	for d := full; d != r.dir; d = filepath.Dir(d) {
		if err := os.Lchown(d, repoUID, repoUID); err != nil {
			r.t.Fatal(err)
		}
	}
}

// state hashes what the user sees: HEAD, the current branch, the index, the config and
// every byte of the work tree (outside .git).
func (r *userRepo) state() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	for _, f := range []string{".git/HEAD", ".git/refs/heads/main", ".git/index", ".git/config"} {
		b, err := os.ReadFile(filepath.Join(r.dir, f))
		if err != nil {
			r.t.Fatal(err)
		}
		s := sha256.Sum256(b)
		out[f] = hex.EncodeToString(s[:])
	}
	h := sha256.New()
	err := filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.dir, p)
		if rel == ".git" {
			return fs.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v\n", rel, info.Mode())
		if info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	out["worktree"] = hex.EncodeToString(h.Sum(nil))
	return out
}

// fired lists the canaries that fired.
func (r *userRepo) fired() []string {
	m, _ := filepath.Glob(filepath.Join(r.canary, "fired-*"))
	return m
}

// ownedByUser reports files in the repository not owned by its user.
func (r *userRepo) notOwned() []string {
	var bad []string
	_ = filepath.Walk(r.dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid != repoUID {
				bad = append(bad, p)
			}
		}
		return nil
	})
	return bad
}

// tree lists ref's tree as "mode path" lines.
func (r *userRepo) tree(ref string) []string {
	var lines []string
	for _, l := range strings.Split(r.git("ls-tree", "-r", "--full-tree", ref), "\n") {
		meta, path, _ := strings.Cut(l, "\t")
		lines = append(lines, strings.Fields(meta)[0]+" "+path)
	}
	sort.Strings(lines)
	return lines
}

func reportOf(t *testing.T, rep *v1.ChangeReport) v1.ChangeReport {
	t.Helper()
	if rep == nil {
		t.Fatal("no change report")
	}
	return *rep
}

func fileSummary(rep v1.ChangeReport) []string {
	var out []string
	for _, f := range rep.Files {
		out = append(out, fmt.Sprintf("%s +%d -%d", f.Path, f.Added, f.Removed))
	}
	sort.Strings(out)
	return out
}

// TestWorkspaceExport (issue 11 items 2 and 3), on runc and runsc: a sandbox made with
// --repo from a repository owned by another user changes its /workspace (modify, add,
// delete, links out of the tree, ignored node_modules and logs, a tracked file that
// matches an ignore pattern) and plants a hostile .git config and hooks that point at a
// host canary. Then:
//   - diff shows exactly those changes against the repository's HEAD at create (nothing
//     ignored, nothing from .git), and the patch;
//   - export writes refs/heads/agent/<id> at a commit on that HEAD whose tree is the
//     workspace; the user's HEAD, branch, index, config and work tree are byte-for-byte
//     unchanged, every file stays the user's, no canary fired (user hooks, user fsmonitor,
//     the sandbox's config);
//   - a second export after more work fast-forwards; one without changes is unchanged;
//   - after the user moves the branch elsewhere, export is refused (409) and the branch
//     stays; a workspace touching .github/workflows/x.yml is refused (403) naming it, and
//     the operator's allow_protected exports it; a branch outside agent/ is 400;
//   - each export is an `export` event; a stopped sandbox's workspace is read through a
//     temporary mount (same snapshot, nothing left mounted, still stopped), and after the
//     user commits and the sandbox starts again its base is still the create-time commit;
//   - a sandbox without --repo is 400.
func TestWorkspaceExport(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			r := newUserRepo(t)
			before := r.state()
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt, Repo: r.dir})
			e.mustSh(sb.ID, fmt.Sprintf(`set -e
cd /workspace
echo changed > README
echo new > new.txt
rm del.txt
ln -s /etc/passwd link
ln -s / rootlink
mkdir -p node_modules/pkg sub/node_modules
echo x > node_modules/pkg/index.js
echo x > sub/node_modules/y.js
echo log > build.log
echo more >> tracked.log
printf '* filter=evil diff=evil\n' > .gitattributes
git config core.fsmonitor "%[1]s sandbox-fsmonitor"
git config core.hooksPath "%[2]s"
git config filter.evil.clean "%[1]s sandbox-clean"
git config filter.evil.smudge "%[1]s sandbox-smudge"
git config filter.evil.required true
git config diff.evil.textconv "%[1]s sandbox-textconv"
git config diff.external "%[1]s sandbox-external"
for h in pre-commit post-commit reference-transaction post-update pre-receive; do
  printf '#!/bin/sh\n%[1]s sandbox-hook\n' > .git/hooks/$h; chmod +x .git/hooks/$h
done`, r.fire, r.canary))

			wantFiles := []string{".gitattributes +1 -0", "README +1 -1", "del.txt +0 -1", "link +1 -0", "new.txt +1 -0", "rootlink +1 -0", "tracked.log +1 -0"}
			d, err := e.c.Diff(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			rep := reportOf(t, d.Report)
			if got := fileSummary(rep); !slices.Equal(got, wantFiles) {
				t.Errorf("diff files:\n got %q\nwant %q", got, wantFiles)
			}
			if d.Base != r.base || rep.Base != r.base || d.Repo != r.dir || len(d.Protected) != 0 {
				t.Errorf("diff: base %s (report %s), repo %s, protected %v; want %s, %s", d.Base, rep.Base, d.Repo, d.Protected, r.base, r.dir)
			}
			if d.Snapshot.Ignored < 3 {
				t.Errorf("snapshot ignored %d entries, want ≥ 3 (node_modules twice, build.log)", d.Snapshot.Ignored)
			}
			body, err := e.c.DiffPatch(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			patch, _ := io.ReadAll(body)
			body.Close()
			for _, want := range []string{"diff --git a/README b/README", "+changed", "deleted file mode 100644", "new file mode 120000", "+/etc/passwd", "diff --git a/new.txt b/new.txt"} {
				if !bytes.Contains(patch, []byte(want)) {
					t.Errorf("patch lacks %q:\n%s", want, patch)
				}
			}
			if bytes.Contains(patch, []byte("node_modules")) || bytes.Contains(patch, []byte("build.log")) {
				t.Errorf("patch has ignored files:\n%s", patch)
			}

			// Export.
			branch := "refs/heads/agent/" + sb.ID
			res, err := e.c.Export(ctx, sb.ID, v1.ExportRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Ref != branch || res.Old != "" || res.Base != r.base {
				t.Errorf("export: %+v", res)
			}
			if got := r.git("rev-parse", branch); got != res.New {
				t.Errorf("%s = %s, want %s", branch, got, res.New)
			}
			if got := r.git("rev-parse", branch+"^"); got != r.base {
				t.Errorf("the export's parent is %s, want the base %s", got, r.base)
			}
			wantTree := []string{"100644 .gitattributes", "100644 .gitignore", "100644 README", "100644 keep.txt", "100644 new.txt", "100644 sub/x.txt", "100644 tracked.log", "120000 link", "120000 rootlink"}
			sort.Strings(wantTree)
			if got := r.tree(branch); !slices.Equal(got, wantTree) {
				t.Errorf("exported tree:\n got %q\nwant %q", got, wantTree)
			}
			for p, want := range map[string]string{"README": "changed", "new.txt": "new", "keep.txt": "kept", "link": "/etc/passwd", "rootlink": "/", "tracked.log": "tracked although ignored\nmore"} {
				if got := r.git("cat-file", "blob", branch+":"+p); got != want {
					t.Errorf("%s in the export = %q, want %q", p, got, want)
				}
			}
			check := func(when string) {
				t.Helper()
				if after := r.state(); !mapsEqual(before, after) {
					t.Errorf("%s: the user's repository changed: before %v, after %v", when, before, after)
				}
				if f := r.fired(); len(f) > 0 {
					t.Errorf("%s: canaries fired: %v", when, f)
				}
				if bad := r.notOwned(); len(bad) > 0 {
					t.Errorf("%s: files no longer the user's: %v", when, bad)
				}
				if got := r.git("symbolic-ref", "HEAD"); got != "refs/heads/main" {
					t.Errorf("%s: HEAD = %s", when, got)
				}
			}
			check("after the first export")

			// More work: the branch moves forward.
			e.mustSh(sb.ID, "echo again >> /workspace/new.txt")
			res2, err := e.c.Export(ctx, sb.ID, v1.ExportRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if res2.Old != res.New || r.git("rev-parse", branch) != res2.New || r.git("rev-parse", branch+"^") != res.New {
				t.Errorf("second export: %+v (first %s)", res2, res.New)
			}
			if got := r.git("cat-file", "blob", branch+":new.txt"); got != "new\nagain" {
				t.Errorf("new.txt after the second export = %q", got)
			}
			res3, err := e.c.Export(ctx, sb.ID, v1.ExportRequest{})
			if err != nil || !res3.Unchanged || res3.New != res2.New {
				t.Errorf("export without changes: %+v, %v", res3, err)
			}
			check("after more exports")

			// The user moves the branch to a commit of their own: not rewritten.
			mine := r.git("commit-tree", "-p", r.base, "-m", "the user's", r.base+"^{tree}")
			r.git("update-ref", branch, mine)
			if _, err := e.c.Export(ctx, sb.ID, v1.ExportRequest{}); !errors.Is(err, sdk.ErrConflict) {
				t.Errorf("export over the user's branch: %v, want conflict", err)
			}
			if got := r.git("rev-parse", branch); got != mine {
				t.Errorf("the user's branch moved to %s", got)
			}

			// Protected paths.
			e.mustSh(sb.ID, "mkdir -p /workspace/.github/workflows && echo 'on: push' > /workspace/.github/workflows/x.yml")
			_, err = e.c.Export(ctx, sb.ID, v1.ExportRequest{Branch: "agent/ci"})
			if !errors.Is(err, sdk.ErrPermissionDenied) || !strings.Contains(err.Error(), `".github/workflows/x.yml"`) {
				t.Errorf("export touching a workflow: %v, want permission denied naming the path", err)
			}
			if refs := r.git("for-each-ref", "refs/heads/agent/ci"); refs != "" {
				t.Errorf("refused export left %s", refs)
			}
			if d, err := e.c.Diff(ctx, sb.ID); err != nil || len(d.Protected) != 1 || d.Protected[0].Path != ".github/workflows/x.yml" {
				t.Errorf("diff protected: %+v, %v", d, err)
			}
			allowed, err := e.c.Export(ctx, sb.ID, v1.ExportRequest{Branch: "agent/ci", AllowProtected: true})
			if err != nil || len(allowed.Protected) != 1 || r.git("rev-parse", "refs/heads/agent/ci") != allowed.New {
				t.Errorf("operator's allow_protected export: %+v, %v", allowed, err)
			}
			for _, b := range []string{"main", "feature/x", "agent/", "agent/../main", "refs/heads/agent/x"} {
				if _, err := e.c.Export(ctx, sb.ID, v1.ExportRequest{Branch: b}); !errors.Is(err, sdk.ErrInvalidArgument) {
					t.Errorf("export to %q: %v, want invalid argument", b, err)
				}
			}
			check("after the refusals")

			evs, err := e.c.Events(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			var exports []string
			for _, ev := range evs {
				if ev.Kind == "export" {
					exports = append(exports, ev.Detail)
				}
			}
			if len(exports) < 6 || !strings.Contains(strings.Join(exports, "\n"), "refused") || !strings.Contains(exports[0], branch) {
				t.Errorf("export events: %q", exports)
			}

			// Stopped: its drive is mounted for the read and unmounted after; the user
			// commits meanwhile; started again, the base stays.
			running, err := e.c.Diff(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.Stop(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			stopped, err := e.c.Diff(ctx, sb.ID)
			if err != nil {
				t.Fatalf("diff of a stopped sandbox: %v", err)
			}
			if stopped.Snapshot.Commit != running.Snapshot.Commit {
				t.Errorf("stopped, the snapshot is %s; running it was %s", stopped.Snapshot.Commit, running.Snapshot.Commit)
			}
			runDir := filepath.Join(e.runDir, "sandboxes", sb.ID)
			if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(runDir)) {
				t.Errorf("mounts of the stopped sandbox remain:\n%s", mi)
			}
			if _, err := os.Lstat(runDir); err == nil {
				t.Errorf("the stopped sandbox's run directory remains")
			}
			if got, _ := e.c.Get(ctx, sb.ID); got.State != "stopped" {
				t.Errorf("state after the read: %s", got.State)
			}
			r.git("commit", "-q", "-m", "the user's next commit")
			if _, err := e.c.Start(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			d, err = e.c.Diff(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d.Base != r.base {
				t.Errorf("base after a restart = %s, want %s", d.Base, r.base)
			}
			if got := fileSummary(reportOf(t, d.Report)); !slices.Contains(got, "new.txt +2 -0") || !slices.Contains(got, "README +1 -1") {
				t.Errorf("diff after a restart: %q", got)
			}

			// The sandbox's own .gitignore can leave untracked files out, never hide a
			// change to a tracked one.
			e.mustSh(sb.ID, "cd /workspace && printf '*\n' > .gitignore && echo hidden > hidden.txt && echo third >> README")
			d, err = e.c.Diff(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := fileSummary(reportOf(t, d.Report))
			for _, want := range []string{"README +2 -1", ".gitignore +1 -2", "del.txt +0 -1", "tracked.log +1 -0"} {
				if !slices.Contains(got, want) {
					t.Errorf("diff with a sandbox .gitignore of *: %q lacks %q", got, want)
				}
			}
			if strings.Contains(strings.Join(got, " "), "hidden.txt") {
				t.Errorf("an ignored untracked file is in the diff: %q", got)
			}
			if f := r.fired(); len(f) > 0 {
				t.Errorf("canaries fired: %v", f)
			}

			// The workspace quarantine is the daemon's alone and goes with the sandbox.
			qdir := filepath.Join(e.dataDir, "git", sb.ID)
			if fi, err := os.Stat(qdir); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("quarantine directory %s: %v %v", qdir, fi, err)
			}
			if err := e.c.Delete(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			e.d.Manager.Wait()
			if _, err := os.Stat(qdir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the quarantine outlived the sandbox: %v", err)
			}
		})
	}
	e.run("no repository", func(t *testing.T, e *env) {
		sb := e.create(v1.CreateSandboxRequest{})
		if _, err := e.c.Diff(ctx, sb.ID); !errors.Is(err, sdk.ErrInvalidArgument) || !strings.Contains(err.Error(), "--repo") {
			t.Errorf("diff without --repo: %v", err)
		}
		if _, err := e.c.Export(ctx, sb.ID, v1.ExportRequest{}); !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("export without --repo: %v", err)
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
