package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		origin, host string
		https, want  bool
	}{
		{"http://127.0.0.1:7000", "127.0.0.1:7000", false, true},
		{"HTTP://127.0.0.1:7000", "127.0.0.1:7000", false, true},
		{"http://moat.example:7000", "MOAT.example:7000", false, true},
		{"https://moat.example", "moat.example", true, true},
		{"http://moat.example", "moat.example", true, false},   // downgraded scheme
		{"https://moat.example", "moat.example", false, false}, // scheme the daemon did not serve
		{"http://127.0.0.2:7000", "127.0.0.1:7000", false, false},
		{"http://127.0.0.1:7001", "127.0.0.1:7000", false, false}, // another port: another origin
		{"http://127.0.0.1", "127.0.0.1:7000", false, false},
		{"null", "127.0.0.1:7000", false, false},
		{"", "127.0.0.1:7000", false, false},
		{"http://127.0.0.1:7000/path", "127.0.0.1:7000", false, false},
		{"http://u@127.0.0.1:7000", "127.0.0.1:7000", false, false},
		{"http://127.0.0.1:7000.evil.example", "127.0.0.1:7000", false, false},
	} {
		if got := sameOrigin(c.origin, c.host, c.https); got != c.want {
			t.Errorf("sameOrigin(%q, %q, https=%v) = %v, want %v", c.origin, c.host, c.https, got, c.want)
		}
	}
}

func TestCheckCSRF(t *testing.T) {
	const tok, host = "0123456789abcdef", "127.0.0.1:7000"
	for _, c := range []struct {
		method, token, origin string
		ok                    bool
	}{
		{"GET", "", "", true},
		{"HEAD", "", "", true},
		{"OPTIONS", "", "", true},
		{"GET", "", "http://127.0.0.1:7000", true},
		{"GET", "", "http://evil.example", false}, // a cross-origin read of the API with the cookie
		{"GET", "", "null", false},
		{"POST", tok, "", true},
		{"POST", tok, "http://127.0.0.1:7000", true},
		{"POST", tok, "http://127.0.0.2:7000", false},
		{"POST", "", "http://127.0.0.1:7000", false},
		{"POST", "", "", false},
		{"POST", tok[:15], "", false},
		{"POST", tok + "0", "", false},
		{"DELETE", "", "", false},
		{"PUT", "wrong-token-0000", "", false},
		{"PATCH", tok, "", true},
	} {
		err := checkCSRF(c.method, c.token, tok, c.origin, host, false)
		if (err == nil) != c.ok {
			t.Errorf("checkCSRF(%s, token %q, origin %q) = %v, want ok=%v", c.method, c.token, c.origin, err, c.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("checkCSRF error %v is not permission denied", err)
		}
	}
	if checkCSRF("POST", "", "", "", host, false) == nil {
		t.Error("an empty session token matched an empty header")
	}
}

func TestParseTermSize(t *testing.T) {
	for in, ok := range map[string]bool{
		`{"cols":80,"rows":24}`: true, `{"cols":0,"rows":24}`: false, `{"cols":80,"rows":100000}`: false,
		`{"cols":-1,"rows":2}`: false, `not json`: false, `{"cols":1000,"rows":1000}`: true,
	} {
		if _, err := parseTermSize([]byte(in)); (err == nil) != ok {
			t.Errorf("parseTermSize(%s) = %v, want ok=%v", in, err, ok)
		}
	}
}

func TestCloseReason(t *testing.T) {
	if got := closeReason("the shell ended: exit status 1\x1b]0;pwn\x07 é"); got != "the shell ended: exit status 1]0;pwn " {
		t.Errorf("closeReason = %q", got)
	}
	if got := closeReason(strings.Repeat("x", 500)); len(got) != 123 {
		t.Errorf("closeReason of 500 bytes: %d bytes, want 123", len(got))
	}
}

// fakeSessions stores sessions in memory as the store does (by id, with a CSRF token).
type fakeSessions struct {
	mu   sync.Mutex
	keys keys
	m    map[string][2]string // id -> key, csrf
	n    int
}

func (f *fakeSessions) CreateSession(ctx context.Context, key string, ttl time.Duration) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	id, csrf := fmt.Sprintf("session-%d-%032d", f.n, f.n), fmt.Sprintf("csrf-%d-%032d", f.n, f.n)
	f.m[id] = [2]string{key, csrf}
	return id, csrf, nil
}

