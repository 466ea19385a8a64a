package tokens

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/testutil/fakegithub"
)

// testProvider is the conformance suite every Provider passes: a non-empty token, stable
// while fresh, an idempotent Revoke, and tokens again after Revoke.
func testProvider(t *testing.T, p Provider) {
	ctx := t.Context()
	a, err := p.Token(ctx)
	if err != nil || a.Value.Empty() {
		t.Fatalf("Token: empty=%v, %v", a.Value.Empty(), err)
	}
	b, err := p.Token(ctx)
	if err != nil || b.Value.Reveal() != a.Value.Reveal() || !b.ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("second Token differs from the first: %v", err)
	}
	for i := range 2 {
		if err := p.Revoke(ctx); err != nil {
			t.Fatalf("Revoke #%d: %v", i+1, err)
		}
	}
	c, err := p.Token(ctx)
	if err != nil || c.Value.Empty() {
		t.Fatalf("Token after Revoke: empty=%v, %v", c.Value.Empty(), err)
	}
	if err := p.Revoke(ctx); err != nil {
		t.Fatalf("final Revoke: %v", err)
	}
}

func TestProviderConformance(t *testing.T) {
	t.Run("Static", func(t *testing.T) { testProvider(t, Static(NewSecret("s3cret"))) })
	t.Run("GitHubApp", func(t *testing.T) {
		f := newFakeGitHub(t, newClock())
		testProvider(t, newApp(t, appConfig(f)))
		if mints, revoked := f.MintRequests(), f.Revoked(); mints != 2 || len(revoked) != 2 {
			t.Errorf("fake saw %d mints and %d revocations, want 2 and 2", mints, len(revoked))
		}
	})
}

func TestStatic(t *testing.T) {
	tok, err := Static(NewSecret("v")).Token(t.Context())
	if err != nil || tok.Value.Reveal() != "v" || !tok.ExpiresAt.IsZero() {
		t.Fatalf("Token = %q, %v, %v", tok.Value.Reveal(), tok.ExpiresAt, err)
	}
	for name, v := range map[string]Revealer{"nil": nil, "empty": NewSecret("")} {
		if _, err := Static(v).Token(t.Context()); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Static(%s).Token: %v, want invalid argument", name, err)
		}
	}
}

func TestGitHubAppMint(t *testing.T) {
	c := newClock()
	f := newFakeGitHub(t, c)
	p := newApp(t, appConfig(f))
	tok, err := p.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Lookup(tok.Value.Reveal()); !ok || !strings.HasPrefix(tok.Value.Reveal(), "ghs_") {
		t.Errorf("token is not one the fake issued")
	}
	if want := c.Now().Add(time.Hour); !tok.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt %v, want %v", tok.ExpiresAt, want)
	}
	req := f.Requests()[0]
	if !slices.Equal(req.Repositories, []string{"a", "b"}) || len(req.Permissions) != 2 ||
		req.Permissions["contents"] != "write" || req.Permissions["pull_requests"] != "write" {
		t.Errorf("fake got request %+v", req)
	}
	// PKCS#8 keys work the same.
	cfg := appConfig(f)
	cfg.PrivateKeyPEM = pkcs8PEM(t, fakegithub.AppKey())
	if _, err := newApp(t, cfg).Token(t.Context()); err != nil {
		t.Errorf("PKCS#8 key: %v", err)
	}
}

func TestGitHubAppCacheAndRefresh(t *testing.T) {
	c := newClock()
	f := newFakeGitHub(t, c)
	p := newApp(t, appConfig(f)) // default RefreshBefore: 5 min; fake tokens live 1 h
	first, err := p.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(54*time.Minute + 59*time.Second)
	again, err := p.Token(t.Context())
	if err != nil || again.Value.Reveal() != first.Value.Reveal() {
		t.Fatalf("Token 5m01s before expiry was not the cached one: %v", err)
	}
	if mints := f.MintRequests(); mints != 1 {
		t.Fatalf("fake saw %d mints, want 1", mints)
	}
	c.Advance(2 * time.Second) // now 4m59s before expiry
	fresh, err := p.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Value.Reveal() == first.Value.Reveal() || !fresh.ExpiresAt.After(first.ExpiresAt) {
		t.Errorf("Token within RefreshBefore of expiry did not refresh")
	}
	if mints, revoked := f.MintRequests(), f.Revoked(); mints != 2 || len(revoked) != 0 {
		t.Errorf("fake saw %d mints, %d revocations; want 2, 0 (the old token expires by itself)", mints, len(revoked))
	}
}

