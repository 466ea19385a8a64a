package intercept

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/gitgate"
)

const (
	zeroID = "0000000000000000000000000000000000000000"
	oneID  = "1111111111111111111111111111111111111111"
	twoID  = "2222222222222222222222222222222222222222"
	prefix = "refs/heads/agent/sbx/"
)

// pushBody is a receive-pack request: commands ("old new ref"), capabilities on the
// first, a flush, then pack (if any) as is.
func pushBody(t testing.TB, caps string, pack []byte, cmds ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	pw := gitgate.NewPktWriter(&b)
	for i, c := range cmds {
		if i == 0 {
			c += "\x00" + caps
		}
		if err := pw.WriteString(c + "\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.Flush(); err != nil {
		t.Fatal(err)
	}
	b.Write(pack)
	return b.Bytes()
}

type gitRecorder struct {
	mu  sync.Mutex
	evs []GitEvent
}

func (r *gitRecorder) record(ev GitEvent) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func (r *gitRecorder) all() []GitEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]GitEvent(nil), r.evs...)
}

func gitHarness(t *testing.T, h http.HandlerFunc) (*upstream, *http.Client, *gitRecorder) {
	t.Helper()
	pol, err := gitgate.Compile(gitgate.PolicySpec{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	rec := &gitRecorder{}
	u := newUpstream(t, h)
	hs := newHarness(t, u, Config{
		Injections: []Injection{bearer()},
		Git:        &GitGate{Policy: pol, Record: rec.record},
	})
	return u, hs.client(), rec
}

func push(t *testing.T, c *http.Client, body io.Reader, encoding string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", "https://api.test/o/r.git/git-receive-pack", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+placeholder)
	req.Header.Set("Content-Type", gitgate.ContentTypeRequest)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// TestGitGateForwardsAllowedPushExactly: an allowed push reaches the upstream byte for
// byte (plain, gzip, chunked with a pack larger than what the gate reads), with the
// credential; git's probe ("0000") passes.
func TestGitGateForwardsAllowedPushExactly(t *testing.T) {
	u, c, rec := gitHarness(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") })
	pack := make([]byte, 300<<10)
	rand.Read(pack)
	copy(pack, "PACK")
	plain := pushBody(t, "report-status side-band-64k", pack, zeroID+" "+oneID+" "+prefix+"work", oneID+" "+twoID+" "+prefix+"two")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()

	cases := []struct {
		name     string
		body     func() io.Reader
		encoding string
		want     []byte
	}{
		{"sized", func() io.Reader { return bytes.NewReader(plain) }, "", plain},
		{"gzip", func() io.Reader { return bytes.NewReader(gz.Bytes()) }, "gzip", gz.Bytes()},
		{"chunked", func() io.Reader { return io.MultiReader(bytes.NewReader(plain)) }, "", plain},
		{"probe", func() io.Reader { return strings.NewReader("0000") }, "", []byte("0000")},
	}
	for i, tc := range cases {
		res, body := push(t, c, tc.body(), tc.encoding)
		if res.StatusCode != 200 || body != "upstream" {
			t.Fatalf("%s: %d %q", tc.name, res.StatusCode, body)
		}
		got := u.seen()
		if len(got) != i+1 {
			t.Fatalf("%s: upstream saw %d requests, want %d", tc.name, len(got), i+1)
		}
		last := got[i]
		if !bytes.Equal([]byte(last.Body), tc.want) {
			t.Errorf("%s: upstream got %d bytes, want the %d sent, unchanged", tc.name, len(last.Body), len(tc.want))
		}
		if last.Header.Get("Authorization") != "Bearer "+value {
			t.Errorf("%s: the credential was not injected", tc.name)
		}
	}
	evs := rec.all()
	if len(evs) != 3 { // the probe decides nothing
		t.Fatalf("recorded %d events, want 3: %+v", len(evs), evs)
	}
	for _, ev := range evs {
		if ev.Err != nil || !ev.Decision.Allow || ev.Repo != "/o/r.git" || len(ev.Decision.Verdicts) != 2 {
			t.Errorf("event %+v", ev)
		}
	}
}

// TestGitGateRefusesBeforeUpstream: a refused push is answered by the gate with a git
// report (side-band when asked, plain otherwise) or, for a client that reads no report, a
// 403; malformed pushes and git requests Classify refuses get 403. None reaches the
// upstream.
func TestGitGateRefusesBeforeUpstream(t *testing.T) {
	u, c, rec := gitHarness(t, nil)
	pack := append([]byte("PACK"), make([]byte, 1000)...)

	res, body := push(t, c, bytes.NewReader(pushBody(t, "report-status", pack, zeroID+" "+oneID+" refs/heads/main")), "")
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != gitgate.ContentTypeResult ||
		!strings.Contains(body, "unpack ok\n") || !strings.Contains(body, "ng refs/heads/main moat: this sandbox may push only to branches under "+prefix) {
		t.Errorf("push to main: %d %q", res.StatusCode, body)
	}
	res, body = push(t, c, bytes.NewReader(pushBody(t, "report-status side-band-64k", nil, oneID+" "+zeroID+" "+prefix+"work")), "")
	if res.StatusCode != 200 || !strings.Contains(body, "\x02moat: "+prefix+"work: deleting refs is not allowed") {
		t.Errorf("deletion with side-band: %d %q", res.StatusCode, body)
	}
	res, body = push(t, c, bytes.NewReader(pushBody(t, "side-band-64k", pack, zeroID+" "+oneID+" refs/tags/v1")), "")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "refs/tags/v1: pushing tags is not allowed") {
		t.Errorf("tag push without report-status: %d %q", res.StatusCode, body)
	}
	res, body = push(t, c, strings.NewReader("garbage"), "")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "moat: git gate: ") {
		t.Errorf("malformed push: %d %q", res.StatusCode, body)
	}
	res, body = push(t, c, bytes.NewReader(pushBody(t, "report-status", pack, zeroID+" "+oneID+" "+prefix+"x")), "br")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "Content-Encoding") {
		t.Errorf("push in an unknown encoding: %d %q", res.StatusCode, body)
	}
	for _, tc := range []struct{ method, url string }{
		{"POST", "https://api.test/o/r.git/git-receive-pack/../x"},
		{"GET", "https://api.test/o/r.git/info/refs?service=git-receive-pack&service=git-upload-pack"},
		{"PROPFIND", "https://api.test/o/r.git/"},
		{"GET", "https://api.test/o/r.git/git-receive-pack"},
	} {
		res, body := do(t, c, tc.method, tc.url, "", nil)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "moat: git gate: ") {
			t.Errorf("%s %s: %d %q, want 403 from the gate", tc.method, tc.url, res.StatusCode, body)
		}
	}
	if got := u.seen(); len(got) != 0 {
		t.Errorf("the upstream saw %+v", got)
	}
	evs := rec.all()
	if len(evs) != 9 {
		t.Fatalf("recorded %d events, want 9: %+v", len(evs), evs)
	}
	for _, ev := range evs[:3] {
		if ev.Err != nil || ev.Decision.Allow {
			t.Errorf("event %+v, want a refusal", ev)
		}
	}
	for _, ev := range evs[3:] {
		if ev.Err == nil {
			t.Errorf("event %+v, want an error", ev)
		}
	}
}

