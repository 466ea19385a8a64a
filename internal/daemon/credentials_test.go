package daemon_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/cgi"
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

// TestCredentialBrokering: the sandbox holds a placeholder; the bound host receives the
// real value and nobody else does; responses carrying the value reach the sandbox with the
// placeholder; plain HTTP to the bound host is refused; the value is found nowhere on the
// sandbox's side, in the daemon's files or its API answers.
func TestCredentialBrokering(t *testing.T) {
	const secret = "real-secret-0f3c9a7e5b1d"
	in := newInternet(t)
	git := gitServer(t, "repo", func(r *http.Request, _ bool) bool { return r.Header.Get("Authorization") == "Bearer "+secret }, in.log)
	up := testutil.NewUpstreamCA(t, "api.test", "other.test")
	caFile := upstreamCAFile(t, up)
	port := tlsServe(t, up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/git/") {
			git.ServeHTTP(w, r)
			return
		}
		in.log.add("cred host=%s path=%s auth=%s", r.Host, r.URL.Path, r.Header.Get("Authorization"))
		// An upstream that echoes what it got: the sandbox must not see the value back.
		fmt.Fprintf(w, "you sent %s\n", r.Header.Get("Authorization"))
	}))
	// Another service on the bound host, on a port the binding does not name.
	port2 := tlsServe(t, up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("port2 path=%s auth=%s", r.URL.Path, r.Header.Get("Authorization"))
	}))
	hosts := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hosts, []byte("127.0.0.4 api.test other.test\n"), 0o644)

	var daemonLog testutil.SyncBuffer
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		data, _ := os.ReadFile(hosts)
		extra, _ := egress.ParseHosts(data)
		for k, v := range extra {
			c.EgressHosts[k] = v
		}
		c.EgressCA = caFile
		// Everything the daemon logs, at debug level, is searched for the value.
		c.Log = slog.New(slog.NewTextHandler(&daemonLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	ctx := context.Background()
	if err := e.c.SetSecret(ctx, "API_TOKEN", secret, &v1.SecretScope{Hosts: []string{fmt.Sprintf("api.test:%d", port)}}); err != nil {
		t.Fatal(err)
	}
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{
				Runtime:     rt,
				Policy:      &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"api.test", "other.test"}}}},
				Credentials: []v1.Credential{{Secret: "API_TOKEN", Hosts: []string{fmt.Sprintf("api.test:%d", port)}}},
			})
			ph := strings.TrimSpace(e.mustSh(sb.ID, `echo "$API_TOKEN"`))
			if !strings.HasPrefix(ph, "moat-placeholder-") {
				t.Fatalf("API_TOKEN inside = %q, want a placeholder", ph)
			}

			// Each client reads its own CA variable.
			clients := map[string]string{
				"curl":   fmt.Sprintf(`curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://api.test:%d/curl-%s`, port, rt),
				"python": fmt.Sprintf(`python3 -c 'import os, urllib.request; r = urllib.request.Request("https://api.test:%d/python-%s", headers={"Authorization": "Bearer " + os.environ["API_TOKEN"]}); print(urllib.request.urlopen(r, timeout=10).read().decode())'`, port, rt),
				"node":   fmt.Sprintf(`node -e 'fetch("https://api.test:%d/node-%s", {headers: {Authorization: "Bearer " + process.env.API_TOKEN}}).then(r => r.text()).then(t => console.log(t)).catch(e => { console.error(e); process.exit(1) })'`, port, rt),
			}
			for name, line := range clients {
				e.run(name, func(t *testing.T, e *env) {
					out := e.mustSh(sb.ID, line)
					if !strings.Contains(out, "you sent Bearer "+ph) || strings.Contains(out, secret) {
						t.Errorf("%s got %q: want the echo to carry the placeholder, never the value", name, out)
					}
					if !in.log.contains(fmt.Sprintf("path=/%s-%s auth=Bearer %s", name, rt, secret)) {
						t.Errorf("the bound host did not receive the real value: %v", in.log.all())
					}
				})
			}

			e.run("git clone and push over HTTPS", func(t *testing.T, e *env) {
				defer func() {
					if t.Failed() {
						e.d.Egress.Flush()
						list, _ := e.c.Egress(ctx, sb.ID, 0)
						for _, x := range list {
							t.Logf("egress: %+v", x)
						}
					}
				}()
				out := e.mustSh(sb.ID, fmt.Sprintf(`set -e
	git config --global user.email agent@example.test; git config --global user.name agent
	auth="http.extraHeader=Authorization: Bearer $API_TOKEN"
	git -c "$auth" clone -q https://api.test:%d/git/repo.git /tmp/repo
	cd /tmp/repo; echo change >> README; git commit -qam "agent change %s"
	git -c "$auth" push -q origin HEAD:refs/heads/agent/%s/work 2>&1; git log --oneline | head -1`, port, rt, sb.ID))
				if t.Failed() || !strings.Contains(out, "agent change "+rt) {
					t.Errorf("clone/push: %q", out)
				}
				if !in.log.contains("git push received") {
					t.Errorf("the git server saw no push: %v", in.log.all())
				}
				// Without the placeholder the server refuses: the token really is required.
				if r := e.sh(sb.ID, "", fmt.Sprintf(`git clone -q https://api.test:%d/git/repo.git /tmp/anon`, port)); r.code == 0 {
					t.Error("clone without the token succeeded")
				}
			})

			e.run("unbound host gets the placeholder", func(t *testing.T, e *env) {
				e.mustSh(sb.ID, fmt.Sprintf(`curl -sSk --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://other.test:%d/other-%s`, port, rt))
				if !in.log.contains("path=/other-" + rt + " auth=Bearer " + ph) {
					t.Errorf("other.test did not get the placeholder: %v", in.log.all())
				}
			})

			e.run("another port of the bound host gets the placeholder", func(t *testing.T, e *env) {
				// Intercepted (responses scrubbed), and nothing injected.
				e.mustSh(sb.ID, fmt.Sprintf(`curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://api.test:%d/p2-%s`, port2, rt))
				if !in.log.contains("port2 path=/p2-" + rt + " auth=Bearer " + ph) {
					t.Errorf("the other port did not get the placeholder: %v", in.log.all())
				}
			})

			e.run("plain HTTP to the bound host is refused", func(t *testing.T, e *env) {
				if r := e.sh(sb.ID, "", fmt.Sprintf(`curl -sS --max-time 5 -H "Authorization: Bearer $API_TOKEN" http://api.test:%d/plain-%s`, port, rt)); r.code == 0 {
					t.Errorf("plain HTTP went through: %+v", r)
				}
				if in.log.contains("path=/plain-" + rt) {
					t.Error("the bound host saw a plain request")
				}
			})

			e.run("the value is nowhere on the sandbox's side", func(t *testing.T, e *env) {
				// Inside, as root: every process's environment, the trust store, every writable
				// place (/usr is the host's, read-only).
				// The value reaches the search on stdin, not in the command line: the audit log
				// records commands (and the daemon's files are searched below).
				var out bytes.Buffer
				if _, err := e.c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c",
					`read -r v; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c -e "$v"; grep -rl -e "$v" /etc /home /root /tmp /var /run /opt /srv /workspace 2>/dev/null | head; grep -l "PRIVATE KEY" /etc/moat/* || true`},
					User: "root", Stdin: strings.NewReader(secret + "\n"), Stdout: &out}); err != nil {
					t.Fatal(err)
				}
				if strings.TrimSpace(out.String()) != "0" {
					t.Errorf("found inside: %q", out.String())
				}
				// Outside: the sandbox's drive and run directory, the daemon's data files (the
				// secret store keeps it encrypted), the API's answer.
				for _, dir := range []string{filepath.Join(e.runDir, "sandboxes", sb.ID), e.dataDir} {
					filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
						if d != nil && d.IsDir() && (d.Name() == "rootfs" || d.Name() == "lower") {
							return filepath.SkipDir // mounted views of the template; writes are in drive/
						}
						if err != nil || !d.Type().IsRegular() {
							return nil
						}
						if data, err := os.ReadFile(path); err == nil && bytes.Contains(data, []byte(secret)) {
							t.Errorf("the value is in %s", path)
						}
						return nil
					})
				}
				got, _ := e.c.Get(ctx, sb.ID)
				js, _ := json.Marshal(got)
				if bytes.Contains(js, []byte(secret)) {
					t.Error("the API answer holds the value")
				}
				list, _ := e.c.Secrets(ctx)
				js, _ = json.Marshal(list)
				if bytes.Contains(js, []byte(secret)) || !bytes.Contains(js, []byte("API_TOKEN")) {
					t.Errorf("secret ls: %s", js)
				}
				// secret ls names the sandboxes binding the secret, and the hosts.
				bound := false
				for _, s := range list {
					for _, b := range s.Bindings {
						bound = bound || s.Name == "API_TOKEN" && b.Sandbox == sb.ID && b.Kind == "placeholder" && strings.Join(b.Hosts, ",") == fmt.Sprintf("api.test:%d", port)
					}
				}
				if !bound {
					t.Errorf("secret ls does not show the binding of %s: %s", sb.ID, js)
				}
			})

			e.run("each use is audited, without the value", func(t *testing.T, e *env) {
				evs, err := e.c.Events(ctx, sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				var uses []string
				for _, ev := range evs {
					if ev.Kind == "credential" {
						uses = append(uses, ev.Detail)
					}
				}
				joined := strings.Join(uses, "\n")
				if !strings.Contains(joined, "API_TOKEN GET https://api.test/curl-"+rt) || strings.Contains(joined, secret) {
					t.Errorf("credential events: %q", joined)
				}
			})
		})
	}

	// Rotation: a new value set while a sandbox runs is what the next request carries; the
	// sandbox keeps its placeholder and sees neither value.
	e.run("rotation", func(t *testing.T, e *env) {
		sb := e.create(v1.CreateSandboxRequest{
			Policy:      &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"api.test"}}}},
			Credentials: []v1.Credential{{Secret: "API_TOKEN", Hosts: []string{fmt.Sprintf("api.test:%d", port)}}},
		})
		const rotated = "rotated-secret-77aa19c4e2"
		call := func(tag string) string {
			return e.mustSh(sb.ID, fmt.Sprintf(`curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://api.test:%d/rot-%s`, port, tag))
		}
		call("before")
		// A new value keeps the secret's scope (nil: unchanged), or it would not be sent.
		if err := e.c.SetSecret(ctx, "API_TOKEN", rotated, nil); err != nil {
			t.Fatal(err)
		}
		out := call("after")
		if !in.log.contains("path=/rot-before auth=Bearer "+secret) || !in.log.contains("path=/rot-after auth=Bearer "+rotated) {
			t.Errorf("the upstream did not get the old value, then the new one: %v", in.log.all())
		}
		if strings.Contains(out, rotated) || !strings.Contains(out, "you sent Bearer moat-placeholder-") {
			t.Errorf("the echo of the rotated value reached the sandbox: %q", out)
		}
		if err := e.c.SetSecret(ctx, "API_TOKEN", secret, nil); err != nil {
			t.Fatal(err)
		}
	})

	// A binding to a secret that does not exist is refused at create.
	if _, err := e.c.Create(ctx, v1.CreateSandboxRequest{Credentials: []v1.Credential{{Secret: "NOPE", Hosts: []string{"api.test"}}}}); err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Errorf("unknown secret: %v", err)
	}
	for _, s := range in.log.all() {
		if strings.Contains(s, "REACHED") {
			t.Errorf("upstream log: %s", s)
		}
	}
	if log := daemonLog.String(); strings.Contains(log, secret) || !strings.Contains(log, "egress") {
		t.Errorf("the daemon log holds the value (or logged nothing: %d bytes)", len(log))
	}
}

