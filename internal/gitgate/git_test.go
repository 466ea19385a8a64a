package gitgate

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run the real git client (and git http-backend) on loopback, with an
// environment of their own: no system or global git configuration, HOME in a temporary
// directory, no proxy.

var writeSeeds = flag.Bool("write-seeds", false, "write captured push requests to testdata/fuzz/FuzzParseReceivePack")

type gitEnv struct {
	t   *testing.T
	env []string
}

func newGitEnv(t *testing.T) *gitEnv {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	home := t.TempDir()
	return &gitEnv{t: t, env: []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=moat test", "GIT_AUTHOR_EMAIL=test@moat.invalid",
		"GIT_COMMITTER_NAME=moat test", "GIT_COMMITTER_EMAIL=test@moat.invalid",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
		"LANG=C", "LC_ALL=C",
		"NO_PROXY=*", "no_proxy=*",
	}}
}

// run runs git in dir and returns stdout, stderr and the error (an *exec.ExitError for a
// non-zero exit). It never takes more than a minute: a hanging push fails the test.
func (g *gitEnv) run(dir string, stdin io.Reader, args ...string) (string, string, error) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, g.env, stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		g.t.Fatalf("git %v timed out (hung?); stderr:\n%s", args, errb.String())
	}
	return strings.TrimSpace(out.String()), errb.String(), err
}

func (g *gitEnv) must(dir string, args ...string) string {
	g.t.Helper()
	out, stderr, err := g.run(dir, nil, args...)
	if err != nil {
		g.t.Fatalf("git %v: %v\n%s", args, err, stderr)
	}
	return out
}

// commit writes file=content in repo dir and commits it, returning the commit id.
func (g *gitEnv) commit(dir, file, content string) string {
	g.t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, file)), 0o755); err != nil {
		g.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		g.t.Fatal(err)
	}
	g.must(dir, "add", "-A")
	g.must(dir, "commit", "-q", "-m", "change "+file)
	return g.must(dir, "rev-parse", "HEAD")
}

func readBody(t *testing.T, r *http.Request) []byte {
	t.Helper()
	body, err := DecodeBody(r.Body, r.Header.Get("Content-Encoding"), 64<<20)
	if err != nil {
		t.Errorf("request body: %v", err)
		return nil
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Errorf("reading request: %v", err)
	}
	return b
}

// gateServer is a loopback git server that advertises refs itself and answers every push
// with moat's decision, as the gate will.
type gateServer struct {
	t      *testing.T
	refs   map[string]string // ref -> id advertised
	caps   string
	policy *Policy
	ff     FastForward
	// report, when set, replaces RefusalReport.
	report func(*Request, Decision) Report

	mu       sync.Mutex
	requests []*Request
}