func TestGitHubAppShortLivedToken(t *testing.T) {
	c := newClock()
	f := newFakeGitHub(t, c)
	f.SetTokenTTL(4 * time.Minute) // shorter than RefreshBefore
	p := newApp(t, appConfig(f))
	first, err := p.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(119 * time.Second)
	if tok, _ := p.Token(t.Context()); tok.Value.Reveal() != first.Value.Reveal() {
		t.Errorf("refreshed before half the token's life")
	}
	c.Advance(2 * time.Second)
	if tok, _ := p.Token(t.Context()); tok.Value.Reveal() == first.Value.Reveal() {
		t.Errorf("not refreshed after half the token's life")
	}
}

func TestGitHubAppRefreshFailure(t *testing.T) {
	c := newClock()
	f := newFakeGitHub(t, c)
	var logs bytes.Buffer
	cfg := appConfig(f)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	p := newApp(t, cfg)
	first, err := p.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f.FailMints(http.StatusServiceUnavailable)
	c.Advance(58 * time.Minute)
	tok, err := p.Token(t.Context())
	if err != nil || tok.Value.Reveal() != first.Value.Reveal() {
		t.Fatalf("a failed refresh did not fall back to the still-valid token: %v", err)
	}
	if !strings.Contains(logs.String(), "503") {
		t.Errorf("the failed refresh was not logged: %s", logs.String())
	}
	noSecrets(t, f, "log", logs.String())
	c.Advance(2 * time.Minute) // the token has expired
	_, err = p.Token(t.Context())
	if !errdefs.IsUnavailable(err) || !strings.Contains(errorString(err), "503") {
		t.Errorf("Token after expiry with GitHub down: %v", err)
	}
	noSecrets(t, f, "error", errorString(err))
}

func TestGitHubAppConcurrentMintOnce(t *testing.T) {
	f := newFakeGitHub(t, newClock())
	release := f.HoldMints()
	p := newApp(t, appConfig(f))
	const n = 64
	var wg sync.WaitGroup
	vals := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tok, err := p.Token(t.Context())
			vals[i], errs[i] = tok.Value.Reveal(), err
		})
	}
	<-f.MintStarted()
	time.Sleep(50 * time.Millisecond) // let the other callers join the flight
	release()
	wg.Wait()
	for i := range n {
		if errs[i] != nil || vals[i] != vals[0] {
			t.Fatalf("caller %d: %v (same token: %v)", i, errs[i], vals[i] == vals[0])
		}
	}
	if mints := f.MintRequests(); mints != 1 {
		t.Errorf("fake saw %d mints, want 1", mints)
	}
}

func TestGitHubAppTokenCancelled(t *testing.T) {
	f := newFakeGitHub(t, newClock())
	release := f.HoldMints()
	p := newApp(t, appConfig(f))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := p.Token(ctx); done <- err }()
	<-f.MintStarted()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Token with a cancelled context: %v", err)
	}
	release() // the shared mint was not cancelled with its first caller
	if _, err := p.Token(t.Context()); err != nil {
		t.Fatal(err)
	}
	if mints := f.MintRequests(); mints != 1 {
		t.Errorf("fake saw %d mints, want 1", mints)
	}
}

func TestGitHubAppRevoke(t *testing.T) {
	c := newClock()
	f := newFakeGitHub(t, c)
	p := newApp(t, appConfig(f))
	if err := p.Revoke(t.Context()); err != nil {
		t.Fatalf("Revoke without a token: %v", err)
	}
	if deletes := f.RevokeRequests(); deletes != 0 {
		t.Fatalf("Revoke without a token sent %d DELETEs", deletes)
	}
	first, err := p.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Teardown outlives its caller's cancellation.
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.Revoke(cancelled); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := p.Revoke(t.Context()); err != nil {
		t.Fatalf("second Revoke: %v", err)
	}
	deletes, revoked := f.RevokeRequests(), f.Revoked()
	if _, valid := f.Lookup(first.Value.Reveal()); deletes != 1 || !slices.Equal(revoked, []string{first.Value.Reveal()}) || valid {
		t.Fatalf("fake saw %d DELETEs, revoked the token: %v", deletes, len(revoked) == 1 && revoked[0] == first.Value.Reveal())
	}
	second, err := p.Token(t.Context())
	if err != nil || second.Value.Reveal() == first.Value.Reveal() {
		t.Fatalf("Token after Revoke did not mint anew: %v", err)
	}
	if mints := f.MintRequests(); mints != 2 {
		t.Errorf("fake saw %d mints, want 2", mints)
	}
	// An expired token is not sent to GitHub.
	c.Advance(2 * time.Hour)
	if err := p.Revoke(t.Context()); err != nil {
		t.Fatalf("Revoke of an expired token: %v", err)
	}
	if deletes := f.RevokeRequests(); deletes != 1 {
		t.Errorf("Revoke of an expired token sent a DELETE")
	}
}

