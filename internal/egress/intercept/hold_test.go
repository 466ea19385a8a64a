package intercept

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/gitgate"
)

// TestGitHoldReplay: with GitObjects.Hold, a push whose only problem is a protected path
// is held (git fails at once naming the change and the path; the server is unchanged;
// Hold got the request with the placeholder, never the credential, and the body as sent),
// a push with another problem too is refused as before, and Replay of the held request
// lands it on the server: the credential is injected on the way (the server takes only
// the real value). Replaying it again gets the server's refusal (the ref moved).
func TestGitHoldReplay(t *testing.T) {
	g := newGitGateRig(t)
	var held []HeldPush
	var bodies [][]byte
	g.objects.Hold = func(_ context.Context, p HeldPush) error {
		b, err := io.ReadAll(io.LimitReader(p.Body, p.Size))
		if err != nil {
			return err
		}
		held, bodies = append(held, p), append(bodies, b)
		return nil
	}
	serverRef := func(ref string) string {
		out, _ := g.git("--git-dir="+g.bare, "rev-parse", "--verify", "--quiet", ref)
		return strings.TrimSpace(out)
	}
	write := func(name, content string) {
		p := filepath.Join(g.work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.txt", "a\n")
	g.must(t, "-C", g.work, "add", "-A")
	g.must(t, "-C", g.work, "commit", "-q", "-m", "a")
	first := g.must(t, "-C", g.work, "rev-parse", "HEAD")
	if out, err := g.push("gate", "HEAD:"+prefix+"w"); err != nil {
		t.Fatalf("first push: %v\n%s", err, out)
	}
	write(".github/workflows/ci.yml", "on: push\n")
	g.must(t, "-C", g.work, "add", "-A")
	g.must(t, "-C", g.work, "commit", "-q", "-m", "ci")
	tip := g.must(t, "-C", g.work, "rev-parse", "HEAD")

	// Non-fast-forward and protected: refused, not held (a commit beside the server's).
	g.must(t, "-C", g.work, "checkout", "-q", "--detach", first+"~1")
	write(".github/workflows/ci.yml", "on: push\n")
	g.must(t, "-C", g.work, "add", "-A")
	g.must(t, "-C", g.work, "commit", "-q", "-m", "beside")
	g.must(t, "-C", g.work, "tag", "-f", "amended")
	g.must(t, "-C", g.work, "checkout", "-q", "main")
	if out, err := g.push("gate", "-f", "amended:"+prefix+"w"); err == nil || strings.Contains(out, "held for approval") || !strings.Contains(out, "non-fast-forward") {
		t.Errorf("a forced protected push: %v\n%s", err, out)
	}
	if len(held) != 0 {
		t.Fatalf("a forced push was held")
	}

	out, err := g.push("gate", "HEAD:"+prefix+"w")
	m := regexp.MustCompile(`remote: moat: held for approval as (ch-[0-9a-f]{8}): \.github/workflows/ci\.yml`).FindStringSubmatch(out)
	if err == nil || m == nil {
		t.Fatalf("held push: %v\n%s", err, out)
	}
	if serverRef(prefix+"w") != first {
		t.Fatalf("a held push moved the server's ref")
	}
	if len(held) != 1 {
		t.Fatalf("Hold called %d times", len(held))
	}
	h := held[0]
	if h.Event.ChangeID != m[1] || !h.Event.Held || h.Event.Decision.Allow || h.Event.Reports[prefix+"w"] == nil || len(h.Event.Hits[prefix+"w"]) != 1 {
		t.Errorf("held event %+v", h.Event)
	}
	if h.Method != http.MethodPost || h.Path != "/r.git/git-receive-pack" || h.Header.Get("Content-Type") != gitgate.ContentTypeRequest {
		t.Errorf("held request %s %s %v", h.Method, h.Path, h.Header)
	}
	if got := h.Header.Get("Authorization"); got != "Bearer "+placeholder {
		t.Errorf("held Authorization %q, want the placeholder", got)
	}
	if bytes.Contains(bodies[0], []byte(value)) || strings.Contains(strings.Join(h.Header.Values("Authorization"), ""), value) {
		t.Errorf("the held push carries the credential")
	}
	if n := len(g.events.all()); n == 0 {
		t.Errorf("no event recorded for the held push")
	}

	replay := func() ReplayResult {
		t.Helper()
		r, err := http.NewRequest(h.Method, "https://"+host+h.Path, bytes.NewReader(bodies[0]))
		if err != nil {
			t.Fatal(err)
		}
		r.Header = h.Header.Clone()
		r.ContentLength = int64(len(bodies[0]))
		res, err := Replay(context.Background(), r, host, g.port, g.u.dial, g.cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := replay()
	rep, err := gitgate.ParseReport(bytes.NewReader(res.Body), len(res.Body) > 4 && res.Body[4] <= 3)
	if res.Status != 200 || err != nil || rep.Failed() {
		t.Fatalf("replay: %d %q %+v %v", res.Status, res.Body, rep, err)
	}
	if serverRef(prefix+"w") != tip {
		t.Fatalf("after the replay the server's ref is %s, want %s", serverRef(prefix+"w"), tip)
	}
	res = replay()
	rep, err = gitgate.ParseReport(bytes.NewReader(res.Body), len(res.Body) > 4 && res.Body[4] <= 3)
	if err != nil || !rep.Failed() || serverRef(prefix+"w") != tip {
		t.Errorf("second replay: %+v %v", rep, err)
	}
}
