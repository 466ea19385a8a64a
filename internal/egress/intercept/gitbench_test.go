package intercept

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/safegit"
)

// gitGateRig is a real git http-backend behind the test upstream (it takes only "Bearer
// value") and, on its own port, Serve with the git gate and its quarantine in front of
// it; plus a client work tree whose main is on the server.
type gitGateRig struct {
	dir, bare, work, caFile string
	env                     []string
	u                       *upstream
	ln                      net.Listener
	objects                 *GitObjects
	events                  *gitRecorder
	cfg                     Config // Serve's
	port                    int
	// noFetch makes the server answer 503 to fetches (upload-pack).
	noFetch atomic.Bool
}

func newGitGateRig(tb testing.TB) *gitGateRig {
	tb.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		tb.Skip("no git")
	}
	g := &gitGateRig{dir: tb.TempDir(), events: &gitRecorder{}}
	g.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + g.dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C",
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.test", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.test"}
	g.bare, g.work = filepath.Join(g.dir, "r.git"), filepath.Join(g.dir, "work")
	g.must(tb, "init", "-q", "--bare", "-b", "main", g.bare)
	g.must(tb, "-C", g.bare, "config", "http.receivepack", "true")
	g.must(tb, "init", "-q", "-b", "main", g.work)
	g.must(tb, "-C", g.work, "commit", "-q", "--allow-empty", "-m", "initial")
	g.must(tb, "-C", g.work, "push", "-q", g.bare, "main")
	backend := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Env: []string{"GIT_PROJECT_ROOT=" + g.dir, "GIT_HTTP_EXPORT_ALL=1"}}
	g.u = newUpstream(tb, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+value {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		if g.noFetch.Load() && (strings.HasSuffix(r.URL.Path, "/git-upload-pack") || r.URL.Query().Get("service") == "git-upload-pack") {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		backend.ServeHTTP(w, r)
	})
	pol, err := gitgate.Compile(gitgate.PolicySpec{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	qdir, spool := filepath.Join(g.dir, "q"), filepath.Join(g.dir, "spool")
	if err := os.Mkdir(spool, 0o700); err != nil {
		tb.Fatal(err)
	}
	g.objects = &GitObjects{
		SpoolDir: spool,
		// As the daemon sets it (egress/gitquarantine.go): an allowed push's reports are
		// made after the exchange.
		Reported: func(string, map[string]*safegit.ChangeReport, string) {},
		Quarantine: func(ctx context.Context, _ string) (*safegit.Quarantine, error) {
			if _, err := os.Stat(qdir); err == nil {
				return safegit.Open(qdir, safegit.Options{})
			}
			return safegit.Create(ctx, qdir, safegit.Options{})
		},
	}
	ca, err := NewCA("sbx-bench", 0)
	if err != nil {
		tb.Fatal(err)
	}
	if g.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(func() { cancel(); g.ln.Close() })
	cfg := Config{CA: ca, RootCAs: g.u.roots, Injections: []Injection{bearer()},
		Git: &GitGate{Policy: pol, Objects: g.objects, Record: g.events.record}}
	port := g.ln.Addr().(*net.TCPAddr).Port
	g.cfg, g.port = cfg, port
	go func() {
		for {
			c, err := g.ln.Accept()
			if err != nil {
				return
			}
			go func() {
				head := make([]byte, 512)
				n, err := c.Read(head)
				if err != nil {
					c.Close()
					return
				}
				Serve(ctx, c, head[:n], host, port, g.u.dial, cfg)
			}()
		}
	}()
	g.caFile = filepath.Join(g.dir, "ca.pem")
	if err := os.WriteFile(g.caFile, ca.CertPEM(), 0o600); err != nil {
		tb.Fatal(err)
	}
	return g
}

// git runs git with the rig's isolated environment.
func (g *gitGateRig) git(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = g.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (g *gitGateRig) must(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := g.git(args...)
	if err != nil {
		tb.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(out)
}

// push runs git push from the work tree, through the gate (via "gate") or directly to
// the upstream (the upstream's CA is not at hand as a file: the direct push skips
// verification, a negligible part of a push).
func (g *gitGateRig) push(via string, args ...string) (string, error) {
	addr, auth, tlsArgs := g.u.srv.Listener.Addr().String(), value, []string{"-c", "http.sslVerify=false"}
	if via == "gate" {
		addr, auth, tlsArgs = g.ln.Addr().String(), placeholder, []string{"-c", "http.sslCAInfo=" + g.caFile}
	}
	_, port, _ := strings.Cut(addr, ":")
	a := append([]string{"-C", g.work, "-c", "http.curloptResolve=" + host + ":" + port + ":127.0.0.1",
		"-c", "http.extraHeader=Authorization: Bearer " + auth, "-c", "http.postBuffer=67108864"}, tlsArgs...)
	a = append(a, "push", "-q", fmt.Sprintf("https://%s:%s/r.git", host, port))
	return g.git(append(a, args...)...)
}

// BenchmarkGitPush compares a real `git push` of a new 1 MiB file (a fast-forward of the
// agent's branch) sent directly to a git http-backend on loopback TLS with the same push
// through the git gate with the quarantine (Serve: TLS terminated, push spooled, bases
// fetched back through the session, pack received and checked, fast-forward and paths
// decided, the bytes forwarded with the credential). Each iteration commits a new file
// (not timed) and pushes it; p50 is reported as p50-ms.
func BenchmarkGitPush(b *testing.B) {
	g := newGitGateRig(b)
	blob := make([]byte, 1<<20)
	for _, via := range []string{"direct", "gate"} {
		b.Run(via, func(b *testing.B) {
			ref := prefix + via
			var times []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				rand.Read(blob)
				if err := os.WriteFile(filepath.Join(g.work, "blob.bin"), blob, 0o644); err != nil {
					b.Fatal(err)
				}
				g.must(b, "-C", g.work, "add", "blob.bin")
				g.must(b, "-C", g.work, "commit", "-q", "-m", fmt.Sprintf("blob %s %d", via, i))
				b.StartTimer()
				start := time.Now()
				if out, err := g.push(via, "HEAD:"+ref); err != nil {
					b.Fatalf("push: %v\n%s", err, out)
				}
				times = append(times, time.Since(start))
			}
			b.StopTimer()
			if got, want := g.must(b, "--git-dir="+g.bare, "rev-parse", ref), g.must(b, "-C", g.work, "rev-parse", "HEAD"); got != want {
				b.Fatalf("the server's %s is %s, want %s", ref, got, want)
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