func TestGitHubAppRevokeWaitsForMint(t *testing.T) {
	f := newFakeGitHub(t, newClock())
	release := f.HoldMints()
	p := newApp(t, appConfig(f))
	got := make(chan Token, 1)
	go func() { tok, _ := p.Token(t.Context()); got <- tok }()
	<-f.MintStarted()
	revoked := make(chan error, 1)
	go func() { revoked <- p.Revoke(t.Context()) }()
	time.Sleep(20 * time.Millisecond)
	release()
	if err := <-revoked; err != nil {
		t.Fatal(err)
	}
	tok := <-got
	if r := f.Revoked(); !slices.Equal(r, []string{tok.Value.Reveal()}) {
		t.Errorf("the token being minted during Revoke was not revoked")
	}
}

func TestGitHubAppRevokeFailureKeepsToken(t *testing.T) {
	f := newFakeGitHub(t, newClock())
	p := newApp(t, appConfig(f))
	tok, err := p.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f.FailRevocations(http.StatusInternalServerError)
	err = p.Revoke(t.Context())
	if !errdefs.IsUnavailable(err) || !strings.Contains(errorString(err), "500") {
		t.Fatalf("Revoke with GitHub failing: %v", err)
	}
	noSecrets(t, f, "error", errorString(err))
	f.FailRevocations(0)
	if err := p.Revoke(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := f.Revoked(); !slices.Equal(r, []string{tok.Value.Reveal()}) {
		t.Errorf("the retried Revoke did not revoke the token")
	}
}

func TestGitHubAppOverGrant(t *testing.T) {
	for name, rewrite := range map[string]func(map[string]any){
		"extra permission": func(a map[string]any) {
			a["permissions"] = map[string]string{"contents": "write", "pull_requests": "write", "administration": "write"}
		},
		"higher level": func(a map[string]any) { a["permissions"] = map[string]string{"contents": "admin"} },
		"unknown level": func(a map[string]any) {
			a["permissions"] = map[string]string{"contents": "owner"}
		},
		"extra repository": func(a map[string]any) {
			a["repositories"] = []map[string]string{{"name": "a"}, {"name": "c"}}
		},
		"all repositories":   func(a map[string]any) { a["repository_selection"] = "all" },
		"no repository list": func(a map[string]any) { delete(a, "repositories") },
		"no permissions":     func(a map[string]any) { delete(a, "permissions") },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeGitHub(t, newClock())
			f.RewriteAnswers(rewrite)
			_, err := newApp(t, appConfig(f)).Token(t.Context())
			if !errors.Is(err, ErrOverGranted) {
				t.Fatalf("Token: %v, want ErrOverGranted", err)
			}
			noSecrets(t, f, "error", err.Error())
			if r := f.Revoked(); len(r) != 1 {
				t.Errorf("the over-granted token was not revoked")
			}
		})
	}
	t.Run("less than asked", func(t *testing.T) {
		f := newFakeGitHub(t, newClock())
		f.RewriteAnswers(func(a map[string]any) {
			a["permissions"] = map[string]string{"contents": "read"}
			a["repositories"] = []map[string]string{{"name": "A"}}
		})
		if _, err := newApp(t, appConfig(f)).Token(t.Context()); err != nil {
			t.Errorf("a token granting less than asked: %v", err)
		}
	})
}