func (s *gateServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Route as the gate will: by Classify.
	service, repo, err := Classify(r.Method, r.URL)
	if err != nil || repo != "/repo.git" {
		s.t.Errorf("Classify(%s %s) = %v %q %v", r.Method, r.URL, service, repo, err)
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	switch service {
	case PushAdvertisement:
		var b bytes.Buffer
		pw := NewPktWriter(&b)
		_ = pw.WriteString("# service=git-receive-pack\n")
		_ = pw.Flush()
		first := true
		for ref, id := range s.refs {
			line := id + " " + ref
			if first {
				line += "\x00" + s.caps
				first = false
			}
			_ = pw.WriteString(line + "\n")
		}
		if first {
			_ = pw.WriteString(strings.Repeat("0", 40) + " capabilities^{}\x00" + s.caps + "\n")
		}
		_ = pw.Flush()
		w.Header().Set("Content-Type", ContentTypeAdvertisement)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(b.Bytes())
	case Push:
		body := readBody(s.t, r)
		req, err := ParseReceivePack(bytes.NewReader(body), Limits{})
		if err != nil {
			s.t.Errorf("ParseReceivePack: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.Pack != nil {
			if _, err := io.Copy(io.Discard, req.Pack); err != nil {
				s.t.Errorf("reading pack: %v", err)
			}
		}
		s.mu.Lock()
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		d := s.policy.Decide(req, s.ff)
		rep := RefusalReport(d)
		if s.report != nil {
			rep = s.report(req, d)
		}
		w.Header().Set("Content-Type", ContentTypeResult)
		if err := WriteReport(w, req.Capabilities, rep); err != nil {
			s.t.Errorf("WriteReport: %v", err)
		}
	default:
		http.NotFound(w, r)
	}
}

func TestRealGitPushRefused(t *testing.T) {
	g := newGitEnv(t)
	client := t.TempDir()
	g.must(client, "init", "-q", "-b", "main")
	base := g.commit(client, "README", "base\n")
	g.commit(client, "work", "work\n") // HEAD is ahead of every advertised ref
	policy, err := Compile(PolicySpec{Prefix: DefaultPrefix("t")})
	if err != nil {
		t.Fatal(err)
	}
	// The test stands in for the quarantine repository: the client's repository has every
	// object pushed.
	ff := func(ref, old, new string) bool {
		_, _, err := g.run(client, nil, "merge-base", "--is-ancestor", old, new)
		return err == nil
	}

	const withSideband = "report-status report-status-v2 delete-refs side-band-64k quiet atomic ofs-delta push-options object-format=sha1 agent=moat-test"
	const plain = "report-status delete-refs ofs-delta agent=moat-test"
	const outside = "this sandbox may push only to branches under refs/heads/agent/t/"
	for _, tc := range []struct {
		name     string
		caps     string
		setup    func() // runs before the push
		push     []string
		wantOK   bool
		protect  bool     // check protected paths, against the advertised main
		stderr   []string // must appear
		noStderr []string // must not appear
	}{
		{
			name: "main, side-band", caps: withSideband, push: []string{"HEAD:refs/heads/main"},
			stderr: []string{"remote: moat: refs/heads/main: " + outside, "! [remote rejected] HEAD -> main (moat: " + outside + ")"},
		},
		{
			name: "main, report-status only", caps: plain, push: []string{"HEAD:refs/heads/main"},
			stderr:   []string{"! [remote rejected] HEAD -> main (moat: " + outside + ")"},
			noStderr: []string{"remote: moat:"},
		},
		{
			name: "tag", caps: withSideband, push: []string{"refs/tags/v1"},
			setup:  func() { g.must(client, "tag", "v1") },
			stderr: []string{"remote: moat: refs/tags/v1: pushing tags is not allowed", "! [remote rejected] v1 -> v1 (moat: pushing tags"},
		},
		{
			name: "agent branch and main: all or nothing", caps: withSideband,
			push: []string{"HEAD:refs/heads/agent/t/new", "HEAD:refs/heads/main"},
			stderr: []string{"remote: moat: refs/heads/main: " + outside,
				"! [remote rejected] HEAD -> agent/t/new (moat: refused because another ref in this push was refused)"},
		},
		{
			name: "delete", caps: withSideband, push: []string{":refs/heads/agent/t/work"},
			stderr: []string{"remote: moat: refs/heads/agent/t/work: deleting refs is not allowed", "! [remote rejected] agent/t/work (moat: deleting refs"},
		},
		{
			name: "force push", caps: withSideband, push: []string{"--force", "HEAD:refs/heads/agent/t/work"},
			setup: func() {
				g.must(client, "checkout", "-q", "--orphan", "other")
				g.commit(client, "OTHER", "unrelated\n")
			},
			stderr: []string{"remote: moat: refs/heads/agent/t/work: non-fast-forward updates", "! [remote rejected] HEAD -> agent/t/work (moat: non-fast-forward"},
		},
		{
			name: "push option", caps: withSideband, push: []string{"-o", "merge_request.create", "HEAD:refs/heads/agent/t/new"},
			stderr: []string{"remote: moat: refs/heads/agent/t/new: push options (git push -o) are not accepted"},
		},
		{
			name: "protected path", caps: withSideband, push: []string{"HEAD:refs/heads/agent/t/ci"}, protect: true,
			setup: func() {
				g.must(client, "checkout", "-q", "-b", "ci", "main")
				g.commit(client, ".github/workflows/ci.yml", "on: push\n")
			},
			stderr: []string{`remote: moat: refs/heads/agent/t/ci: touches protected path ".github/workflows/ci.yml" (protected by ".github/workflows/**")`,
				`! [remote rejected] HEAD -> agent/t/ci (moat: touches protected path ".github/workflows/ci.yml"`},
		},
		{
			name: "fast-forward on the agent branch", caps: withSideband, push: []string{"HEAD:refs/heads/agent/t/work"},
			setup:  func() { g.must(client, "checkout", "-q", "main"); g.commit(client, "ff", "ff\n") },
			wantOK: true, stderr: []string{base[:7] + ".."},
		},
		{
			name: "new agent branch", caps: withSideband, push: []string{"HEAD:refs/heads/agent/t/feature"},
			wantOK: true, stderr: []string{"* [new branch]      HEAD -> agent/t/feature"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			s := &gateServer{t: t, caps: tc.caps, policy: policy, ff: ff, refs: map[string]string{
				"refs/heads/main": base, "refs/heads/agent/t/work": base,
			}}
			if tc.protect {
				// The test stands in for the quarantine: touched paths are the difference
				// between the host's main and the pushed tip.
				m, err := NewPathMatcher(DefaultProtected(), MatcherOptions{})
				if err != nil {
					t.Fatal(err)
				}
				s.report = func(req *Request, d Decision) Report {
					hits := map[string][]Hit{}
					for _, c := range req.Commands {
						out := g.must(client, "diff", "--name-only", "-z", base, c.New)
						h, err := m.Match(strings.Split(strings.TrimRight(out, "\x00"), "\x00"))
						if err != nil {
							t.Errorf("Match: %v", err)
						}
						hits[c.Ref] = h
					}
					return RefusalReport(WithProtected(d, hits))
				}
			}
			srv := httptest.NewServer(s)
			defer srv.Close()
			args := append([]string{"push", "--porcelain=false", srv.URL + "/repo.git"}, tc.push...)
			args = slicesDeleteEmpty(args)
			_, stderr, err := g.run(client, nil, args...)
			var exit *exec.ExitError
			if tc.wantOK {
				if err != nil {
					t.Fatalf("git push failed: %v\n%s", err, stderr)
				}
			} else if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Fatalf("git push: err %v, want a non-zero exit\n%s", err, stderr)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			for _, bad := range tc.noStderr {
				if strings.Contains(stderr, bad) {
					t.Errorf("stderr has %q:\n%s", bad, stderr)
				}
			}
			if len(s.requests) != 1 {
				t.Fatalf("server saw %d push requests, want 1", len(s.requests))
			}
		})
	}
}

// slicesDeleteEmpty drops the "--porcelain=false" placeholder (git has no such option).
func slicesDeleteEmpty(args []string) []string {
	out := args[:0]
	for _, a := range args {
		if a != "--porcelain=false" {
			out = append(out, a)
		}
	}
	return out
}

// recordingBackend runs the real git http-backend as CGI and records each receive-pack
// request body it passes on.
type recordingBackend struct {
	t       *testing.T
	backend http.Handler
	mu      sync.Mutex
	bodies  [][]byte
	chunked []bool // per body: sent with chunked transfer coding
}

func newRecordingBackend(t *testing.T, g *gitEnv, root string) *recordingBackend {
	exe := g.must(root, "--exec-path")
	path := filepath.Join(exe, "git-http-backend")
	if _, err := os.Stat(path); err != nil {
		t.Skip("git http-backend not installed")
	}
	env := append([]string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}, g.env...)
	return &recordingBackend{t: t, backend: &cgi.Handler{Path: path, Dir: root, Env: env}}
}

func (b *recordingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
		raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			b.t.Errorf("reading request: %v", err)
		}
		dec, err := DecodeBody(bytes.NewReader(raw), r.Header.Get("Content-Encoding"), 64<<20)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(dec)
		}
		if err != nil {
			b.t.Errorf("request body: %v", err)
		}
		b.chunked = append(b.chunked, len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked")
		b.mu.Lock()
		b.bodies = append(b.bodies, body)
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(raw))
		r.ContentLength = int64(len(raw))
		r.TransferEncoding = nil
	}
	b.backend.ServeHTTP(w, r)
}

