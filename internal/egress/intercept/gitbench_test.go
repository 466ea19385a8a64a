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
	"testing"
	"time"

	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/safegit"
)

// BenchmarkGitPush compares a real `git push` of a new 1 MiB file (a fast-forward of the
// agent's branch) sent directly to a git http-backend on loopback TLS with the same push
// through the git gate with the quarantine (Serve: TLS terminated, push spooled, bases
// fetched back through the session, pack received and checked, fast-forward and paths
// decided, the bytes forwarded with the credential). Each iteration commits a new file
// (not timed) and pushes it; p50 is reported as p50-ms.
func BenchmarkGitPush(b *testing.B) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		b.Skip("no git")
	}
	dir := b.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C",
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.test", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.test"}
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	bare, work := filepath.Join(dir, "r.git"), filepath.Join(dir, "work")
	run("init", "-q", "--bare", "-b", "main", bare)
	run("-C", bare, "config", "http.receivepack", "true")
	run("init", "-q", "-b", "main", work)
	run("-C", work, "commit", "-q", "--allow-empty", "-m", "initial")
	run("-C", work, "push", "-q", bare, "main")
	backend := &cgi.Handler{Path: gitBin, Args: []string{"http-backend"}, Env: []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1"}}
	u := newUpstream(b, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+value {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	})
	pol, err := gitgate.Compile(gitgate.PolicySpec{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	qdir := filepath.Join(dir, "q")
	spool := filepath.Join(dir, "spool")
	if err := os.Mkdir(spool, 0o700); err != nil {
		b.Fatal(err)
	}
	ca, err := NewCA("sbx-bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); ln.Close() })
	cfg := Config{
		CA: ca, RootCAs: u.roots, Injections: []Injection{bearer()},
		Git: &GitGate{Policy: pol, Objects: &GitObjects{
			SpoolDir: spool,
			Quarantine: func(ctx context.Context, _ string) (*safegit.Quarantine, error) {
				if _, err := os.Stat(qdir); err == nil {
					return safegit.Open(qdir, safegit.Options{})
				}
				return safegit.Create(ctx, qdir, safegit.Options{})
			},
		}},
	}
	gatePort := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
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
				Serve(ctx, c, head[:n], host, gatePort, u.dial, cfg)
			}()
		}
	}()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		b.Fatal(err)
	}
	blob := make([]byte, 1<<20)
	for _, bc := range []struct {
		name, addr, auth string
		tls              []string
	}{
		// The upstream's CA is not at hand as a file: the direct push skips verification
		// (a negligible part of a push).
		{"direct", u.srv.Listener.Addr().String(), value, []string{"-c", "http.sslVerify=false"}},
		{"gate", ln.Addr().String(), placeholder, []string{"-c", "http.sslCAInfo=" + caFile}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, port, _ := strings.Cut(bc.addr, ":")
			url := fmt.Sprintf("https://%s:%s/r.git", host, port)
			ref := prefix + bc.name
			args := append([]string{"-C", work, "-c", "http.curloptResolve=" + host + ":" + port + ":127.0.0.1",
				"-c", "http.extraHeader=Authorization: Bearer " + bc.auth, "-c", "http.postBuffer=67108864"}, bc.tls...)
			var times []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				rand.Read(blob)
				if err := os.WriteFile(filepath.Join(work, "blob.bin"), blob, 0o644); err != nil {
					b.Fatal(err)
				}
				run("-C", work, "add", "blob.bin")
				run("-C", work, "commit", "-q", "-m", fmt.Sprintf("blob %s %d", bc.name, i))
				b.StartTimer()
				start := time.Now()
				run(append(slices.Clone(args), "push", "-q", url, "HEAD:"+ref)...)
				times = append(times, time.Since(start))
			}
			b.StopTimer()
			cmd := exec.Command("git", "--git-dir="+bare, "rev-parse", ref)
			cmd.Env = env
			got, err := cmd.Output()
			cmd = exec.Command("git", "-C", work, "rev-parse", "HEAD")
			cmd.Env = env
			want, _ := cmd.Output()
			if err != nil || string(got) != string(want) {
				b.Fatalf("the server's %s is %q (%v), want %q", ref, got, err, want)
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