func (f *fakeSessions) SessionCaller(ctx context.Context, id string) (sandbox.Caller, string, error) {
	f.mu.Lock()
	s, ok := f.m[id]
	f.mu.Unlock()
	if !ok {
		return sandbox.Caller{}, "", fmt.Errorf("no session: %w", errdefs.ErrUnauthenticated)
	}
	c, err := f.keys.Authenticate(ctx, s[0])
	return c, s[1], err
}

func (f *fakeSessions) DeleteSession(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
	return nil
}

// stopRecorder is fakeSandboxes that records the stops it is asked for.
type stopRecorder struct {
	*fakeSandboxes
	mu    sync.Mutex
	stops []string
}

func (s *stopRecorder) Stop(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	s.mu.Lock()
	s.stops = append(s.stops, id+" by "+sandbox.CallerFrom(ctx).APIKey)
	s.mu.Unlock()
	return s.fakeSandboxes.Stop(ctx, id)
}

func (s *stopRecorder) stopped() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.stops...)
}

// TestConsoleSessions signs in through the form and uses the session against the API:
// the login CSRF defences, the cookie's attributes, the CSRF token and Origin rules of
// the gate (asserted at the receiver: the stops the sandbox manager was asked for), and
// sign-out.
func TestConsoleSessions(t *testing.T) {
	envd := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(envd.Close)
	sb := &stopRecorder{fakeSandboxes: &fakeSandboxes{envd: envd}}
	s := New(Deps{Sandboxes: sb, Log: slog.New(slog.DiscardHandler)})
	auth := keys{"good": true}
	s.SetConsole(&fakeSessions{keys: auth, m: map[string][2]string{}}, auth, false)
	api := httptest.NewServer(s.Handler(auth))
	t.Cleanup(api.Close)
	self := api.URL // http://127.0.0.1:PORT, the daemon's own origin
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	do := func(method, path string, hdr map[string]string, cookies []*http.Cookie, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, api.URL+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	cookie := func(resp *http.Response, name string) *http.Cookie {
		for _, c := range resp.Cookies() {
			if c.Name == name {
				return c
			}
		}
		return nil
	}

	// The sign-in page: a pre-session token in the form and in the login cookie.
	resp, body := do("GET", "/ui/login", nil, nil, "")
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET /ui/login = %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
	login := cookie(resp, loginCookie)
	m := regexp.MustCompile(`name="login_token" value="([0-9a-f]{64})"`).FindStringSubmatch(body)
	if login == nil || m == nil || login.Value != m[1] || !login.HttpOnly || login.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookie %+v, form token %v", login, m)
	}
	form := func(token, key string) string { return url.Values{"login_token": {token}, "key": {key}}.Encode() }
	formHdr := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": self}
	for _, c := range []struct {
		what    string
		hdr     map[string]string
		cookies []*http.Cookie
		body    string
		status  int
	}{
		{"no login cookie (a form posted from another site)", formHdr, nil, form(m[1], "good"), 403},
		{"token not the cookie's", formHdr, []*http.Cookie{login}, form(strings.Repeat("0", 64), "good"), 403},
		{"cross-origin", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://127.0.0.2:1"}, []*http.Cookie{login}, form(m[1], "good"), 403},
		{"invalid key", formHdr, []*http.Cookie{login}, form(m[1], "bad"), 401},
	} {
		resp, _ := do("POST", "/ui/login", c.hdr, c.cookies, c.body)
		if resp.StatusCode != c.status || cookie(resp, sessionCookie) != nil {
			t.Errorf("sign-in with %s: %d (session cookie %v), want %d and no session", c.what, resp.StatusCode, cookie(resp, sessionCookie), c.status)
		}
	}
	resp, _ = do("POST", "/ui/login", formHdr, []*http.Cookie{login}, form(m[1], "good"))
	sess := cookie(resp, sessionCookie)
	if resp.StatusCode != http.StatusSeeOther || sess == nil {
		t.Fatalf("sign-in = %d, session cookie %v", resp.StatusCode, sess)
	}
	if !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode || sess.Path != "/" || sess.Secure || sess.MaxAge != int(sessionTTL/time.Second) {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, not Secure over plain HTTP, 12 h", sess)
	}
	jar := []*http.Cookie{sess}

	// The session acts as its key.
	if resp, body := do("GET", "/v1/sandboxes", nil, jar, ""); resp.StatusCode != 200 || !strings.Contains(body, "sb-running") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Fatalf("GET /v1/sandboxes with the session = %d %s (CSP %q)", resp.StatusCode, body, resp.Header.Get("Content-Security-Policy"))
	}
	if resp, _ := do("GET", "/v1/apikeys", nil, jar, ""); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a unix-socket-only route with a session = %d, want 403", resp.StatusCode)
	}
	_, body = do("GET", "/ui/session", nil, jar, "")
	csrf := regexp.MustCompile(`"csrf_token":"([^"]+)"`).FindStringSubmatch(body)
	if csrf == nil || !strings.Contains(body, `"api_key":"key-good"`) {
		t.Fatalf("GET /ui/session = %s", body)
	}
	for _, c := range []struct {
		what   string
		hdr    map[string]string
		status int
	}{
		{"no CSRF token", nil, 403},
		{"a wrong CSRF token", map[string]string{CSRFHeader: "csrf-x"}, 403},
		{"the token from another origin", map[string]string{CSRFHeader: csrf[1], "Origin": "http://127.0.0.2:8000"}, 403},
		{"the token from a sandboxed (opaque) origin", map[string]string{CSRFHeader: csrf[1], "Origin": "null"}, 403},
	} {
		if resp, body := do("POST", "/v1/sandboxes/sb-running/stop", c.hdr, jar, ""); resp.StatusCode != c.status {
			t.Errorf("stop with %s = %d %s, want %d", c.what, resp.StatusCode, body, c.status)
		}
	}
	if got := sb.stopped(); len(got) != 0 {
		t.Fatalf("refused requests reached the manager: %v", got)
	}
	if resp, body := do("POST", "/v1/sandboxes/sb-running/stop", map[string]string{CSRFHeader: csrf[1], "Origin": self}, jar, ""); resp.StatusCode != 200 {
		t.Fatalf("stop with the CSRF token = %d %s", resp.StatusCode, body)
	}
	if got := sb.stopped(); len(got) != 1 || got[0] != "sb-running by key-good" {
		t.Fatalf("stops = %v, want one by key-good", got)
	}
	// Without a session or key: unauthenticated; an unknown session too.
	if resp, _ := do("GET", "/v1/sandboxes", nil, []*http.Cookie{{Name: sessionCookie, Value: "forged"}}, ""); resp.StatusCode != 401 {
		t.Errorf("forged session: %d, want 401", resp.StatusCode)
	}
	// Sign-out needs the token, then ends the session.
	if resp, _ := do("POST", "/ui/logout", nil, jar, ""); resp.StatusCode != 403 {
		t.Errorf("sign-out without the CSRF token = %d, want 403", resp.StatusCode)
	}
	if resp, _ := do("POST", "/ui/logout", map[string]string{CSRFHeader: csrf[1]}, jar, ""); resp.StatusCode != 204 {
		t.Errorf("sign-out = %d, want 204", resp.StatusCode)
	}
	if resp, _ := do("GET", "/v1/sandboxes", nil, jar, ""); resp.StatusCode != 401 {
		t.Errorf("after sign-out: %d, want 401", resp.StatusCode)
	}
	// A terminal handshake from another origin is refused even with an API key.
	if resp, _ := do("GET", "/v1/sandboxes/sb-running/terminal", map[string]string{"Authorization": "Bearer good", "Origin": "http://127.0.0.2:8000",
		"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}, nil, ""); resp.StatusCode != 403 {
		t.Errorf("cross-origin terminal handshake = %d, want 403", resp.StatusCode)
	}
}

