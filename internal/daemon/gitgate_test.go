package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestGitGatePush: a sandbox with a git credential binding pushes through the git gate to
// a real git http-backend on loopback (TLS, Basic auth with the real value, which only the
// proxy has). A push to refs/heads/agent/<id>/ reaches the server; a push to main, a tag
// push, a deletion of the agent's own branch and a push with a push option are refused: git
// fails and prints moat's reason, and the server's refs are unchanged (read on the server
// with git) and the server never saw those pushes. Each decision is in the egress log.
func TestGitGatePush(t *testing.T) {
	const secret = "real-git-secret-5e1b07c2a9"
	g := newGitGate(t, secret, func(_, bare string) {
		// The server offers push options: the gate must hide them from the sandbox.
		serverGit(t, bare, "config", "receive.advertisePushOptions", "true")
	}, nil)
	e, bare, port := g.e, g.bare, g.port
	ctx := context.Background()
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := g.sandbox(t, e, v1.CreateSandboxRequest{Runtime: rt}, rt)
			prefix := "refs/heads/agent/" + sb.ID + "/"
			head := strings.TrimSpace(e.mustSh(sb.ID, `git -C /tmp/repo rev-parse HEAD`))
			pushes := g.pushes

			before := pushes()
			if r := e.sh(sb.ID, "", `cd /tmp/repo && git push origin HEAD:`+prefix+`work`); r.code != 0 {
				t.Fatalf("push to the agent branch: %+v", r)
			}
			refs := serverRefs(t, bare)
			if refs[prefix+"work"] != head {
				t.Fatalf("server refs after the push to the agent branch: %v, want %s at %s", refs, prefix+"work", head)
			}
			if pushes() != before+1 {
				t.Errorf("the server saw %d pushes, want 1", pushes()-before)
			}
			if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
				return x.Proto == "git" && x.Allowed && x.Rule == "agent-prefix" && strings.Contains(x.Reason, prefix+"work: agent-prefix")
			}); !ok {
				t.Error("no egress entry for the allowed push")
			}

			refused := []struct {
				name, line, rule, reason string
			}{
				{"main", `git push origin HEAD:main`, "outside-prefix", "may push only to branches under " + prefix},
				{"tag", `git tag v1-` + rt + ` && git push origin v1-` + rt, "tag", "pushing tags is not allowed"},
				{"delete", `git push origin :` + prefix + `work`, "delete", "deleting refs is not allowed"},
				{"other branch beside the agent's", `git push origin HEAD:` + prefix + `two HEAD:refs/heads/release`, "outside-prefix", "may push only to branches under " + prefix},
			}
			for _, c := range refused {
				e.run(c.name, func(t *testing.T, e *env) {
					before := pushes()
					r := e.sh(sb.ID, "", "cd /tmp/repo && "+c.line)
					if r.code == 0 {
						t.Fatalf("%s: git exited 0: %+v", c.line, r)
					}
					if !strings.Contains(r.stderr, "remote: moat: ") || !strings.Contains(r.stderr, c.reason) || !strings.Contains(r.stderr, "[remote rejected]") {
						t.Errorf("%s: git's output does not carry moat's reason %q:\n%s", c.line, c.reason, r.stderr)
					}
					if got := serverRefs(t, bare); !maps.Equal(got, refs) {
						t.Errorf("%s changed the server's refs: %v, was %v", c.line, got, refs)
					}
					if pushes() != before {
						t.Errorf("%s reached the server", c.line)
					}
					if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
						return x.Proto == "git" && !x.Allowed && x.Rule == c.rule && strings.Contains(x.Reason, c.reason)
					}); !ok {
						t.Errorf("no egress entry for the refused push %s (rule %s)", c.line, c.rule)
					}
				})
			}

			// Past http.postBuffer (1 MiB) git probes with "0000" first and sends the pack
			// chunked: the gate lets the probe through, and its refusal is still read.
			e.run("large push", func(t *testing.T, e *env) {
				e.mustSh(sb.ID, `set -e; cd /tmp/repo; head -c 3000000 /dev/urandom > blob.bin; git add blob.bin; git commit -qm blob`)
				big := strings.TrimSpace(e.mustSh(sb.ID, `git -C /tmp/repo rev-parse HEAD`))
				r := e.sh(sb.ID, "", `cd /tmp/repo && git push origin HEAD:refs/heads/release`)
				if r.code == 0 || !strings.Contains(r.stderr, "remote: moat: ") {
					t.Errorf("large push to a branch outside the prefix: %+v", r)
				}
				if got := serverRefs(t, bare); !maps.Equal(got, refs) {
					t.Errorf("a refused large push changed the server's refs: %v, was %v", got, refs)
				}
				if r := e.sh(sb.ID, "", `cd /tmp/repo && git push origin HEAD:`+prefix+`big`); r.code != 0 {
					t.Fatalf("large push to the agent branch: %+v", r)
				}
				if got := serverRefs(t, bare); got[prefix+"big"] != big {
					t.Errorf("server refs after the large push: %v, want %s at %s", got, prefix+"big", big)
				}
				serverGit(t, bare, "cat-file", "-e", big+":blob.bin")
				e.mustSh(sb.ID, `cd /tmp/repo && git reset -q --hard HEAD~1`)
				refs = serverRefs(t, bare)
			})

			e.run("decisions are audited", func(t *testing.T, e *env) {
				evs, err := e.c.Events(ctx, sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				var git []string
				for _, ev := range evs {
					if ev.Kind == "git" {
						git = append(git, ev.Detail)
					}
				}
				joined := strings.Join(git, "\n")
				for _, want := range []string{"git push to git.test:" + fmt.Sprint(port) + " allowed (agent-prefix): push /git/repo.git: " + prefix + "work: agent-prefix",
					"refused (outside-prefix)", "refused (tag)", "refused (delete)"} {
					if !strings.Contains(joined, want) {
						t.Errorf("git events do not say %q: %q", want, joined)
					}
				}
			})

			e.run("prefix set at create", func(t *testing.T, e *env) {
				sb2 := g.sandbox(t, e, v1.CreateSandboxRequest{Runtime: rt, AgentBranchPrefix: "agent/custom-" + rt}, "custom")
				custom := "refs/heads/agent/custom-" + rt + "/"
				if sb2.AgentBranchPrefix != custom {
					t.Errorf("the sandbox's prefix is %q, want %q", sb2.AgentBranchPrefix, custom)
				}
				r := e.sh(sb2.ID, "", "cd /tmp/repo && git push origin HEAD:refs/heads/agent/"+sb2.ID+"/work")
				if r.code == 0 || !strings.Contains(r.stderr, "may push only to branches under "+custom) {
					t.Errorf("push under the default prefix of a sandbox with its own: %+v", r)
				}
				if r := e.sh(sb2.ID, "", "cd /tmp/repo && git push origin HEAD:"+custom+"work"); r.code != 0 {
					t.Fatalf("push under the sandbox's prefix: %+v", r)
				}
				got := serverRefs(t, bare)
				if got[custom+"work"] == "" || got["refs/heads/agent/"+sb2.ID+"/work"] != "" {
					t.Errorf("server refs: %v", got)
				}
				refs = got
				_, err := e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, AgentBranchPrefix: "refs/tags/x/"})
				if !errors.Is(err, sdk.ErrInvalidArgument) || !strings.Contains(err.Error(), "refs/heads/") {
					t.Errorf("create with a tag prefix: %v, want invalid argument", err)
				}
			})

			e.run("push options are hidden", func(t *testing.T, e *env) {
				r := e.sh(sb.ID, "", `cd /tmp/repo && echo more >> README && git commit -qam more && git push -o ci.skip origin HEAD:`+prefix+`work`)
				if r.code == 0 || !strings.Contains(r.stderr, "does not support push options") {
					t.Errorf("git push -o: %+v, want git to refuse for lack of push-options", r)
				}
				if got := serverRefs(t, bare); !maps.Equal(got, refs) {
					t.Errorf("push -o changed the server's refs: %v, was %v", got, refs)
				}
			})
		})
	}
}