func TestGitHubAppAPIErrors(t *testing.T) {
	type tc struct {
		cfg   func(*GitHubAppConfig)
		setup func(*fakegithub.Server)
		class error
		want  string // in the error text
	}
	for name, c := range map[string]tc{
		"repository beyond the installation": {
			cfg:   func(c *GitHubAppConfig) { c.Repositories = []string{"a", "d"} },
			class: errdefs.ErrInvalidArgument, want: "422 Unprocessable Entity: There is at least one repository",
		},
		"permission beyond the installation": {
			cfg:   func(c *GitHubAppConfig) { c.Permissions = map[string]string{"issues": "write"} },
			class: errdefs.ErrInvalidArgument, want: "422 Unprocessable Entity: The permissions requested are not granted",
		},
		"unknown installation": {
			cfg:   func(c *GitHubAppConfig) { c.InstallationID = 7 },
			class: errdefs.ErrInvalidArgument, want: "404 Not Found: Not Found",
		},
		"wrong key": {
			cfg:   func(c *GitHubAppConfig) { c.PrivateKeyPEM = pkcs1PEM(otherKey()) },
			class: errdefs.ErrUnavailable, want: "401 Unauthorized: A JSON web token could not be decoded",
		},
		"wrong App ID": {
			cfg:   func(c *GitHubAppConfig) { c.AppID = "999" },
			class: errdefs.ErrUnavailable, want: "401 Unauthorized",
		},
		"clock far ahead of GitHub": {
			cfg:   func(c *GitHubAppConfig) { c.Now = func() time.Time { return newClock().Now().Add(time.Hour) } },
			class: errdefs.ErrUnavailable, want: "'Issued at' claim",
		},
		"server echoes the credential": {
			class: errdefs.ErrUnavailable, want: "[redacted]",
		},
		"not JSON": {
			setup: func(f *fakegithub.Server) {
				f.InterceptMints(func(w http.ResponseWriter, _ *http.Request) bool {
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write([]byte("<html>"))
					return true
				})
			},
			class: errdefs.ErrUnavailable, want: "not JSON",
		},
		"token unfit for a header": {
			setup: func(f *fakegithub.Server) {
				f.RewriteAnswers(func(a map[string]any) { a["token"] = "ghs_ab\r\nX-Evil: 1" })
			},
			class: errdefs.ErrUnavailable, want: "cannot go in a header",
		},
		"no expiry": {
			setup: func(f *fakegithub.Server) { f.RewriteAnswers(func(a map[string]any) { delete(a, "expires_at") }) },
			class: errdefs.ErrUnavailable, want: "no expires_at",
		},
		"already expired": {
			setup: func(f *fakegithub.Server) { f.SetTokenTTL(-time.Minute) },
			class: errdefs.ErrUnavailable, want: "already expired",
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeGitHub(t, newClock())
			cfg := appConfig(f)
			echoed := make(chan string, 1) // the App JWT the echo server received
			if name == "server echoes the credential" {
				// A server that puts the Authorization header into its message.
				mux := http.NewServeMux()
				mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
					jwt := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
					select {
					case echoed <- jwt:
					default:
					}
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusForbidden)
					_ = json.NewEncoder(w).Encode(map[string]string{"message": "credential " + jwt + " refused\x1b[31m"})
				})
				echo := httptest.NewServer(mux)
				defer echo.Close()
				cfg.APIURL = echo.URL
			}
			if c.setup != nil {
				c.setup(f)
			}
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			_, err := newApp(t, cfg).Token(t.Context())
			if !errors.Is(err, c.class) || !strings.Contains(errorString(err), c.want) {
				t.Fatalf("Token: %v; want class %v and %q", err, c.class, c.want)
			}
			if strings.ContainsRune(err.Error(), '\x1b') {
				t.Errorf("control character from the server in the error: %q", err)
			}
			var jwts []string
			select {
			case j := <-echoed:
				jwts = append(jwts, j)
			default:
				if name == "server echoes the credential" {
					t.Errorf("the echo server got no request")
				}
			}
			noSecrets(t, f, "error", err.Error(), jwts...)
		})
	}
}

func TestGitHubAppNoRedirects(t *testing.T) {
	f := newFakeGitHub(t, newClock())
	redirect := httptest.NewServer(http.RedirectHandler(f.URL()+"/app/installations/42/access_tokens", http.StatusTemporaryRedirect))
	defer redirect.Close()
	cfg := appConfig(f)
	cfg.APIURL = redirect.URL
	_, err := newApp(t, cfg).Token(t.Context())
	if err == nil || !strings.Contains(err.Error(), "307") {
		t.Fatalf("Token through a redirect: %v", err)
	}
	if mints := f.MintRequests(); mints != 0 {
		t.Errorf("the redirect was followed")
	}
}

func TestGitHubAppUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	f := newFakeGitHub(t, newClock())
	cfg := appConfig(f)
	cfg.APIURL = "http://" + addr
	_, err = newApp(t, cfg).Token(t.Context())
	if !errdefs.IsUnavailable(err) {
		t.Fatalf("Token from a closed port: %v", err)
	}
	noSecrets(t, f, "error", err.Error())
}

