package daemon_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

var heldRE = regexp.MustCompile(`remote: moat: held for approval as (ch-[0-9a-f]{8}): \.github/workflows/ci\.yml`)

// TestGitGateHold: a sandbox created with git_protected "hold" gets a push that touches a
// protected path held for approval instead of refused; every push decided has a change
// record. Against the real git http-backend on loopback TLS (only the real credential
// works there), on runc and runsc:
//   - a push adding .github/workflows/ci.yml: git exits non-zero at once with "remote: moat:
//     held for approval as ch-…: .github/workflows/ci.yml"; the server's refs are unchanged
//     and no push reached it; the record is held, names the path, reports the files with
//     their line counts; its patch has the change;
//   - approve (API): the server's branch is at the pushed commit and the workflow file is
//     in it (read server-side); the record says approved; approving again is 409;
//   - a second held push, denied: the server is unchanged, the held body is gone from the
//     data dir, approving it is 409;
//   - a held push whose branch moved on the server before approval: apply-failed with
//     the remote's reason, server unchanged;
//   - the list shows the allowed, refused and decided records with their counts; audit
//     events of kind git name the changes;
//   - approving while the sandbox is stopped is 409 and the change stays held; after a
//     start it applies;
//   - the records go with the sandbox.
func TestGitGateHold(t *testing.T) {
	const secret = "real-git-secret-91b7e3c5aa"
	var dataDir string
	g := newGitGate(t, secret, nil, func(c *daemon.Config) { dataDir = c.DataDir })
	e, bare := g.e, g.bare
	ctx := context.Background()
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := g.sandbox(t, e, v1.CreateSandboxRequest{Runtime: rt, GitProtected: "hold"}, rt)
			if sb.GitProtected != "hold" {
				t.Fatalf("sandbox git_protected %q, want hold", sb.GitProtected)
			}
			prefix := "refs/heads/agent/" + sb.ID + "/"
			push := func(line string) result { return e.sh(sb.ID, "", "cd /tmp/repo && "+line) }
			head := func() string { return strings.TrimSpace(e.mustSh(sb.ID, `git -C /tmp/repo rev-parse HEAD`)) }

			first := head()
			if r := push(`git push origin HEAD:` + prefix + `work`); r.code != 0 {
				t.Fatalf("push to the agent branch: %+v", r)
			}
			if r := push(`git push origin HEAD:main`); r.code == 0 {
				t.Fatalf("push to main: exit 0: %+v", r)
			}
			refs := serverRefs(t, bare)
			if refs[prefix+"work"] != first {
				t.Fatalf("server refs %v, want %s at %s", refs, prefix+"work", first)
			}

			// hold pushes a commit adding the workflow and a README line; it asserts the
			// push was held (git's output, the server untouched) and returns the change id.
			hold := func(t *testing.T, msg string) (string, string) {
				t.Helper()
				e.mustSh(sb.ID, `cd /tmp/repo && mkdir -p .github/workflows && echo 'on: push # `+msg+`' >> .github/workflows/ci.yml && echo `+msg+` >> README && git add . && git commit -qm `+msg)
				tip := head()
				before := g.pushes()
				start := time.Now()
				r := push(`git push origin HEAD:` + prefix + `work`)
				if r.code == 0 {
					t.Fatalf("held push: git exited 0: %+v", r)
				}
				m := heldRE.FindStringSubmatch(r.stderr)
				if m == nil || !strings.Contains(r.stderr, "[remote rejected]") {
					t.Fatalf("held push: git's output does not name the held change and path:\n%s", r.stderr)
				}
				if d := time.Since(start); d > 30*time.Second {
					t.Errorf("held push took %v", d)
				}
				if got := serverRefs(t, bare); !maps.Equal(got, refs) {
					t.Fatalf("a held push changed the server's refs: %v, was %v", got, refs)
				}
				if g.pushes() != before {
					t.Fatalf("a held push reached the server")
				}
				return m[1], tip
			}
			body := func(cid string) string { return filepath.Join(dataDir, "git", sb.ID, "changes", cid+".body") }

			var cid1 string
			e.run("held push, approved", func(t *testing.T, e *env) {
				var tip string
				cid1, tip = hold(t, "one")
				ch, err := e.c.Change(ctx, sb.ID, cid1)
				if err != nil {
					t.Fatal(err)
				}
				if ch.Decision != "held" || len(ch.Protected) != 1 || ch.Protected[0].Path != ".github/workflows/ci.yml" || ch.Expires == nil {
					t.Fatalf("held record: %+v", ch)
				}
				if len(ch.Refs) != 1 || ch.Refs[0].Ref != prefix+"work" || ch.Refs[0].Old != first || ch.Refs[0].New != tip || ch.Refs[0].Report == nil {
					t.Fatalf("held record refs: %+v", ch.Refs)
				}
				files := map[string][2]int64{}
				for _, f := range ch.Refs[0].Report.Files {
					files[f.Path] = [2]int64{f.Added, f.Removed}
				}
				if files[".github/workflows/ci.yml"] != [2]int64{1, 0} || files["README"] != [2]int64{1, 0} || len(files) != 2 || ch.Added != 2 || ch.Files != 2 {
					t.Errorf("held report files %v, totals %d +%d -%d", files, ch.Files, ch.Added, ch.Removed)
				}
				if rep := ch.Refs[0].Report; rep.Base != first || len(rep.Commits) != 1 || rep.Commits[0].Subject != "one" {
					t.Errorf("held report: base %s, commits %+v", rep.Base, rep.Commits)
				}
				if st, err := os.Stat(body(cid1)); err != nil || st.Mode().Perm() != 0o600 {
					t.Errorf("held body %s: %v %v", body(cid1), st, err)
				}
				p, err := e.c.ChangePatch(ctx, sb.ID, cid1, "")
				if err != nil {
					t.Fatal(err)
				}
				patch, _ := io.ReadAll(p)
				p.Close()
				if !strings.Contains(string(patch), "diff --git a/.github/workflows/ci.yml b/.github/workflows/ci.yml") || !strings.Contains(string(patch), "+on: push # one") || !strings.Contains(string(patch), "+one") {
					t.Errorf("patch:\n%s", patch)
				}

				before := g.pushes()
				ch, err = e.c.ApproveChange(ctx, sb.ID, cid1, "looks fine")
				if err != nil {
					t.Fatal(err)
				}
				if ch.Decision != "approved" || ch.Decided == nil || ch.Decided.By != "operator" || ch.Decided.Reason != "looks fine" {
					t.Fatalf("approved record: %+v %+v", ch, ch.Decided)
				}
				refs = serverRefs(t, bare)
				if refs[prefix+"work"] != tip {
					t.Fatalf("after approve the server's %s is %s, want %s", prefix+"work", refs[prefix+"work"], tip)
				}
				if got := serverGit(t, bare, "show", prefix+"work:.github/workflows/ci.yml"); got != "on: push # one\n" {
					t.Errorf("the workflow on the server: %q", got)
				}
				if g.pushes() != before+1 {
					t.Errorf("the server saw %d pushes on approve, want 1", g.pushes()-before)
				}
				if _, err := os.Stat(body(cid1)); !os.IsNotExist(err) {
					t.Errorf("held body after approve: %v", err)
				}
				if _, err := e.c.ApproveChange(ctx, sb.ID, cid1, ""); !errors.Is(err, sdk.ErrConflict) {
					t.Errorf("approving twice: %v, want a conflict", err)
				}
				if _, err := e.c.DenyChange(ctx, sb.ID, cid1, ""); !errors.Is(err, sdk.ErrConflict) {
					t.Errorf("denying an approved change: %v, want a conflict", err)
				}
				// The sandbox's branch is now what the server has.
				e.mustSh(sb.ID, `cd /tmp/repo && git fetch -q origin`)
			})

			var cid2 string
			e.run("held push, denied", func(t *testing.T, e *env) {
				cid2, _ = hold(t, "two")
				if _, err := os.Stat(body(cid2)); err != nil {
					t.Fatalf("held body: %v", err)
				}
				ch, err := e.c.DenyChange(ctx, sb.ID, cid2, "no CI changes")
				if err != nil {
					t.Fatal(err)
				}
				if ch.Decision != "denied" || ch.Decided.Reason != "no CI changes" {
					t.Fatalf("denied record: %+v", ch)
				}
				if got := serverRefs(t, bare); !maps.Equal(got, refs) {
					t.Errorf("deny changed the server's refs: %v, was %v", got, refs)
				}
				if _, err := os.Stat(body(cid2)); !os.IsNotExist(err) {
					t.Errorf("held body after deny: %v", err)
				}
				if _, err := e.c.ApproveChange(ctx, sb.ID, cid2, ""); !errors.Is(err, sdk.ErrConflict) {
					t.Errorf("approving a denied change: %v, want a conflict", err)
				}
				e.mustSh(sb.ID, `cd /tmp/repo && git reset -q --hard HEAD~1`)
			})

			e.run("held push, branch moved before approval", func(t *testing.T, e *env) {
				cid, _ := hold(t, "three")
				// Someone moves the branch on the server meanwhile (back to the first push).
				serverGit(t, bare, "update-ref", prefix+"work", first)
				refs = serverRefs(t, bare)
				ch, err := e.c.ApproveChange(ctx, sb.ID, cid, "")
				if err != nil {
					t.Fatal(err)
				}
				if ch.Decision != "apply-failed" || ch.Decided == nil || !strings.Contains(ch.Decided.Result, prefix+"work") || !strings.Contains(ch.Decided.Result, "the remote refused the push") {
					t.Fatalf("record after a failed apply: %+v %+v", ch, ch.Decided)
				}
				t.Logf("apply-failed: %s", ch.Decided.Result)
				if got := serverRefs(t, bare); !maps.Equal(got, refs) {
					t.Errorf("a failed apply changed the server's refs: %v, was %v", got, refs)
				}
				if _, err := e.c.ApproveChange(ctx, sb.ID, cid, ""); !errors.Is(err, sdk.ErrConflict) {
					t.Errorf("approving a failed change again: %v, want a conflict", err)
				}
			})

			e.run("change list", func(t *testing.T, e *env) {
				list, err := e.c.Changes(ctx, sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				by := map[string][]v1.Change{}
				for _, ch := range list {
					by[ch.Decision] = append(by[ch.Decision], ch)
					if ch.Sandbox != sb.ID || ch.Remote != g.bound+"/git/repo.git" || !strings.HasPrefix(ch.ID, "ch-") {
						t.Errorf("record %+v", ch)
					}
					for _, r := range ch.Refs {
						if r.Report != nil {
							t.Errorf("the list carries reports")
						}
					}
				}
				if len(list) != 5 || len(by["allowed"]) != 1 || len(by["refused"]) != 1 || len(by["approved"]) != 1 || len(by["denied"]) != 1 || len(by["apply-failed"]) != 1 {
					t.Fatalf("changes: %+v", list)
				}
				// The first push: the sandbox's clone plus one README line, against the
				// server's main (a new branch: base = the remote's HEAD).
				if a := by["allowed"][0]; a.Files != 1 || a.Added != 1 || a.Removed != 0 || len(a.Protected) != 0 || a.Refs[0].Ref != prefix+"work" {
					t.Errorf("allowed record %+v", a)
				}
				if r := by["refused"][0]; r.Refs[0].Ref != "refs/heads/main" || r.Refs[0].Rule != "outside-prefix" || len(r.Reasons) == 0 || r.ReportError == "" {
					t.Errorf("refused record %+v", r)
				}
				if a := by["approved"][0]; a.ID != cid1 || a.Files != 2 || a.Added != 2 || len(a.Protected) != 1 {
					t.Errorf("approved record %+v", a)
				}
				if d := by["denied"][0]; d.ID != cid2 {
					t.Errorf("denied record %+v", d)
				}
				if _, err := e.c.Change(ctx, sb.ID, "ch-00000000"); !errors.Is(err, sdk.ErrNotFound) {
					t.Errorf("unknown change: %v", err)
				}
				if _, err := e.c.Change(ctx, sb.ID, "../../x"); err == nil {
					t.Errorf("a bad change id was taken")
				}
			})

			e.run("audit events", func(t *testing.T, e *env) {
				evs, err := e.c.Events(ctx, sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				var held, approved, denied bool
				for _, ev := range evs {
					if ev.Kind != "git" {
						continue
					}
					held = held || strings.Contains(ev.Detail, "held (protected-path): held for approval as "+cid1) && strings.HasSuffix(ev.Detail, "[change "+cid1+"]")
					approved = approved || strings.Contains(ev.Detail, "change "+cid1) && strings.Contains(ev.Detail, "approved by operator")
					denied = denied || strings.Contains(ev.Detail, "change "+cid2) && strings.Contains(ev.Detail, "denied by operator (no CI changes)")
				}
				if !held || !approved || !denied {
					t.Errorf("git audit events: held %v approved %v denied %v: %+v", held, approved, denied, evs)
				}
			})

			e.run("approve needs the sandbox running", func(t *testing.T, e *env) {
				cid, tip := hold(t, "four")
				if _, err := e.c.Stop(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
				if _, err := e.c.ApproveChange(ctx, sb.ID, cid, ""); !errors.Is(err, sdk.ErrConflict) || !strings.Contains(err.Error(), "not running") {
					t.Errorf("approve of a stopped sandbox's change: %v, want a conflict saying it is not running", err)
				}
				if ch, err := e.c.Change(ctx, sb.ID, cid); err != nil || ch.Decision != "held" || ch.Decided != nil {
					t.Errorf("after a refused approve the change is %+v, %v; want still held", ch, err)
				}
				if got := serverRefs(t, bare); !maps.Equal(got, refs) {
					t.Errorf("the server's refs changed: %v, was %v", got, refs)
				}
				if _, err := e.c.Start(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
				if ch, err := e.c.ApproveChange(ctx, sb.ID, cid, ""); err != nil || ch.Decision != "approved" {
					t.Fatalf("approve after start: %+v %v", ch, err)
				}
				if got := serverRefs(t, bare)[prefix+"work"]; got != tip {
					t.Errorf("after approve the server's branch is %s, want %s", got, tip)
				}
			})

			e.run("records go with the sandbox", func(t *testing.T, e *env) {
				if err := e.c.Delete(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
				testutil.WaitFor(t, time.Minute, "the sandbox record gone", func() bool {
					_, err := e.c.Get(ctx, sb.ID)
					return isNotFound(err)
				})
				if _, err := os.Stat(filepath.Join(dataDir, "git", sb.ID, "changes")); !os.IsNotExist(err) {
					t.Errorf("change records after delete: %v", err)
				}
				if _, err := e.c.Changes(ctx, sb.ID); !errors.Is(err, sdk.ErrNotFound) {
					t.Errorf("changes of a deleted sandbox: %v", err)
				}
			})
		})
	}
}

// TestGitGateHoldRestart: a held change and the sandbox's hold setting survive a daemon
// restart: the record is still held with its body, a new protected push is held again (not
// refused), and approving the first after the restart applies it through the re-attached
// boundary (the server, which takes only the real credential, has the workflow).
func TestGitGateHoldRestart(t *testing.T) {
	const secret = "real-git-secret-0d5e8a2c47"
	var dataDir string
	g := newGitGate(t, secret, nil, func(c *daemon.Config) { dataDir = c.DataDir })
	e, bare := g.e, g.bare
	ctx := context.Background()
	sb := g.sandbox(t, e, v1.CreateSandboxRequest{Runtime: "runc", GitProtected: "hold"}, "restart")
	prefix := "refs/heads/agent/" + sb.ID + "/"
	push := func() result {
		return e.sh(sb.ID, "", "cd /tmp/repo && git push origin HEAD:"+prefix+"work")
	}
	if r := push(); r.code != 0 {
		t.Fatalf("first push: %+v", r)
	}
	e.mustSh(sb.ID, `cd /tmp/repo && mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml && git add . && git commit -qm ci`)
	tip := strings.TrimSpace(e.mustSh(sb.ID, `git -C /tmp/repo rev-parse HEAD`))
	r := push()
	m := heldRE.FindStringSubmatch(r.stderr)
	if r.code == 0 || m == nil {
		t.Fatalf("held push: %+v", r)
	}
	cid := m[1]
	refs := serverRefs(t, bare)

	e.stop()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), g.configure)

	ch, err := e.c.Change(ctx, sb.ID, cid)
	if err != nil || ch.Decision != "held" {
		t.Fatalf("after a restart: %+v %v", ch, err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "git", sb.ID, "changes", cid+".body")); err != nil {
		t.Fatalf("held body after a restart: %v", err)
	}
	r = push()
	m2 := heldRE.FindStringSubmatch(r.stderr)
	if r.code == 0 || m2 == nil || m2[1] == cid {
		t.Fatalf("a protected push after the restart was not held: %+v", r)
	}
	if got := serverRefs(t, bare); !maps.Equal(got, refs) {
		t.Fatalf("server refs changed: %v, was %v", got, refs)
	}
	if ch, err = e.c.ApproveChange(ctx, sb.ID, cid, ""); err != nil || ch.Decision != "approved" {
		t.Fatalf("approve after a restart: %+v %v", ch, err)
	}
	if got := serverRefs(t, bare)[prefix+"work"]; got != tip {
		t.Fatalf("server's branch %s, want %s", got, tip)
	}
	if got := serverGit(t, bare, "show", prefix+"work:.github/workflows/ci.yml"); got != "on: push\n" {
		t.Errorf("the workflow on the server: %q", got)
	}
	if ch, err = e.c.DenyChange(ctx, sb.ID, m2[1], ""); err != nil || ch.Decision != "denied" {
		t.Errorf("deny the second: %+v %v", ch, err)
	}
}