func (b *recordingBackend) last(t *testing.T) []byte {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bodies) == 0 {
		t.Fatal("no receive-pack request recorded")
	}
	return b.bodies[len(b.bodies)-1]
}

func TestRealGitPushParsed(t *testing.T) {
	for _, format := range []ObjectFormat{SHA1, SHA256} {
		t.Run(string(format), func(t *testing.T) {
			g := newGitEnv(t)
			root := t.TempDir()
			g.must(root, "init", "-q", "--bare", "--object-format="+string(format), "srv.git")
			g.must(filepath.Join(root, "srv.git"), "config", "http.receivepack", "true")
			rec := newRecordingBackend(t, g, root)
			srv := httptest.NewServer(rec)
			defer srv.Close()
			url := srv.URL + "/srv.git"

			client := t.TempDir()
			g.must(client, "init", "-q", "-b", "main", "--object-format="+string(format))
			g.commit(client, "README", "base\n")
			first := g.commit(client, "src/a.go", "package a\n")
			const ref = "refs/heads/agent/t/work"

			// 1. Creation: commands, then exactly a pack.
			g.must(client, "push", "-q", url, "HEAD:"+ref)
			body := rec.last(t)
			// The repository index-pack writes into plays the quarantine: it holds what the
			// server holds, so the thin pack of an update resolves.
			quarantine := t.TempDir()
			g.must(quarantine, "init", "-q", "--bare", "--object-format="+string(format))
			req := parseCaptured(t, g, quarantine, format, body, Command{Old: format.ZeroID(), New: first, Ref: ref})
			if !req.Capabilities.Has("report-status") && !req.Capabilities.Has("report-status-v2") {
				t.Errorf("capabilities %q lack report-status", req.Capabilities)
			}
			seed(t, "push-create-"+string(format), body)

			// 2. Fast-forward update.
			second := g.commit(client, "src/b.go", "package a\n")
			g.must(client, "push", "-q", url, "HEAD:"+ref)
			body = rec.last(t)
			parseCaptured(t, g, quarantine, format, body, Command{Old: first, New: second, Ref: ref})
			seed(t, "push-update-"+string(format), body)

			// 3. Deletion: no pack at all.
			g.must(client, "push", "-q", url, ":"+ref)
			body = rec.last(t)
			req, err := ParseReceivePack(bytes.NewReader(body), Limits{})
			if err != nil {
				t.Fatalf("ParseReceivePack(deletion): %v", err)
			}
			if want := (Command{Old: second, New: format.ZeroID(), Ref: ref}); len(req.Commands) != 1 || req.Commands[0] != want || !want.IsDelete() {
				t.Fatalf("deletion commands = %+v, want %+v", req.Commands, want)
			}
			if req.Pack != nil {
				t.Fatal("deletion has a pack")
			}
			seed(t, "push-delete-"+string(format), body)

			// The server took every push: the recording did not change what git sent.
			if out, _, _ := g.run(filepath.Join(root, "srv.git"), nil, "for-each-ref"); out != "" {
				t.Fatalf("server refs after deletion: %q", out)
			}
		})
	}
}

