package intercept

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/safegit"
)

// TestGitObjects: through Serve with the quarantine, against a real git http-backend:
// a new agent branch lands; a forced update and a workflow change are refused with the
// reason in git's output and the server unchanged; a push that cannot be checked (the
// quarantine unavailable, the body over MaxBody, the remote refusing fetches) is refused
// as an unpack error, promptly, and the server is unchanged. Throughout, no host process
// has the credential in its argv or environment (security case D09).
func TestGitObjects(t *testing.T) {
	g := newGitGateRig(t)
	serverRef := func(ref string) string {
		out, _ := g.git("--git-dir="+g.bare, "rev-parse", "--verify", "--quiet", ref)
		return strings.TrimSpace(out)
	}
	commit := func(name, content string) string {
		p := filepath.Join(g.work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		g.must(t, "-C", g.work, "add", "-A")
		g.must(t, "-C", g.work, "commit", "-q", "-m", name)
		return g.must(t, "-C", g.work, "rev-parse", "HEAD")
	}
	refused := func(t *testing.T, want string, args ...string) {
		t.Helper()
		before := g.must(t, "--git-dir="+g.bare, "for-each-ref")
		start := time.Now()
		out, err := g.push("gate", args...)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("push %v: %v, want a refusal saying %q:\n%s", args, err, want, out)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("push %v took %v to be refused", args, d)
		}
		if after := g.must(t, "--git-dir="+g.bare, "for-each-ref"); after != before {
			t.Errorf("push %v changed the server's refs:\n%s\nwas\n%s", args, after, before)
		}
	}

	// Security case D09: while the gate fetches from the remote, no process on the host
	// has the credential in its argv or environment.
	stop := watchProcs(t, value)
	defer stop()
	first := commit("a.txt", "a\n")
	if out, err := g.push("gate", "HEAD:"+prefix+"w"); err != nil || serverRef(prefix+"w") != first {
		t.Fatalf("push of a new agent branch: %v\n%s", err, out)
	}
	g.must(t, "-C", g.work, "commit", "-q", "--amend", "-m", "rewritten")
	refused(t, "non-fast-forward", "-f", "HEAD:"+prefix+"w")
	g.must(t, "-C", g.work, "reset", "-q", "--hard", first)
	commit(".github/workflows/ci.yml", "on: push\n")
	refused(t, `touches protected path ".github/workflows/ci.yml"`, "HEAD:"+prefix+"w")
	g.must(t, "-C", g.work, "reset", "-q", "--hard", first)

	next := commit("b.txt", "b\n")
	q := g.objects.Quarantine
	g.objects.Quarantine = func(context.Context, string) (*safegit.Quarantine, error) { return nil, errors.New("broken") }
	refused(t, "remote unpack failed: moat: the quarantine repository is unavailable", "HEAD:"+prefix+"w")
	g.objects.Quarantine = q
	g.objects.MaxBody = 100
	refused(t, "the push is larger than 100 bytes", "HEAD:"+prefix+"w")
	g.objects.MaxBody = 0
	g.noFetch.Store(true)
	refused(t, "remote unpack failed: moat: could not fetch from api.test to check the push", "HEAD:"+prefix+"w")
	g.noFetch.Store(false)
	if out, err := g.push("gate", "HEAD:"+prefix+"w"); err != nil || serverRef(prefix+"w") != next {
		t.Fatalf("fast-forward push: %v\n%s", err, out)
	}
	if n := stop(); n == 0 {
		t.Error("the /proc watcher saw no git process: it proves nothing")
	}
}

// watchProcs reads every process's cmdline and environ every few milliseconds until
// stop, failing t if secret appears (except in the test's CGI git server, the remote);
// stop returns how many git fetch processes it saw.
func watchProcs(t *testing.T, secret string) (stop func() int) {
	done := make(chan struct{})
	seen := make(chan int, 1)
	go func() {
		gits := map[string]bool{}
		probed := false
		for {
			select {
			case <-done:
				if !probed {
					t.Error("the /proc watcher never caught the fetch listener's URL to probe it")
				}
				seen <- len(gits)
				return
			default:
			}
			ents, _ := os.ReadDir("/proc")
			for _, e := range ents {
				if e.Name()[0] < '0' || e.Name()[0] > '9' {
					continue
				}
				cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
				environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
				// The test's git server (CGI) is the remote: it is given the credential.
				if strings.Contains(string(environ), "GATEWAY_INTERFACE=CGI") {
					continue
				}
				for f, b := range map[string][]byte{"cmdline": cmdline, "environ": environ} {
					if strings.Contains(string(b), secret) {
						t.Errorf("process %s has the credential in its %s: %q", e.Name(), f, b)
					}
				}
				// git's remote helper has the fetch listener's URL in its argv, which every
				// local user can read: the URL alone must get nothing.
				if i := strings.Index(string(cmdline), "http://127.0.0.1:"); i >= 0 && !probed {
					u := strings.TrimRight(string(cmdline[i:]), "\x00")
					if res, err := http.Get(u + "/info/refs?service=git-upload-pack"); err == nil {
						probed = true
						res.Body.Close()
						if res.StatusCode != http.StatusNotFound {
							t.Errorf("the fetch listener answered %d to a request without its key", res.StatusCode)
						}
					}
				}
				if c := string(cmdline); strings.HasPrefix(c, "/usr/") && strings.Contains(c, "git") && strings.Contains(c, "fetch") {
					gits[e.Name()] = true
					// Nor the fetch listener's secret path.
					if strings.Contains(c, "127.0.0.1:") {
						t.Errorf("process %s has the fetch URL in its argv: %q", e.Name(), c)
					}
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var once bool
	var n int
	return func() int {
		if !once {
			once = true
			close(done)
			n = <-seen
		}
		return n
	}
}