// TestConsoleSecureCookie: behind a TLS proxy (--console-secure-cookie) the cookies are
// Secure and the console's own origin is https.
func TestConsoleSecureCookie(t *testing.T) {
	s := New(Deps{Sandboxes: &fakeSandboxes{}, Log: slog.New(slog.DiscardHandler)})
	s.SetConsole(&fakeSessions{m: map[string][2]string{}}, keys{}, true)
	rec := httptest.NewRecorder()
	s.Handler(keys{}).ServeHTTP(rec, httptest.NewRequest("GET", "/ui/login", nil))
	if c := rec.Result().Cookies(); len(c) != 1 || !c[0].Secure {
		t.Fatalf("login cookie behind TLS: %+v, want Secure", c)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "wss://") {
		t.Errorf("CSP %q: want wss:// of the daemon", csp)
	}

	// Served over TLS directly (r.TLS set), without the flag: Secure too.
	direct := New(Deps{Sandboxes: &fakeSandboxes{}, Log: slog.New(slog.DiscardHandler)})
	direct.SetConsole(&fakeSessions{m: map[string][2]string{}}, keys{}, false)
	srv := httptest.NewTLSServer(direct.Handler(keys{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := resp.Cookies(); len(c) != 1 || !c[0].Secure {
		t.Fatalf("login cookie over TLS: %+v, want Secure", c)
	}
	// ... and its own origin is https: an http Origin of the same host is another origin.
	req, _ := http.NewRequest("POST", srv.URL+"/ui/login", strings.NewReader("key=x"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+strings.TrimPrefix(srv.URL, "https://"))
	if resp, err = srv.Client().Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in over TLS from the http origin: %d, want 403", resp.StatusCode)
	}
}

// FuzzSameOrigin: whatever the Origin header holds, it is the daemon's own only when it
// names exactly the daemon's scheme and host.
func FuzzSameOrigin(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:7000", "null", "http://127.0.0.1:7000/", "http://127.0.0.1:7000@evil", "http://[::1]:7000", "HTTP://127.0.0.1:7000", "http://127.0.0.1:7000#x", "//127.0.0.1:7000"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, origin string, https bool) {
		const host = "127.0.0.1:7000"
		if !sameOrigin(origin, host, https) {
			return
		}
		want := "http://" + host
		if https {
			want = "https://" + host
		}
		u, err := url.Parse(origin)
		if err != nil || u.Scheme+"://"+strings.ToLower(u.Host) != want || u.Path != "" || u.User != nil || u.RawQuery != "" || u.Opaque != "" {
			t.Fatalf("sameOrigin(%q, https=%v) = true", origin, https)
		}
	})
}

// FuzzParseTermSize: a resize message either fails or gives a size of 1 to 1000 each.
func FuzzParseTermSize(f *testing.F) {
	for _, s := range []string{`{"cols":80,"rows":24}`, `{"cols":0}`, `{"cols":4294967295,"rows":1}`, `[]`, `{"cols":1e3,"rows":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sz, err := parseTermSize(b)
		if err == nil && (sz.Cols < 1 || sz.Rows < 1 || sz.Cols > 1000 || sz.Rows > 1000) {
			t.Fatalf("parseTermSize(%q) = %+v", b, sz)
		}
	})
}
