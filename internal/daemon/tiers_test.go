package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/internal/tiers"
)

// heldAsker is a test egress.Asker: each question is sent on asked and waits for an
// answer on answers (or its context's end).
type heldAsker struct {
	asked   chan egress.Question
	answers chan egress.Answer
}

func (a *heldAsker) Ask(ctx context.Context, q egress.Question) (egress.Answer, error) {
	select {
	case a.asked <- q:
	case <-ctx.Done():
		return egress.Answer{}, ctx.Err()
	}
	select {
	case ans := <-a.answers:
		return ans, nil
	case <-ctx.Done():
		return egress.Answer{}, ctx.Err()
	}
}

// tierWorld is one daemon with an HTTPS server for api.test, registry.test and git.test
// (a git http-backend under /git/, which wants the real git secret) on 127.0.0.4, the
// operator tier "review" (as-bound credentials, no push) and a test asker.
type tierWorld struct {
	e          *env
	log        *netLog
	port       int
	bare       string
	asker      *heldAsker
	gitSecret  string
	apiSecret  string
	gitBinding string
	configure  func(*daemon.Config)
}

func newTierWorld(t *testing.T, more ...func(*daemon.Config)) *tierWorld {
	t.Helper()
	w := &tierWorld{gitSecret: "tier-git-secret-0c4e9a7d31", apiSecret: "tier-api-secret-5b18f2e6c0",
		asker: &heldAsker{asked: make(chan egress.Question), answers: make(chan egress.Answer)}}
	in := newInternet(t)
	w.log = in.log
	root := t.TempDir()
	git := gitServerAt(t, root, "repo", func(r *http.Request, _ bool) bool {
		_, p, ok := r.BasicAuth()
		return ok && p == w.gitSecret
	}, in.log)
	w.bare = filepath.Join(root, "repo.git")
	mux := http.NewServeMux()
	mux.Handle("/git/", git)
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		in.log.add("tier %s %s %s auth=%s", r.Host, r.Method, r.URL.Path, r.Header.Get("Authorization"))
		fmt.Fprintf(rw, "served %s %s\n", r.Method, r.URL.Path)
	})
	up := testutil.NewUpstreamCA(t, "api.test", "registry.test", "git.test")
	w.port = tlsServe(t, up, mux)
	w.gitBinding = fmt.Sprintf("git.test:%d", w.port)
	caFile := upstreamCAFile(t, up)
	w.configure = func(c *daemon.Config) {
		in.configure(c)
		for _, n := range []string{"api.test", "registry.test", "git.test"} {
			c.EgressHosts[n] = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
		}
		c.EgressCA = caFile
		c.Tiers = []tiers.Tier{{Name: "review", Description: "push nothing", Credentials: tiers.Credentials{Mode: tiers.CredAsBound}, Git: tiers.Git{Push: tiers.PushNone}}}
		c.CredentialAsker = w.asker
		for _, f := range more {
			f(c)
		}
	}
	w.e = newEnvWith(t, w.configure)
	ctx := context.Background()
	if err := w.e.c.SetSecret(ctx, "GIT_TOKEN", w.gitSecret, &v1.SecretScope{Hosts: []string{w.gitBinding}}); err != nil {
		t.Fatal(err)
	}
	if err := w.e.c.SetSecret(ctx, "API_TOKEN", w.apiSecret, &v1.SecretScope{Hosts: []string{fmt.Sprintf("api.test:%d", w.port)}}); err != nil {
		t.Fatal(err)
	}
	return w
}

