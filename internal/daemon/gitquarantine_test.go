package daemon_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
)

// TestGitGateQuarantine: pushes the ref rules allow are decided on their objects, received
// into the sandbox's quarantine on the host (bases fetched from the server through the
// proxy, with the brokered credential). Against a real git http-backend on loopback TLS
// that takes only the real credential:
//   - a forced update of the agent's own branch is refused as non-fast-forward, the
//     server's refs unchanged and no push reaching it; a fast-forward follow-up lands;
//   - a push whose commit changes .github/workflows/ci.yml (and a case-folded spelling)
//     is refused naming the path; so is a new agent branch created at a commit that is
//     already on the server (another branch) and changes a workflow relative to main,
//     although the push carries no new commit;
//   - a sandbox whose .git/config sets core.fsmonitor, hooks and a filter (and whose tree
//     has a .gitattributes routing every file through it) pushes through the gate and
//     nothing runs on the host: the canary file never appears;
//   - an operator's glob (daemon Config.GitProtected) refuses too, case folded;
//   - the quarantine lives under the daemon's data dir, private, and goes with the sandbox.
func TestGitGateQuarantine(t *testing.T) {
	const secret = "real-git-secret-7c4d19e0b2"
	var dataDir string
	g := newGitGate(t, secret, func(root, _ string) {
		// A branch on the server (a human's) whose commit changes a workflow.
		work := filepath.Join(root, "work")
		hostGit(t, work, "checkout", "-q", "-b", "feature")
		if err := os.MkdirAll(filepath.Join(work, ".github", "workflows"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, ".github", "workflows", "deploy.yml"), []byte("on: push\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		hostGit(t, work, "add", ".")
		hostGit(t, work, "-c", "user.email=t@example.test", "-c", "user.name=t", "commit", "-q", "-m", "workflow")
		hostGit(t, work, "push", "-q", "origin", "feature")
	}, func(c *daemon.Config) {
		c.GitProtected = []string{"deploy/**"}
		dataDir = c.DataDir
	})
	e, bare := g.e, g.bare
	ctx := context.Background()
	canary := filepath.Join(t.TempDir(), "canary")
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := g.sandbox(t, e, v1.CreateSandboxRequest{Runtime: rt}, rt)
			prefix := "refs/heads/agent/" + sb.ID + "/"
			pushes := g.pushes
			push := func(line string) result { return e.sh(sb.ID, "", "cd /tmp/repo && "+line) }
			head := func() string { return strings.TrimSpace(e.mustSh(sb.ID, `git -C /tmp/repo rev-parse HEAD`)) }

			first := head()
			if r := push(`git push origin HEAD:` + prefix + `work`); r.code != 0 {
				t.Fatalf("push to the agent branch: %+v", r)
			}
			refs := serverRefs(t, bare)
			if refs[prefix+"work"] != first {
				t.Fatalf("server refs: %v, want %s at %s", refs, prefix+"work", first)
			}
			qdir := filepath.Join(dataDir, "git", sb.ID)
			if st, err := os.Stat(qdir); err != nil || st.Mode().Perm() != 0o700 {
				t.Fatalf("quarantine dir %s: %v %v", qdir, st, err)
			}

			refused := func(t *testing.T, line, rule, reason string) {
				t.Helper()
				before := pushes()
				r := push(line)
				if r.code == 0 {
					t.Fatalf("%s: git exited 0: %+v", line, r)
				}
				if !strings.Contains(r.stderr, "remote: moat: ") || !strings.Contains(r.stderr, reason) || !strings.Contains(r.stderr, "[remote rejected]") {
					t.Errorf("%s: git's output does not carry moat's reason %q:\n%s", line, reason, r.stderr)
				}
				if got := serverRefs(t, bare); !maps.Equal(got, refs) {
					t.Errorf("%s changed the server's refs: %v, was %v", line, got, refs)
				}
				if pushes() != before {
					t.Errorf("%s reached the server", line)
				}
				if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
					return x.Proto == "git" && !x.Allowed && x.Rule == rule && strings.Contains(x.Reason, reason)
				}); !ok {
					t.Errorf("no egress entry for the refused push %s (rule %s)", line, rule)
				}
			}

			e.run("force push refused", func(t *testing.T, e *env) {
				e.mustSh(sb.ID, `cd /tmp/repo && git commit -q --amend -m rewritten`)
				refused(t, `git push -f origin HEAD:`+prefix+`work`, "non-fast-forward", "non-fast-forward updates")
				e.mustSh(sb.ID, `cd /tmp/repo && git reset -q --hard `+first)
			})
			e.run("fast-forward accepted", func(t *testing.T, e *env) {
				e.mustSh(sb.ID, `cd /tmp/repo && echo more >> README && git commit -qam more`)
				next := head()
				if r := push(`git push origin HEAD:` + prefix + `work`); r.code != 0 {
					t.Fatalf("fast-forward push: %+v", r)
				}
				refs = serverRefs(t, bare)
				if refs[prefix+"work"] != next {
					t.Fatalf("server refs: %v, want %s at %s", refs, prefix+"work", next)
				}
			})
			e.run("workflow refused", func(t *testing.T, e *env) {
				e.mustSh(sb.ID, `cd /tmp/repo && mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml && git add . && git commit -qm ci`)
				refused(t, `git push origin HEAD:`+prefix+`work`, "protected-path", `touches protected path ".github/workflows/ci.yml"`)
				refused(t, `git push origin HEAD:`+prefix+`ci`, "protected-path", `touches protected path ".github/workflows/ci.yml"`)
				e.mustSh(sb.ID, `cd /tmp/repo && git reset -q --hard HEAD~1 && mkdir -p .GitHub/Workflows && echo 'on: push' > .GitHub/Workflows/x.yml && git add . && git commit -qm ci2`)
				refused(t, `git push origin HEAD:`+prefix+`ci`, "protected-path", `touches protected path ".GitHub/Workflows/x.yml"`)
				e.mustSh(sb.ID, `cd /tmp/repo && git reset -q --hard HEAD~1`)
			})
			e.run("operator's protected glob", func(t *testing.T, e *env) {
				e.mustSh(sb.ID, `cd /tmp/repo && mkdir -p Deploy && echo x > Deploy/prod.tf && git add . && git commit -qm deploy`)
				refused(t, `git push origin HEAD:`+prefix+`work`, "protected-path", `touches protected path "Deploy/prod.tf" (protected by "deploy/**")`)
				e.mustSh(sb.ID, `cd /tmp/repo && git reset -q --hard HEAD~1`)
			})
			e.run("branch at a server commit that changes a workflow", func(t *testing.T, e *env) {
				refused(t, `git fetch -q origin feature && git push origin FETCH_HEAD:`+prefix+`reuse`, "protected-path", `touches protected path ".github/workflows/deploy.yml"`)
				// A new commit on top of it: a thin pack whose bases are on the server's
				// feature branch only (not HEAD, not the pushed ref), fetched on the retry.
				e.mustSh(sb.ID, `cd /tmp/repo && git checkout -q -b on-feature FETCH_HEAD && echo more >> README && git commit -qam on-feature`)
				refused(t, `git push origin HEAD:`+prefix+`on-feature`, "protected-path", `touches protected path ".github/workflows/deploy.yml"`)
				e.mustSh(sb.ID, `cd /tmp/repo && git checkout -q main`)
			})
			e.run("sandbox git config runs nothing on the host", func(t *testing.T, e *env) {
				e.mustSh(sb.ID, fmt.Sprintf(`set -e; cd /tmp/repo
	c='touch %[1]s; touch /tmp/ran-in-sandbox'
	git config core.fsmonitor "$c"
	git config filter.evil.clean "$c; cat"; git config filter.evil.smudge "$c; cat"; git config filter.evil.required true
	git config diff.evil.textconv "$c; cat"; git config core.hooksPath /tmp/hooks
	mkdir -p /tmp/hooks; for h in pre-receive update post-receive post-update pre-push reference-transaction; do printf '#!/bin/sh\n%%s\n' "$c" > /tmp/hooks/$h; chmod +x /tmp/hooks/$h; done
	printf '* filter=evil diff=evil\n' > .gitattributes; echo data > data.txt; git add .; git commit -qm attrs`, canary))
				tip := head()
				if r := push(`git push origin HEAD:` + prefix + `work`); r.code != 0 {
					t.Fatalf("push with a hostile config: %+v", r)
				}
				if got := serverRefs(t, bare); got[prefix+"work"] != tip {
					t.Fatalf("server refs: %v, want %s at %s", got, prefix+"work", tip)
				}
				// Control: the sandbox's own git did run its config.
				if r := e.sh(sb.ID, "", `test -e /tmp/ran-in-sandbox`); r.code != 0 {
					t.Errorf("the sandbox's hooks/filters never ran in the sandbox: the test proves nothing")
				}
				if _, err := os.Stat(canary); !os.IsNotExist(err) {
					t.Errorf("canary %s exists on the host (%v): sandbox config ran on the host", canary, err)
				}
				refs = serverRefs(t, bare)
			})
			e.run("quarantine goes with the sandbox", func(t *testing.T, e *env) {
				if err := e.c.Delete(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
				// Deletion finishes in the background; the record goes last.
				testutil.WaitFor(t, time.Minute, "the sandbox record gone", func() bool {
					_, err := e.c.Get(ctx, sb.ID)
					return isNotFound(err)
				})
				if _, err := os.Stat(qdir); !os.IsNotExist(err) {
					t.Errorf("quarantine %s after delete: %v", qdir, err)
				}
			})
		})
	}
}

// hostGit runs git in a test's host work tree with no configuration but the repository's.
func hostGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// TestGitProtectedInvalid: a daemon given an invalid protected glob does not start.
func TestGitProtectedInvalid(t *testing.T) {
	testutil.RequiresRoot(t)
	_, _, err := daemon.Start(context.Background(), daemon.Config{
		DataDir: t.TempDir(), RunDir: t.TempDir(), Socket: filepath.Join(t.TempDir(), "moat.sock"),
		IDBase: testutil.IDBase(t), GitProtected: []string{"a/[b]"},
	})
	if err == nil || !strings.Contains(err.Error(), "--git-protected") {
		t.Fatalf("daemon with glob a/[b]: %v, want a --git-protected error", err)
	}
}