// parseCaptured parses a captured request body and checks it holds exactly want and then
// exactly a pack that git index-pack accepts.
func parseCaptured(t *testing.T, g *gitEnv, repo string, format ObjectFormat, body []byte, want Command) *Request {
	t.Helper()
	req, err := ParseReceivePack(bytes.NewReader(body), Limits{})
	if err != nil {
		t.Fatalf("ParseReceivePack: %v", err)
	}
	if req.Format != format {
		t.Errorf("format %q, want %q", req.Format, format)
	}
	if len(req.Commands) != 1 || req.Commands[0] != want {
		t.Fatalf("commands = %+v, want [%+v]", req.Commands, want)
	}
	if req.Pack == nil {
		t.Fatal("no pack")
	}
	pack, err := io.ReadAll(req.Pack)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(pack, []byte("PACK")) || !bytes.HasSuffix(body, pack) {
		t.Fatalf("pack (%d bytes) does not start with PACK or is not the end of the body", len(pack))
	}
	// The pack's trailer is the hash of everything before it: the remaining bytes are the
	// pack and nothing else.
	var sum []byte
	if format == SHA1 {
		h := sha1.Sum(pack[:len(pack)-sha1.Size])
		sum = h[:]
	} else {
		h := sha256.Sum256(pack[:len(pack)-sha256.Size])
		sum = h[:]
	}
	if !bytes.HasSuffix(pack, sum) {
		t.Fatal("pack trailer is not the hash of the pack")
	}
	if _, stderr, err := g.run(repo, bytes.NewReader(pack), "index-pack", "--stdin", "--fix-thin", "--strict"); err != nil {
		t.Fatalf("git index-pack rejects the pack: %v\n%s", err, stderr)
	}
	if out, stderr, err := g.run(repo, nil, "cat-file", "-t", want.New); err != nil || out != "commit" {
		t.Fatalf("pushed commit not in the indexed pack: %q %v\n%s", out, err, stderr)
	}
	return req
}