// create makes a sandbox of runtime rt and tier with the given run-phase rules and bindings, and
// dumps its egress log if t fails.
func (w *tierWorld) create(t *testing.T, rt, tier string, rules v1.PolicyRules, sets map[string][]string, creds ...v1.Credential) *v1.Sandbox {
	t.Helper()
	sb, err := w.e.c.Create(context.Background(), v1.CreateSandboxRequest{Runtime: rt, Tier: tier, Credentials: creds,
		MemoryBytes: 512 << 20, DiskBytes: 256 << 20,
		Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": rules}, Sets: sets}})
	if err != nil {
		t.Fatalf("create %s sandbox of tier %s: %v", rt, tier, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			w.e.d.Egress.Flush()
			list, _ := w.e.c.Egress(context.Background(), sb.ID, 0)
			for _, x := range list {
				t.Logf("egress: %+v", x)
			}
			t.Logf("server: %v", w.log.all())
		}
	})
	return sb
}

// pushes counts the pushes the git server has received.
func (w *tierWorld) pushes() int {
	n := 0
	for _, l := range w.log.all() {
		if strings.Contains(l, "git push received") {
			n++
		}
	}
	return n
}

func (w *tierWorld) gitCred() v1.Credential {
	return v1.Credential{Secret: "GIT_TOKEN", Hosts: []string{w.gitBinding}}
}

// clone clones the server's repository into /tmp/repo with one commit on top.
func (w *tierWorld) clone(t *testing.T, id string) {
	t.Helper()
	w.e.mustSh(id, fmt.Sprintf(`set -e
	git config --global user.email agent@example.test; git config --global user.name agent
	git clone -q "https://x-access-token:$GIT_TOKEN@git.test:%d/git/repo.git" /tmp/repo
	cd /tmp/repo; echo change >> README; git commit -qam "agent change"`, w.port))
}

// curl runs curl in the sandbox and returns the HTTP status ("000": no answer). It takes
// any certificate (-k): what stops a request is moat's decision, not a TLS failure.
func (w *tierWorld) curl(id, args string) string {
	return strings.TrimSpace(w.e.mustSh(id, `curl -k -s --max-time 10 -o /dev/null -w '%{http_code}' `+args+`; true`))
}

// TestTiers: each built-in tier (and an operator's) tried, through a real daemon on runc and
// runsc,
// with one thing it allows and one it forbids, asserted at the receiving server:
//   - read: GET passes, POST is refused (the server never sees it), a push is refused;
//     a create with a binding that can POST is refused;
//   - edit: a registry host is reachable in the setup phase and not in run; a push to the
//     agent branch lands, one to main does not, one touching a protected path neither;
//   - integrate: a write API named in an HTTP rule passes; a push touching a protected
//     path is held for approval;
//   - operate: a request carrying a credential is held until the asker answers: approved,
//     the server sees the value; denied, it never sees the request;
//   - review (operator tier, no push): the git gate refuses a push to the agent branch
//     with rule no-push.
func TestTiers(t *testing.T) {
	w := newTierWorld(t)
	e := w.e
	ctx := context.Background()
	base := fmt.Sprintf("https://api.test:%d", w.port)
	api := fmt.Sprintf("api.test:%d", w.port)

	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			e.run("read", func(t *testing.T, e *env) {
				sb := w.create(t, rt, "read", v1.PolicyRules{Allow: []string{api, w.gitBinding}}, nil, w.gitCred())
				if sb.Tier != "read" || sb.GitPush != "none" || strings.Join(sb.Credentials[0].Methods, ",") != "GET,HEAD" {
					t.Errorf("the read sandbox as inspected: tier %q push %q credential %+v", sb.Tier, sb.GitPush, sb.Credentials)
				}
				if got := w.curl(sb.ID, base+"/read/get-"+rt); got != "200" || !w.log.contains("GET /read/get-"+rt) {
					t.Errorf("GET under read: %s", got)
				}
				if got := w.curl(sb.ID, "-X POST -d x "+base+"/read/post-"+rt); got != "403" || w.log.contains("/read/post-"+rt) {
					t.Errorf("POST under read: %s (the server saw it: %v)", got, w.log.contains("/read/post-"+rt))
				}
				// A push from a repository made in the sandbox: refused, the server never gets it.
				pushes := w.pushes()
				r := e.sh(sb.ID, "", fmt.Sprintf(`set -e; git config --global user.email a@example.test; git config --global user.name a
				git init -q -b main /tmp/r; cd /tmp/r; echo x > f; git add f; git commit -qm x
				git push "https://x-access-token:$GIT_TOKEN@git.test:%d/git/repo.git" HEAD:refs/heads/agent/%s/x`, w.port, sb.ID))
				if r.code == 0 || w.pushes() != pushes {
					t.Errorf("push under read: %+v (server: %v)", r, w.log.all())
				}
				// Its policy stays within the tier: a new one is merged with it, a wider one refused.
				if _, err := e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"run": {Net: "allow-all"}}}}); err == nil || !strings.Contains(err.Error(), "tier read: policy: this tier limits the network") {
					t.Errorf("widening the read sandbox's policy: %v", err)
				}
				res, err := e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"run": {Allow: []string{api}}}}})
				if err != nil || strings.Join(res.Sandbox.Policy.Phases["run"].HTTP, ";") != api+" GET,HEAD" {
					t.Fatalf("a new policy of the read sandbox: %+v %v", res, err)
				}
				if got := w.curl(sb.ID, "-X POST -d x "+base+"/read/again-"+rt); got != "403" || w.log.contains("/read/again-"+rt) {
					t.Errorf("POST under read after a policy change: %s", got)
				}
				_, err = e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: "runc", Tier: "read",
					Credentials: []v1.Credential{{Secret: "API_TOKEN", Hosts: []string{api}, Methods: []string{"POST"}}}})
				if err == nil || !strings.Contains(err.Error(), "tier read: credentials: API_TOKEN: this tier lets credentials into GET and HEAD requests only; POST can write") {
					t.Errorf("create read with a POST binding: %v", err)
				}
			})

			e.run("edit", func(t *testing.T, e *env) {
				registry := fmt.Sprintf("registry.test:%d", w.port)
				sb := w.create(t, rt, "edit", v1.PolicyRules{Allow: []string{w.gitBinding}},
					map[string][]string{"registries": {registry + " GET,HEAD"}}, w.gitCred())
				if sb.Policy.Phase != "setup" {
					t.Errorf("an edit sandbox starts in %q, want setup", sb.Policy.Phase)
				}
				if got := w.curl(sb.ID, fmt.Sprintf("https://%s/pkg/setup-%s", registry, rt)); got != "200" || !w.log.contains("registry.test:") || !w.log.contains("GET /pkg/setup-"+rt) {
					t.Errorf("registry in setup: %s", got)
				}
				w.clone(t, sb.ID)
				if _, err := e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Phase: "run"}); err != nil {
					t.Fatal(err)
				}
				if got := w.curl(sb.ID, fmt.Sprintf("https://%s/pkg/run-%s", registry, rt)); got == "200" || w.log.contains("/pkg/run-"+rt) {
					t.Errorf("registry in run: %s (the server saw it: %v)", got, w.log.contains("/pkg/run-"+rt))
				}
				prefix := "refs/heads/agent/" + sb.ID + "/"
				if r := e.sh(sb.ID, "", `cd /tmp/repo && git push origin HEAD:`+prefix+`work`); r.code != 0 {
					t.Fatalf("push to the agent branch: %+v", r)
				}
				refs := serverRefs(t, w.bare)
				if refs[prefix+"work"] == "" {
					t.Fatalf("server refs after the agent push: %v", refs)
				}
				for _, line := range []string{
					`git push origin HEAD:main`,
					`mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml && git add . && git commit -qm ci && git push origin HEAD:` + prefix + `work`,
				} {
					r := e.sh(sb.ID, "", "cd /tmp/repo && "+line)
					if r.code == 0 || !strings.Contains(r.stderr, "remote: moat: ") || strings.Contains(r.stderr, "held for approval") {
						t.Errorf("%s: %+v", line, r)
					}
					if got := serverRefs(t, w.bare); !maps.Equal(got, refs) {
						t.Errorf("%s changed the server's refs: %v", line, got)
					}
				}
			})

			e.run("integrate", func(t *testing.T, e *env) {
				sb := w.create(t, rt, "integrate", v1.PolicyRules{Allow: []string{w.gitBinding}, HTTP: []string{api + " POST /write/"}}, nil, w.gitCred())
				if sb.GitProtected != "hold" {
					t.Errorf("integrate git_protected %q", sb.GitProtected)
				}
				if got := w.curl(sb.ID, "-X POST -d x "+base+"/write/one-"+rt); got != "200" || !w.log.contains("POST /write/one-"+rt) {
					t.Errorf("the chosen write API: %s", got)
				}
				if got := w.curl(sb.ID, "-X POST -d x "+base+"/other-"+rt); got != "403" || w.log.contains("POST /other-"+rt) {
					t.Errorf("a write outside the chosen API: %s", got)
				}
				w.clone(t, sb.ID)
				refs := serverRefs(t, w.bare)
				prefix := "refs/heads/agent/" + sb.ID + "/"
				r := e.sh(sb.ID, "", `cd /tmp/repo && mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml && git add . && git commit -qm ci && git push origin HEAD:`+prefix+`work`)
				if r.code == 0 || heldRE.FindStringSubmatch(r.stderr) == nil {
					t.Errorf("a protected-path push under integrate is not held: %+v", r)
				}
				if got := serverRefs(t, w.bare); !maps.Equal(got, refs) {
					t.Errorf("a held push changed the server's refs: %v", got)
				}
			})

			e.run("operate", func(t *testing.T, e *env) {
				sb := w.create(t, rt, "operate", v1.PolicyRules{Allow: []string{api}}, nil, v1.Credential{Secret: "API_TOKEN", Hosts: []string{api}})
				if len(sb.Credentials) != 1 || !sb.Credentials[0].Approve {
					t.Fatalf("operate credential: %+v", sb.Credentials)
				}
				if _, err := e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Phase: "run"}); err != nil {
					t.Fatal(err)
				}
				// held runs a request with the placeholder in the background, checks it is held
				// (asked about, not at the server) and answers.
				held := func(t *testing.T, path string, approve bool) string {
					t.Helper()
					var mu sync.Mutex
					var status string
					done := make(chan struct{})
					go func() {
						defer close(done)
						r := e.sh(sb.ID, "", `curl -s --max-time 60 -o /dev/null -w '%{http_code}' -X POST -d x -H "Authorization: Bearer $API_TOKEN" `+base+path)
						mu.Lock()
						status = strings.TrimSpace(r.stdout)
						mu.Unlock()
					}()
					var q egress.Question
					select {
					case q = <-w.asker.asked:
					case <-done:
						t.Fatalf("%s was not held: status %s", path, status)
					case <-time.After(30 * time.Second):
						t.Fatalf("%s: no question within 30 s", path)
					}
					if q.Kind != egress.AskCredential || q.Sandbox != sb.ID || q.Secret != "API_TOKEN" || q.Method != "POST" || q.Path != path || q.Name != "api.test" {
						t.Errorf("question %+v", q)
					}
					if strings.Contains(fmt.Sprintf("%+v", q), w.apiSecret) {
						t.Errorf("the question carries the value: %+v", q)
					}
					if w.log.contains(path) {
						t.Errorf("%s reached the server before the decision", path)
					}
					w.asker.answers <- egress.Answer{ApprovalID: "ap-test", Approved: approve, Scope: egress.ScopeOnce, By: "tester", Reason: "test"}
					<-done
					mu.Lock()
					defer mu.Unlock()
					return status
				}
				if got := held(t, "/deploy/approved-"+rt, true); got != "200" || !w.log.contains("POST /deploy/approved-"+rt+" auth=Bearer "+w.apiSecret) {
					t.Errorf("approved: status %s, server %v", got, w.log.all())
				}
				if got := held(t, "/deploy/denied-"+rt, false); got != "403" || w.log.contains("/deploy/denied-"+rt) {
					t.Errorf("denied: status %s, the server saw it: %v", got, w.log.contains("/deploy/denied-"+rt))
				}
				if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
					return x.Rule == "approval" && !x.Allowed && strings.Contains(x.Reason, "POST /deploy/denied-"+rt+": credential API_TOKEN: denied (test) by tester")
				}); !ok {
					t.Error("no egress entry for the denied use")
				}
			})

			e.run("review (operator tier, no push)", func(t *testing.T, e *env) {
				tier, err := e.c.Tier(ctx, "review")
				if err != nil || tier.Builtin || tier.Git.Push != "none" {
					t.Fatalf("GET /v1/tiers/review: %+v %v", tier, err)
				}
				sb := w.create(t, rt, "review", v1.PolicyRules{Allow: []string{w.gitBinding}}, nil, w.gitCred())
				w.clone(t, sb.ID)
				before := serverRefs(t, w.bare)
				r := e.sh(sb.ID, "", `cd /tmp/repo && git push origin HEAD:refs/heads/agent/`+sb.ID+`/work`)
				if r.code == 0 || !strings.Contains(r.stderr, "this sandbox may not push at all (its tier allows no push)") {
					t.Errorf("push under review: %+v", r)
				}
				if got := serverRefs(t, w.bare); !maps.Equal(got, before) {
					t.Errorf("the refused push changed the server's refs: %v", got)
				}
				if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool { return x.Proto == "git" && !x.Allowed && x.Rule == "no-push" }); !ok {
					t.Error("no egress entry with rule no-push")
				}
			})
		})
	}

	var unknown error
	_, unknown = e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: "runc", Tier: "nope"})
	if unknown == nil || !strings.Contains(unknown.Error(), `no such tier (have read, edit, integrate, operate, review`) || errors.Is(unknown, context.Canceled) {
		t.Errorf("create with an unknown tier: %v", unknown)
	}
}