// serverGit runs git on the server's repository bare with no configuration but the
// repository's own.
func serverGit(t *testing.T, bare string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir=" + bare}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// serverRefs lists the refs of the server's repository: name → object id.
func serverRefs(t *testing.T, bare string) map[string]string {
	t.Helper()
	refs := map[string]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(serverGit(t, bare, "for-each-ref", "--format=%(refname) %(objectname)")), "\n") {
		if name, id, ok := strings.Cut(l, " "); ok {
			refs[name] = id
		}
	}
	return refs
}

// gitGate is a daemon whose sandboxes may bind the secret GIT_TOKEN for a git
// http-backend on loopback TLS (git.test, reached through the test internet) that takes
// only that secret's real value.
type gitGate struct {
	in    *internet
	e     *env
	bare  string // the server's bare repository
	port  int
	bound string // "git.test:PORT": the secret's scope and the bindings' host
	// configure is the daemon's configuration, for a restart (env.start).
	configure func(*daemon.Config)
}

// newGitGate starts the server on a repository under a new root (prepare, if set, runs
// before the daemon starts, with the root — its clone is root/work — and the bare
// repository) and a daemon on the test internet, adjusted by configure if set.
func newGitGate(t *testing.T, secret string, prepare func(root, bare string), configure func(*daemon.Config)) *gitGate {
	t.Helper()
	in := newInternet(t)
	root := t.TempDir()
	git := gitServerAt(t, root, "repo", func(r *http.Request, _ bool) bool {
		_, p, ok := r.BasicAuth()
		return ok && p == secret
	}, in.log)
	g := &gitGate{in: in, bare: filepath.Join(root, "repo.git")}
	if prepare != nil {
		prepare(root, g.bare)
	}
	up := testutil.NewUpstreamCA(t, "git.test")
	g.port = tlsServe(t, up, git)
	g.bound = fmt.Sprintf("git.test:%d", g.port)
	caFile := upstreamCAFile(t, up)
	g.configure = func(c *daemon.Config) {
		in.configure(c)
		extra, _ := egress.ParseHosts([]byte("127.0.0.4 git.test\n"))
		for k, v := range extra {
			c.EgressHosts[k] = v
		}
		c.EgressCA = caFile
		if configure != nil {
			configure(c)
		}
	}
	g.e = newEnvWith(t, g.configure)
	if err := g.e.c.SetSecret(context.Background(), "GIT_TOKEN", secret, &v1.SecretScope{Hosts: []string{g.bound}}); err != nil {
		t.Fatal(err)
	}
	return g
}