func TestNewGitHubAppRejects(t *testing.T) {
	f := newFakeGitHub(t, newClock())
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := f.PrivateKeyPEM()
	for name, mod := range map[string]func(*GitHubAppConfig){
		"no AppID":           func(c *GitHubAppConfig) { c.AppID = "" },
		"AppID with a space": func(c *GitHubAppConfig) { c.AppID = "1 2" },
		"zero installation":  func(c *GitHubAppConfig) { c.InstallationID = 0 },
		"no key":             func(c *GitHubAppConfig) { c.PrivateKeyPEM = nil },
		"not PEM":            func(c *GitHubAppConfig) { c.PrivateKeyPEM = []byte("hello") },
		"truncated key":      func(c *GitHubAppConfig) { c.PrivateKeyPEM = truncatePEM(keyPEM) },
		"EC key":             func(c *GitHubAppConfig) { c.PrivateKeyPEM = pkcs8PEM(t, ec) },
		"1024-bit key":       func(c *GitHubAppConfig) { c.PrivateKeyPEM = pkcs1PEM(mustKey(1024)) },
		"certificate block": func(c *GitHubAppConfig) {
			c.PrivateKeyPEM = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
		},
		"no repositories":        func(c *GitHubAppConfig) { c.Repositories = nil },
		"owner/repo":             func(c *GitHubAppConfig) { c.Repositories = []string{"o/a"} },
		"dot-dot repository":     func(c *GitHubAppConfig) { c.Repositories = []string{".."} },
		"too many repositories":  func(c *GitHubAppConfig) { c.Repositories = slices.Repeat([]string{"a"}, 501) },
		"no permissions":         func(c *GitHubAppConfig) { c.Permissions = map[string]string{} },
		"unknown level":          func(c *GitHubAppConfig) { c.Permissions = map[string]string{"contents": "owner"} },
		"bad permission name":    func(c *GitHubAppConfig) { c.Permissions = map[string]string{"Contents": "read"} },
		"negative RefreshBefore": func(c *GitHubAppConfig) { c.RefreshBefore = -time.Second },
		"ftp APIURL":             func(c *GitHubAppConfig) { c.APIURL = "ftp://example.com" },
		"http to a remote host":  func(c *GitHubAppConfig) { c.APIURL = "http://api.github.com" },
		"APIURL without host":    func(c *GitHubAppConfig) { c.APIURL = "https://" },
		"APIURL relative":        func(c *GitHubAppConfig) { c.APIURL = "api.github.com" },
		"APIURL with user":       func(c *GitHubAppConfig) { c.APIURL = "https://u:p@api.github.com" },
		"APIURL with query":      func(c *GitHubAppConfig) { c.APIURL = "https://api.github.com/?x=1" },
		"APIURL not a URL":       func(c *GitHubAppConfig) { c.APIURL = "https://[::1" },
	} {
		cfg := appConfig(f)
		mod(&cfg)
		p, err := NewGitHubApp(cfg)
		if !errdefs.IsInvalidArgument(err) || p != nil {
			t.Errorf("%s: NewGitHubApp = %v, %v; want invalid argument", name, p, err)
			continue
		}
		noSecrets(t, f, name, err.Error())
	}
	// Accepted: https anywhere, http to loopback, a path (GitHub Enterprise), a client ID.
	for _, mod := range []func(*GitHubAppConfig){
		func(c *GitHubAppConfig) { c.APIURL = "https://ghe.example.com/api/v3/" },
		func(c *GitHubAppConfig) { c.APIURL = "http://localhost:8080" },
		func(c *GitHubAppConfig) { c.APIURL = "http://[::1]:8080" },
		func(c *GitHubAppConfig) { c.APIURL = ""; c.HTTPClient = nil },
		func(c *GitHubAppConfig) { c.AppID = "Iv23liABCdef.123" },
	} {
		cfg := appConfig(f)
		mod(&cfg)
		if _, err := NewGitHubApp(cfg); err != nil {
			t.Errorf("NewGitHubApp(APIURL %q, AppID %q): %v", cfg.APIURL, cfg.AppID, err)
		}
	}
}

// truncatePEM keeps a PEM block's frame but drops half its body.
func truncatePEM(p []byte) []byte {
	lines := strings.Split(string(p), "\n")
	body := lines[1 : len(lines)-2]
	return []byte(lines[0] + "\n" + strings.Join(body[:len(body)/2], "\n") + "\n" + lines[len(lines)-2] + "\n")
}

func TestGitHubAppEvents(t *testing.T) {
	c := newClock()
	f := newFakeGitHub(t, c)
	cfg := appConfig(f)
	var mu sync.Mutex
	var events []string
	cfg.Events = func(kind string, exp time.Time) {
		mu.Lock()
		events = append(events, fmt.Sprintf("%s %s", kind, exp.Sub(c.Now())))
		mu.Unlock()
	}
	p := newApp(t, cfg)
	for range 2 { // the second Token is served from the cache: no event
		if _, err := p.Token(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Revoke(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := p.Revoke(t.Context()); err != nil { // nothing left to revoke: no event
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"minted 1h0m0s", "revoked 1h0m0s"}; !slices.Equal(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}
}