// TestTiersRestart: a sandbox's tier and what it set survive a daemon restart and a stop
// and start of the sandbox (the boundary is attached again from the record): the record
// still names the tier, a push is still refused with rule no-push and the server's refs are
// unchanged, and a read sandbox's POST is still refused unseen.
func TestTiersRestart(t *testing.T) {
	w := newTierWorld(t)
	e := w.e
	ctx := context.Background()
	api := fmt.Sprintf("api.test:%d", w.port)
	review := w.create(t, "runc", "review", v1.PolicyRules{Allow: []string{w.gitBinding}}, nil, w.gitCred())
	read := w.create(t, "runc", "read", v1.PolicyRules{Allow: []string{api}}, nil)
	w.clone(t, review.ID)
	refs := serverRefs(t, w.bare)

	e.stop()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), w.configure)
	if _, err := e.c.Stop(ctx, read.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Start(ctx, read.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{review.ID, read.ID} {
		sb, err := e.c.Get(ctx, id)
		if err != nil || sb.Tier == "" || sb.Tier == "review" && sb.GitPush != "none" {
			t.Fatalf("after the restart: %+v %v", sb, err)
		}
	}
	r := e.sh(review.ID, "", `cd /tmp/repo && git push origin HEAD:refs/heads/agent/`+review.ID+`/work`)
	if r.code == 0 || !strings.Contains(r.stderr, "this sandbox may not push at all") {
		t.Errorf("push after the restart: %+v", r)
	}
	if got := serverRefs(t, w.bare); !maps.Equal(got, refs) {
		t.Errorf("server refs changed: %v", got)
	}
	if got := w.curl(read.ID, fmt.Sprintf("-X POST -d x https://%s/restart/post", api)); got != "403" || w.log.contains("/restart/post") {
		t.Errorf("POST from the read sandbox after a restart and a stop/start: %s", got)
	}
	if got := w.curl(read.ID, fmt.Sprintf("https://%s/restart/get", api)); got != "200" || !w.log.contains("GET /restart/get") {
		t.Errorf("GET from the read sandbox after a restart and a stop/start: %s", got)
	}
}
