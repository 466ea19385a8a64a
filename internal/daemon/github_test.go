package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/internal/testutil/fakegithub"
)

// TestGitHubAppTokens: a GitHub App key bound with a task's scope gives the sandbox a
// placeholder; moat mints an installation token limited to the task's repositories and
// permissions (checked by a loopback GitHub that verifies the App JWT), git clone and push
// over HTTPS work with it against a git server that accepts only valid tokens for the
// repository, the token never enters the sandbox, and it is revoked when the sandbox
// stops and when it is deleted.
func TestGitHubAppTokens(t *testing.T) {
	in := newInternet(t)
	gh := fakegithub.New(t, fakegithub.WithRepositories("widget", "other"))
	auth := func(repo string) func(*http.Request, bool) bool {
		return func(r *http.Request, write bool) bool {
			ok := gh.Authorize(r, repo, write)
			in.log.add("git auth repo=%s write=%t ok=%t auth=%s", repo, write, ok, r.Header.Get("Authorization"))
			return ok
		}
	}
	repos := map[string]http.Handler{
		"widget": gitServer(t, "widget", auth("widget"), in.log),
		"other":  gitServer(t, "other", auth("other"), in.log),
	}
	port, caFile := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for name, h := range repos {
			if strings.HasPrefix(r.URL.Path, "/git/"+name+".git/") {
				h.ServeHTTP(w, r)
				return
			}
		}
		http.NotFound(w, r)
	}), "git.test")

	var daemonLog testutil.SyncBuffer
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		c.EgressHosts["git.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
		c.EgressCA = caFile
		c.Log = slog.New(slog.NewTextHandler(&daemonLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ctx := context.Background()
	app := v1.GitHubApp{AppID: gh.AppID(), InstallationID: gh.InstallationID(), APIURL: gh.URL()}
	gitHosts := []string{"git.test", fmt.Sprintf("git.test:%d", port)}
	if err := e.c.SetGitHubApp(ctx, "GH_TOKEN", string(gh.PrivateKeyPEM()), app, &v1.SecretScope{Hosts: gitHosts, Repositories: []string{"widget", "gadget"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetGitHubApp(ctx, "BAD_APP", "not a key", app, &v1.SecretScope{Hosts: gitHosts}); err == nil || strings.Contains(err.Error(), "not a key") {
		t.Errorf("a bad App key was stored, or the error quotes it: %v", err)
	}
	list, _ := e.c.Secrets(ctx)
	if i := slices.IndexFunc(list, func(s v1.SecretInfo) bool { return s.Name == "GH_TOKEN" }); i < 0 || list[i].GitHubApp == nil || list[i].GitHubApp.AppID != gh.AppID() {
		t.Errorf("secret ls: %+v", list)
	}
	if err := e.c.SetSecret(ctx, "STATIC", "static-value-123456", &v1.SecretScope{Hosts: gitHosts}); err != nil {
		t.Fatal(err)
	}
	scope := &v1.GitHubScope{Repositories: []string{"widget"}, Permissions: map[string]string{"contents": "write"}}
	pol := &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"git.test"}}}}

	// Binding mistakes are refused at create, naming the fix.
	for _, c := range []struct {
		cred v1.Credential
		want string
	}{
		{v1.Credential{Secret: "GH_TOKEN", Hosts: []string{"git.test"}}, "--github-token"},
		{v1.Credential{Secret: "STATIC", Hosts: []string{"git.test"}, GitHub: scope}, "not a GitHub App key"},
		{v1.Credential{Secret: "GH_TOKEN", Hosts: []string{"git.test"}, GitHub: &v1.GitHubScope{}}, "no repositories"},
		{v1.Credential{Secret: "GH_TOKEN", Hosts: []string{"git.test"}, GitHub: &v1.GitHubScope{Repositories: []string{"widget"}, Permissions: map[string]string{"contents": "owner"}}}, "not read, write or admin"},
		// Outside the App key's scope: a repository it does not name, a host it does not.
		{v1.Credential{Secret: "GH_TOKEN", Hosts: []string{"git.test"}, GitHub: &v1.GitHubScope{Repositories: []string{"widget", "other"}}}, "repository other is outside the GitHub App key's scope (widget, gadget)"},
		{v1.Credential{Secret: "GH_TOKEN", Hosts: []string{"git.test", "evil.test"}, GitHub: scope}, "host evil.test (port 443) is outside the secret's scope"},
	} {
		if _, err := e.c.Create(ctx, v1.CreateSandboxRequest{Policy: pol, Credentials: []v1.Credential{c.cred}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("create with %+v: %v, want an error naming %q", c.cred, err, c.want)
		}
	}

	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			mintsBefore := len(gh.Tokens())
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt, Policy: pol,
				Credentials: []v1.Credential{{Secret: "GH_TOKEN", Hosts: []string{fmt.Sprintf("git.test:%d", port)}, GitHub: scope}}})
			ph := strings.TrimSpace(e.mustSh(sb.ID, `echo "$GH_TOKEN"`))
			if !strings.HasPrefix(ph, "moat-placeholder-") {
				t.Fatalf("GH_TOKEN inside = %q", ph)
			}
			clone := func(repo, dir string) result {
				return e.sh(sb.ID, "", fmt.Sprintf(`git clone -q "https://x-access-token:$GH_TOKEN@git.test:%d/git/%s.git" %s 2>&1`, port, repo, dir))
			}
			if r := clone("widget", "/tmp/w"); r.code != 0 {
				t.Fatalf("clone: %+v\nlog: %v", r, in.log.all())
			}
			out := e.mustSh(sb.ID, fmt.Sprintf(`set -e; cd /tmp/w
	git config user.email agent@example.test; git config user.name agent
	echo change >> README; git commit -qam "agent change %s"; git push -q origin HEAD:refs/heads/agent/%s/work 2>&1; echo pushed`, rt, sb.ID))
			if !strings.Contains(out, "pushed") || !in.log.contains("git push received widget") {
				t.Errorf("push: %q; log %v", out, in.log.all())
			}
			// The token is limited to the task's repositories: another one is refused.
			if r := clone("other", "/tmp/o"); r.code == 0 {
				t.Errorf("clone of a repository outside the scope succeeded")
			}

			toks := gh.Tokens()[mintsBefore:]
			if len(toks) != 1 {
				t.Fatalf("minted %d tokens for one task, want 1 (cached)", len(toks))
			}
			tok := toks[0]
			g, ok := gh.Lookup(tok)
			if !ok || !slices.Equal(g.Repositories, []string{"widget"}) || g.Permissions["contents"] != "write" || len(g.Permissions) != 1 {
				t.Errorf("the token's grant: %+v (valid %v)", g, ok)
			}
			if !in.log.contains("git auth repo=widget write=true ok=true") {
				t.Errorf("the git server never accepted the token for a push: %v", in.log.all())
			}

			// The token is nowhere inside, nor in the daemon's files, API answers or log.
			r := e.sh(sb.ID, "root", `cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c `+tok+`; grep -rl -e `+tok+` /etc /home /root /tmp /var /run 2>/dev/null | head`)
			if strings.TrimSpace(r.stdout) != "0" {
				t.Errorf("the token is inside: %q", r.stdout)
			}
			got, _ := e.c.Get(ctx, sb.ID)
			js, _ := json.Marshal(got)
			if strings.Contains(string(js), tok) || strings.Contains(daemonLog.String(), tok) {
				t.Error("the token is in an API answer or the daemon log")
			}
			if data, err := os.ReadFile(filepath.Join(e.dataDir, "secrets.json")); err != nil || strings.Contains(string(data), "PRIVATE KEY") {
				t.Errorf("the App key is stored in clear (%v)", err)
			}

			// Stopping revokes the token; a new start mints a new one.
			if _, err := e.c.Stop(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			waitRevoked(t, gh, tok)
			if _, err := e.c.Start(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			if r := e.sh(sb.ID, "", fmt.Sprintf(`cd /tmp && rm -rf w2 && git clone -q "https://x-access-token:$GH_TOKEN@git.test:%d/git/widget.git" w2 2>&1`, port)); r.code != 0 {
				t.Fatalf("clone after restart: %+v", r)
			}
			toks = gh.Tokens()[mintsBefore:]
			if len(toks) != 2 || toks[1] == tok {
				t.Fatalf("tokens after restart: %d", len(toks))
			}
			if err := e.c.Delete(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			waitRevoked(t, gh, toks[1])

			// Each use is audited by secret, method and path; the last revocation is
			// recorded in the background, just after GitHub answers.
			var joined string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				evs, _ := e.c.Events(ctx, sb.ID)
				var uses []string
				for _, ev := range evs {
					if ev.Kind == "credential" {
						uses = append(uses, ev.Detail)
					}
				}
				joined = strings.Join(uses, "\n")
				if strings.Count(joined, "token revoked") >= 2 || time.Now().After(deadline) {
					break
				}
			}
			if !strings.Contains(joined, "GH_TOKEN POST https://git.test/git/widget.git/git-receive-pack") || strings.Contains(joined, tok) {
				t.Errorf("credential events: %q", joined)
			}
			// Mints and revocations are audited with the scope: two of each (start, restart).
			if n, r := strings.Count(joined, "installation token minted for widget (contents:write)"), strings.Count(joined, "installation token revoked for widget"); n != 2 || r != 2 {
				t.Errorf("audited %d mints and %d revocations, want 2 and 2: %q", n, r, joined)
			}
		})
	}
	// A static secret replaced by an App key while a sandbox binds it is never sent as is.
	e.run("static secret replaced by an App key", func(t *testing.T, e *env) {
		sb := e.create(v1.CreateSandboxRequest{Policy: pol, Credentials: []v1.Credential{{Secret: "STATIC", Hosts: []string{fmt.Sprintf("git.test:%d", port)}}}})
		if err := e.c.SetGitHubApp(ctx, "STATIC", string(gh.PrivateKeyPEM()), app, nil); err != nil {
			t.Fatal(err)
		}
		r := e.sh(sb.ID, "", fmt.Sprintf(`curl -sS --max-time 10 -H "Authorization: Bearer $STATIC" https://git.test:%d/git/widget.git/info/refs?service=git-upload-pack`, port))
		if r.code == 0 {
			t.Errorf("the request went through: %+v", r)
		}
		for _, l := range in.log.all() {
			if strings.Contains(l, "PRIVATE KEY") || strings.Contains(l, "MII") {
				t.Errorf("the App key reached the upstream: %.80s", l)
			}
		}
		e.d.Egress.Flush()
		list, _ := e.c.Egress(ctx, sb.ID, 0)
		if !slices.ContainsFunc(list, func(x v1.EgressEntry) bool { return strings.Contains(x.Error, "now a GitHub App key") }) {
			t.Errorf("the egress log does not say why the connection ended: %+v", list)
		}
	})
}

// waitRevoked waits until the fake GitHub has seen tok revoked.
func waitRevoked(t *testing.T, gh *fakegithub.Server, tok string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(gh.Revoked(), tok) {
		if time.Now().After(deadline) {
			t.Fatalf("the token was not revoked (revoked: %d)", len(gh.Revoked()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := gh.Lookup(tok); ok {
		t.Error("a revoked token is still valid")
	}
}