// tlsUpstream serves h over TLS on 127.0.0.4 with a certificate for names from a test CA
// of its own; it returns the port and a file holding that CA (for --egress-ca).
func tlsUpstream(t *testing.T, h http.Handler, names ...string) (port int, caFile string) {
	t.Helper()
	up := testutil.NewUpstreamCA(t, names...)
	return tlsServe(t, up, h), upstreamCAFile(t, up)
}

// upstreamCAFile writes up's CA certificate to a file (for --egress-ca).
func upstreamCAFile(t *testing.T, up testutil.UpstreamCA) string {
	t.Helper()
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, up.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return caFile
}

// tlsServe serves h over TLS on 127.0.0.4 with up's certificate; it returns the port.
func tlsServe(t *testing.T, up testutil.UpstreamCA, h http.Handler) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{up.Cert}}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// gitServer serves a bare repository NAME.git under /git/ over git's smart HTTP protocol
// (git http-backend via CGI), only to requests auth lets in (write: a push).
func gitServer(t *testing.T, name string, auth func(r *http.Request, write bool) bool, log *netLog) http.Handler {
	t.Helper()
	return gitServerAt(t, t.TempDir(), name, auth, log)
}

// gitServerAt is gitServer with the repository at root/NAME.git.
func gitServerAt(t *testing.T, root, name string, auth func(r *http.Request, write bool) bool, log *netLog) http.Handler {
	t.Helper()
	bare := filepath.Join(root, name+".git")
	work := filepath.Join(root, "work")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare},
		{"-C", bare, "config", "http.receivepack", "true"},
		{"init", "-q", "-b", "main", work},
		{"-C", work, "-c", "user.email=t@example.test", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "initial"},
		{"-C", work, "remote", "add", "origin", bare},
		{"-C", work, "push", "-q", "origin", "main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-C", work, "add", "README"},
		{"-C", work, "-c", "user.email=t@example.test", "-c", "user.name=t", "commit", "-q", "-m", "readme"},
		{"-C", work, "push", "-q", "origin", "main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	return http.StripPrefix("/git", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write := strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack"
		if !strings.HasPrefix(r.URL.Path, "/"+name+".git/") || !auth(r, write) {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "token required", http.StatusUnauthorized)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			log.add("git push received %s", name)
		}
		if r.ContentLength < 0 {
			// git sends a large push chunked, and net/http/cgi refuses chunked bodies.
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
		}
		backend.ServeHTTP(w, r)
	}))
}