// sandbox creates a sandbox from req with the server's binding and a policy that allows
// it, logs its egress and the server's log if t fails, and clones the repository into
// /tmp/repo with one commit on top ("agent change NOTE").
func (g *gitGate) sandbox(t *testing.T, e *env, req v1.CreateSandboxRequest, note string) *v1.Sandbox {
	t.Helper()
	req.Policy = &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"git.test"}}}}
	req.Credentials = []v1.Credential{{Secret: "GIT_TOKEN", Hosts: []string{g.bound}}}
	sb := e.create(req)
	t.Cleanup(func() {
		if t.Failed() {
			e.d.Egress.Flush()
			list, _ := e.c.Egress(context.Background(), sb.ID, 0)
			for _, x := range list {
				t.Logf("egress: %+v", x)
			}
			t.Logf("server: %v", g.in.log.all())
		}
	})
	e.mustSh(sb.ID, fmt.Sprintf(`set -e
	git config --global user.email agent@example.test; git config --global user.name agent
	git clone -q "https://x-access-token:$GIT_TOKEN@git.test:%d/git/repo.git" /tmp/repo
	cd /tmp/repo; echo change >> README; git commit -qam "agent change %s"`, g.port, note))
	return sb
}

// pushes counts the pushes the server has received.
func (g *gitGate) pushes() int {
	n := 0
	for _, l := range g.in.log.all() {
		if strings.Contains(l, "git push received") {
			n++
		}
	}
	return n
}
