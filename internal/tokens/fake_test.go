package tokens

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Keys are generated once per test binary: RSA generation is slow.
var (
	appKey   = sync.OnceValue(func() *rsa.PrivateKey { return mustKey(2048) })
	otherKey = sync.OnceValue(func() *rsa.PrivateKey { return mustKey(2048) })
)

func mustKey(bits int) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		panic(err)
	}
	return k
}

func pkcs1PEM(k *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

func pkcs8PEM(t testing.TB, k any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// decodeJWT is the test's App JWT verifier, written from RFC 7515/7519 independently of
// signAppJWT: three strict base64url parts, the exact RS256 header, a PKCS#1 v1.5
// SHA-256 signature by pub, and claims with exactly iat, exp and iss.
func decodeJWT(tok string, pub *rsa.PublicKey) (jwtClaims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return jwtClaims{}, fmt.Errorf("%d parts", len(parts))
	}
	enc := base64.RawURLEncoding.Strict()
	var raw [3][]byte
	for i, p := range parts {
		b, err := enc.DecodeString(p)
		if err != nil {
			return jwtClaims{}, fmt.Errorf("part %d: %w", i, err)
		}
		raw[i] = b
	}
	var hdr map[string]any
	if err := json.Unmarshal(raw[0], &hdr); err != nil {
		return jwtClaims{}, fmt.Errorf("header: %w", err)
	}
	if len(hdr) != 2 || hdr["alg"] != "RS256" || hdr["typ"] != "JWT" {
		return jwtClaims{}, fmt.Errorf("header %s", raw[0])
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], raw[2]); err != nil {
		return jwtClaims{}, fmt.Errorf("signature: %w", err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw[1], &all); err != nil {
		return jwtClaims{}, fmt.Errorf("claims: %w", err)
	}
	if len(all) != 3 {
		return jwtClaims{}, fmt.Errorf("claims %s", raw[1])
	}
	var c jwtClaims
	if err := json.Unmarshal(raw[1], &c); err != nil {
		return jwtClaims{}, fmt.Errorf("claims: %w", err)
	}
	return c, nil
}

// clock is a settable fake clock shared by the provider and the fake GitHub.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeGitHub is a loopback GitHub implementing the two endpoints moat uses, with an
// installation that reaches repositories a, b, c with contents:write,
// pull_requests:write and issues:read. It checks App JWTs like GitHub does, refuses
// requests beyond the installation with 422, and keeps the tokens it issued and revoked.
type fakeGitHub struct {
	t            testing.TB
	srv          *httptest.Server
	clock        *clock
	pub          *rsa.PublicKey
	appID        string
	installation int64
	repos        []string
	perms        map[string]string

	mu         sync.Mutex
	ttl        time.Duration                    // lifetime of issued tokens
	answer     func(map[string]any)             // rewrites a token answer before it is sent
	fail       int                              // non-zero: answer every mint with this status
	failDelete int                              // non-zero: answer every revocation with this status
	hold       chan struct{}                    // non-nil: a mint waits for it to close
	started    chan struct{}                    // receives (non-blocking) when a mint starts
	mints      int                              // mint requests that reached the handler
	issued     map[string]time.Time             // valid tokens and their expiry
	revoked    []string                         // tokens revoked, in order
	deletes    int                              // DELETE requests
	jwts       []string                         // every App JWT received
	requests   []accessTokenRequest             // every accepted token request
	onMint     func(w http.ResponseWriter) bool // true: it answered the request
}

func newFakeGitHub(t testing.TB, c *clock) *fakeGitHub {
	f := &fakeGitHub{
		t: t, clock: c, pub: &appKey().PublicKey, appID: "12345", installation: 42,
		repos:   []string{"a", "b", "c"},
		perms:   map[string]string{"contents": "write", "pull_requests": "write", "issues": "read"},
		ttl:     time.Hour,
		issued:  map[string]time.Time{},
		started: make(chan struct{}, 1),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", f.mint)
	mux.HandleFunc("DELETE /installation/token", f.revoke)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func gitHubError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

func (f *fakeGitHub) checkHeaders(r *http.Request) string {
	switch {
	case r.Header.Get("Accept") != "application/vnd.github+json":
		return "Accept " + r.Header.Get("Accept")
	case r.Header.Get("X-GitHub-Api-Version") != "2022-11-28":
		return "X-GitHub-Api-Version " + r.Header.Get("X-GitHub-Api-Version")
	case r.Header.Get("User-Agent") == "":
		return "no User-Agent"
	}
	return ""
}

func bearer(r *http.Request) (string, bool) {
	return strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
}

func (f *fakeGitHub) mint(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.mints++
	hold, onMint := f.hold, f.onMint
	f.mu.Unlock()
	select {
	case f.started <- struct{}{}:
	default:
	}
	if hold != nil {
		<-hold
	}
	if onMint != nil && onMint(w) {
		return
	}
	if bad := f.checkHeaders(r); bad != "" {
		f.t.Errorf("token request: %s", bad)
		gitHubError(w, http.StatusBadRequest, bad)
		return
	}
	jwt, ok := bearer(r)
	if !ok {
		gitHubError(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	f.mu.Lock()
	f.jwts = append(f.jwts, jwt)
	fail := f.fail
	f.mu.Unlock()
	claims, err := decodeJWT(jwt, f.pub)
	if err != nil {
		gitHubError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	now := f.clock.Now().Unix()
	switch {
	case claims.Issuer != f.appID:
		gitHubError(w, http.StatusUnauthorized, "'Issuer' claim ('iss') must be an Integer")
		return
	case claims.IssuedAt > now || claims.IssuedAt < now-120:
		gitHubError(w, http.StatusUnauthorized, "'Issued at' claim ('iat') must be an Integer representing a time in the past.")
		return
	case claims.ExpiresAt <= now || claims.ExpiresAt-claims.IssuedAt > 600:
		gitHubError(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') is too far in the future")
		return
	}
	if id := r.PathValue("id"); id != strconv.FormatInt(f.installation, 10) {
		gitHubError(w, http.StatusNotFound, "Not Found")
		return
	}
	if fail != 0 {
		gitHubError(w, fail, "Server Error")
		return
	}
	var req accessTokenRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		gitHubError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if r.Header.Get("Content-Type") != "application/json" {
		f.t.Errorf("token request Content-Type %q", r.Header.Get("Content-Type"))
	}
	for _, name := range req.Repositories {
		if !containsFold(f.repos, name) {
			gitHubError(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
	}
	for k, v := range req.Permissions {
		if have := f.perms[k]; permLevels[v] == 0 || permLevels[v] > permLevels[have] {
			gitHubError(w, http.StatusUnprocessableEntity, "The permissions requested are not granted to this installation.")
			return
		}
	}
	var rnd [18]byte
	_, _ = rand.Read(rnd[:])
	tok := "ghs_" + hex.EncodeToString(rnd[:])
	exp := f.clock.Now().Add(f.ttlNow()).UTC().Truncate(time.Second)
	repos := []map[string]any{}
	for _, name := range req.Repositories {
		repos = append(repos, map[string]any{"id": 1, "name": name, "full_name": "owner/" + name, "private": true})
	}
	ans := map[string]any{
		"token": tok, "expires_at": exp.Format(time.RFC3339), "permissions": req.Permissions,
		"repository_selection": "selected", "repositories": repos,
	}
	f.mu.Lock()
	f.issued[tok] = exp
	f.requests = append(f.requests, req)
	rewrite := f.answer
	f.mu.Unlock()
	if rewrite != nil {
		rewrite(ans)
	}
	writeJSON(w, http.StatusCreated, ans)
}

func (f *fakeGitHub) ttlNow() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ttl
}

func (f *fakeGitHub) revoke(w http.ResponseWriter, r *http.Request) {
	if bad := f.checkHeaders(r); bad != "" {
		f.t.Errorf("revocation: %s", bad)
	}
	tok, _ := bearer(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes++
	if f.failDelete != 0 {
		gitHubError(w, f.failDelete, "Server Error")
		return
	}
	exp, ok := f.issued[tok]
	if !ok || !f.clock.Now().Before(exp) {
		gitHubError(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	delete(f.issued, tok)
	f.revoked = append(f.revoked, tok)
	w.WriteHeader(http.StatusNoContent)
}

// stats returns the number of mint and DELETE requests and the tokens revoked.
func (f *fakeGitHub) stats() (mints, deletes int, revoked []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mints, f.deletes, append([]string(nil), f.revoked...)
}

func (f *fakeGitHub) set(fn func(f *fakeGitHub)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// valid reports whether tok is an issued, unrevoked, unexpired token.
func (f *fakeGitHub) valid(tok string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	exp, ok := f.issued[tok]
	return ok && f.clock.Now().Before(exp)
}

// noSecrets fails the test if s holds any token the fake issued, any App JWT it received
// (or its signature), or the App key's PEM body.
func (f *fakeGitHub) noSecrets(t testing.TB, what, s string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for tok := range f.issued {
		if strings.Contains(s, tok) {
			t.Errorf("%s holds a token: %s", what, s)
		}
	}
	for _, tok := range f.revoked {
		if strings.Contains(s, tok) {
			t.Errorf("%s holds a revoked token: %s", what, s)
		}
	}
	for _, j := range f.jwts {
		if strings.Contains(s, j) || strings.Contains(s, j[strings.LastIndexByte(j, '.')+1:]) {
			t.Errorf("%s holds an App JWT: %s", what, s)
		}
	}
	if keyLine := strings.Split(string(pkcs1PEM(appKey())), "\n")[2]; strings.Contains(s, keyLine) {
		t.Errorf("%s holds key material: %s", what, s)
	}
}

// config returns a valid configuration for the fake's installation asking for
// repositories a, b and contents:write, pull_requests:write.
func (f *fakeGitHub) config() GitHubAppConfig {
	return GitHubAppConfig{
		AppID:          f.appID,
		PrivateKeyPEM:  pkcs1PEM(appKey()),
		InstallationID: f.installation,
		Repositories:   []string{"a", "b"},
		Permissions:    map[string]string{"contents": "write", "pull_requests": "write"},
		APIURL:         f.srv.URL,
		HTTPClient:     f.srv.Client(),
		Now:            f.clock.Now,
	}
}

func newApp(t testing.TB, cfg GitHubAppConfig) Provider {
	t.Helper()
	p, err := NewGitHubApp(cfg)
	if err != nil {
		t.Fatalf("NewGitHubApp: %v", err)
	}
	return p
}

// errorString is err's text, or "" for nil.
func errorString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