// TestGitGateFiltersAdvertisement: the push advertisement loses push-cert and
// push-options; an answer that is not an advertisement is 502; fetch advertisements are
// untouched.
func TestGitGateFiltersAdvertisement(t *testing.T) {
	advert := func(caps string) string {
		var b bytes.Buffer
		pw := gitgate.NewPktWriter(&b)
		pw.WriteString("# service=git-receive-pack\n")
		pw.Flush()
		pw.WriteString(oneID + " refs/heads/main\x00" + caps + "\n")
		pw.Flush()
		return b.String()
	}
	full := advert("report-status push-cert=abc side-band-64k push-options atomic")
	_, c, _ := gitHarness(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.Contains(r.URL.RawQuery, "receive-pack") && r.URL.Path == "/o/r.git/info/refs":
			w.Header().Set("Content-Type", gitgate.ContentTypeAdvertisement)
			io.WriteString(w, full)
		case strings.Contains(r.URL.RawQuery, "receive-pack"):
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "dumb")
		default:
			io.WriteString(w, full)
		}
	})
	res, body := do(t, c, "GET", "https://api.test/o/r.git/info/refs?service=git-receive-pack", "", nil)
	if want := advert("report-status side-band-64k atomic"); res.StatusCode != 200 || body != want {
		t.Errorf("push advertisement: %d %q, want %q", res.StatusCode, body, want)
	}
	res, _ = do(t, c, "GET", "https://api.test/dumb.git/info/refs?service=git-receive-pack", "", nil)
	if res.StatusCode != http.StatusBadGateway {
		t.Errorf("a push advertisement of another content type: %d, want 502", res.StatusCode)
	}
	res, body = do(t, c, "GET", "https://api.test/o/r.git/info/refs?service=git-upload-pack", "", nil)
	if res.StatusCode != 200 || body != full {
		t.Errorf("fetch advertisement: %d %q, want it untouched", res.StatusCode, body)
	}
}

// TestGitGateReadDeadline: a push whose commands never finish arriving is refused when
// the gate's read deadline passes, instead of holding the request open.
func TestGitGateReadDeadline(t *testing.T) {
	pol, err := gitgate.Compile(gitgate.PolicySpec{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	u := newUpstream(t, nil)
	c := newHarness(t, u, Config{Git: &GitGate{Policy: pol, ReadTimeout: 200 * time.Millisecond}}).client()
	c.Timeout = 10 * time.Second // without the gate's deadline, the request would wait forever
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write([]byte("0094" + zeroID)) // part of the first command, then nothing
	res, body := push(t, c, pr, "")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "could not read the request") {
		t.Errorf("stalled push: %d %q, want 403", res.StatusCode, body)
	}
	if got := u.seen(); len(got) != 0 {
		t.Errorf("the upstream saw %+v", got)
	}
}

// FuzzGitGateRebuild: whatever a push body holds, the bytes the gate forwards after
// reading its commands (what it read, then the rest) are the body as sent.
func FuzzGitGateRebuild(f *testing.F) {
	f.Add(pushBody(f, "report-status", []byte("PACK\x00\x00\x00\x02"), zeroID+" "+oneID+" "+prefix+"x"), false)
	f.Add([]byte("0000"), false)
	f.Add([]byte("garbage"), true)
	f.Fuzz(func(t *testing.T, body []byte, gz bool) {
		sent := body
		enc := ""
		if gz {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(body)
			zw.Close()
			sent, enc = b.Bytes(), "gzip"
		}
		src := bytes.NewReader(sent)
		rec := &recorder{r: src, max: 2<<20 + 64<<10}
		if _, _, err := readPush(rec, enc, 1<<20); err != nil {
			return
		}
		rest, err := io.ReadAll(src)
		if err != nil {
			t.Fatal(err)
		}
		if got := append(append([]byte(nil), rec.buf...), rest...); !bytes.Equal(got, sent) {
			t.Fatalf("rebuilt %d bytes, want the %d sent", len(got), len(sent))
		}
	})
}