// seed writes body as a fuzz seed when the test runs with -write-seeds.
func seed(t *testing.T, name string, body []byte) {
	if !*writeSeeds {
		return
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParseReceivePack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", body)
	if err := os.WriteFile(filepath.Join(dir, "real-"+name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A shallow clone (git clone --depth 1, common for agents) sends its shallow boundary with
// every push. Moat does not refuse it for that: the lines grant nothing, and the real
// server takes the push.
func TestRealGitShallowClientPush(t *testing.T) {
	g := newGitEnv(t)
	root := t.TempDir()
	seedRepo := t.TempDir()
	g.must(seedRepo, "init", "-q", "-b", "main")
	g.commit(seedRepo, "a", "1\n")
	g.commit(seedRepo, "b", "2\n")
	g.must(root, "clone", "-q", "--bare", seedRepo, "srv.git")
	g.must(filepath.Join(root, "srv.git"), "config", "http.receivepack", "true")
	rec := newRecordingBackend(t, g, root)
	srv := httptest.NewServer(rec)
	defer srv.Close()

	client := filepath.Join(t.TempDir(), "c")
	g.must(root, "clone", "-q", "--depth", "1", srv.URL+"/srv.git", client)
	boundary := g.must(client, "rev-parse", "HEAD")
	g.commit(client, "c", "3\n")
	g.must(client, "push", "-q", "origin", "HEAD:refs/heads/agent/t/x")

	req, err := ParseReceivePack(bytes.NewReader(rec.last(t)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Shallow) != 1 || req.Shallow[0] != boundary {
		t.Fatalf("shallow lines %q, want [%s]", req.Shallow, boundary)
	}
	p, err := Compile(PolicySpec{Prefix: "refs/heads/agent/t/"})
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Decide(req, nil); !d.Allow {
		t.Fatalf("shallow client's push refused: %+v", d)
	}
	seed(t, "push-shallow-sha1", rec.last(t))
}

// A push larger than http.postBuffer is sent chunked; net/http undoes the chunking and the
// parser sees the same request.
func TestRealGitChunkedPush(t *testing.T) {
	g := newGitEnv(t)
	root := t.TempDir()
	g.must(root, "init", "-q", "--bare", "srv.git")
	g.must(filepath.Join(root, "srv.git"), "config", "http.receivepack", "true")
	rec := newRecordingBackend(t, g, root)
	srv := httptest.NewServer(rec)
	defer srv.Close()

	client := t.TempDir()
	g.must(client, "init", "-q", "-b", "main")
	big := make([]byte, 512<<10)
	for i := range big {
		big[i] = byte(i*7919 + i>>8*31) // not compressible to nothing
	}
	if _, err := rand.Read(big[:256<<10]); err != nil {
		t.Fatal(err)
	}
	tip := g.commit(client, "big.bin", string(big))
	g.must(client, "-c", "http.postBuffer=65536", "push", "-q", srv.URL+"/srv.git", "HEAD:refs/heads/agent/t/big")
	if !rec.chunked[len(rec.chunked)-1] {
		t.Fatal("git did not send the push chunked")
	}
	quarantine := t.TempDir()
	g.must(quarantine, "init", "-q", "--bare")
	parseCaptured(t, g, quarantine, SHA1, rec.last(t), Command{Old: SHA1.ZeroID(), New: tip, Ref: "refs/heads/agent/t/big"})
}
