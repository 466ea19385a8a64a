// Package fakegithub is a loopback fake of the GitHub REST endpoints moat calls, for tests
// only: minting a GitHub App installation token (POST
// /app/installations/{id}/access_tokens, authenticated by an RS256 App JWT) and revoking
// one (DELETE /installation/token, authenticated by the token itself).
//
// A Server stands for one App, whose key is AppKey, with one installation that reaches a
// few repositories with a few permissions. It checks App JWTs, headers and requests as
// GitHub does, answers with GitHub's status codes and messages, and remembers every token
// it issued, so that a test can ask whether a token is still valid and what it grants
// (Lookup), or check a git client's credentials against it (Authorize).
package fakegithub

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Defaults of a Server made without options.
const (
	DefaultAppID          = "12345"
	DefaultInstallationID = 42
	DefaultTokenTTL       = time.Hour
)

// apiVersion is the X-GitHub-Api-Version every request must carry.
const apiVersion = "2022-11-28"

// Owner is the account owning the installation's repositories, used in the "full_name"
// of the repositories a token answer lists.
const Owner = "owner"

// permLevels orders permission levels.
var permLevels = map[string]int{"read": 1, "write": 2, "admin": 3}

// TokenRequest is the body of a token request the Server accepted.
type TokenRequest struct {
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
}

// Grant is what an installation token was issued for.
type Grant struct {
	// Repositories are the names (without owner) the token reaches, as requested; all
	// the installation's repositories if the request named none.
	Repositories []string
	// Permissions are the token's permissions, as requested; the installation's if the
	// request named none.
	Permissions map[string]string
	// ExpiresAt is when the token stops being valid (whole seconds, UTC).
	ExpiresAt time.Time
}

func (g Grant) clone() Grant {
	g.Repositories = slices.Clone(g.Repositories)
	g.Permissions = maps.Clone(g.Permissions)
	return g
}

type issued struct {
	Grant
	revoked bool
}

// Server is a running fake GitHub. Its methods are safe for concurrent use.
type Server struct {
	t       testing.TB
	srv     *httptest.Server
	now     func() time.Time
	appID   string
	inst    int64
	repos   []string
	perms   map[string]string
	started chan struct{}

	mu         sync.Mutex
	ttl        time.Duration                                 // lifetime of issued tokens
	rewrite    func(map[string]any)                          // rewrites a token answer before it is sent
	intercept  func(http.ResponseWriter, *http.Request) bool // true: it answered the token request
	failMint   int                                           // non-zero: answer every mint with this status
	failRevoke int                                           // non-zero: answer every revocation with this status
	hold       chan struct{}                                 // non-nil: a token request waits for it to close
	mintReqs   int                                           // token requests that reached the handler
	revokeReqs int                                           // revocation requests
	tokens     map[string]*issued                            // every token issued
	minted     []string                                      // every token issued, in order
	revoked    []string                                      // tokens revoked, in order
	jwts       []string                                      // every App JWT received
	requests   []TokenRequest                                // every accepted token request
}

// Option configures a Server at creation. What may change while a test runs (token
// lifetime, failures, answers) is set with Server methods instead.
type Option func(*Server)

// WithClock makes the Server read the time from now, for checking App JWTs and setting
// and checking token expiry; default time.Now. Share it with the client under test to
// move both through time together.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithRepositories sets the repositories (names without owner) the installation reaches;
// default a, b and c.
func WithRepositories(names ...string) Option {
	return func(s *Server) { s.repos = slices.Clone(names) }
}

// New starts a fake GitHub on a loopback port, closed when the test ends. Requests that
// break the rules of the API moat relies on (a missing Accept or X-GitHub-Api-Version
// header, no User-Agent, a token request without Content-Type application/json) fail t.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{
		t:       t,
		now:     time.Now,
		appID:   DefaultAppID,
		inst:    DefaultInstallationID,
		repos:   []string{"a", "b", "c"},
		perms:   map[string]string{"contents": "write", "pull_requests": "write", "issues": "read"},
		started: make(chan struct{}, 1),
		ttl:     DefaultTokenTTL,
		tokens:  map[string]*issued{},
	}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", s.mint)
	mux.HandleFunc("DELETE /installation/token", s.revoke)
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// URL is the API base, such as http://127.0.0.1:PORT (no trailing '/').
func (s *Server) URL() string { return s.srv.URL }

// Client returns an HTTP client for the Server.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// AppID is the App ID the Server expects as App JWT issuer.
func (s *Server) AppID() string { return s.appID }

// InstallationID is the App's installation.
func (s *Server) InstallationID() int64 { return s.inst }

// PrivateKeyPEM returns the App's private key (AppKey) as PKCS#1 PEM.
func (s *Server) PrivateKeyPEM() []byte { return pkcs1PEM(appKey()) }

// Repositories returns the names of the repositories the installation reaches; a token
// may be asked for any of them (compared case-insensitively).
func (s *Server) Repositories() []string { return slices.Clone(s.repos) }

// Permissions returns the installation's permissions; a token may be asked for any of
// them at the same or a lower level.
func (s *Server) Permissions() map[string]string { return maps.Clone(s.perms) }

// Now is the Server's time.
func (s *Server) Now() time.Time { return s.now() }

// SetTokenTTL sets the lifetime of the tokens issued from now on; default
// DefaultTokenTTL. A negative ttl issues tokens that have already expired.
func (s *Server) SetTokenTTL(ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttl = ttl
}

// FailMints makes every token request with a valid App JWT for the installation fail
// with status (and a GitHub error body) from now on; 0 stops it.
func (s *Server) FailMints(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failMint = status
}

// FailRevocations makes every revocation fail with status from now on; 0 stops it.
func (s *Server) FailRevocations(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failRevoke = status
}

// RewriteAnswers makes fn edit the JSON object of every successful token answer before
// it is sent ("token", "expires_at", "permissions", "repository_selection",
// "repositories"), to play a GitHub that grants more or answers badly. The token issued
// and its Grant are the ones first put in the answer. nil stops it.
func (s *Server) RewriteAnswers(fn func(answer map[string]any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rewrite = fn
}

// InterceptMints makes fn see every token request before the Server checks it; if fn
// returns true it has answered and the Server does nothing more. The request is counted
// by MintRequests all the same. nil stops it.
func (s *Server) InterceptMints(fn func(w http.ResponseWriter, r *http.Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intercept = fn
}

// HoldMints makes token requests wait, once counted and signalled on MintStarted, until
// release is called. Calling release again does nothing; it is called when the test ends.
func (s *Server) HoldMints() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.hold = ch
	s.mu.Unlock()
	release = sync.OnceFunc(func() { close(ch) })
	s.t.Cleanup(release) // before the server's Close, which waits for held requests
	return release
}

// MintStarted receives when a token request reaches the Server (at most one pending
// signal: further requests do not wait for the channel to be read).
func (s *Server) MintStarted() <-chan struct{} { return s.started }

// MintRequests is the number of token requests that reached the Server, whatever their
// answer.
func (s *Server) MintRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mintReqs
}

// RevokeRequests is the number of revocation requests, whatever their answer.
func (s *Server) RevokeRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revokeReqs
}

// Revoked returns the tokens revoked, in order.
func (s *Server) Revoked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.revoked)
}

// Tokens returns every token issued, revoked and expired ones included, in order.
func (s *Server) Tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.minted)
}

// JWTs returns every App JWT received in a token request with well-formed headers,
// valid or not, in order.
func (s *Server) JWTs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.jwts)
}

// Requests returns the body of every token request the Server accepted, in order.
func (s *Server) Requests() []TokenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TokenRequest, len(s.requests))
	for i, r := range s.requests {
		out[i] = TokenRequest{Repositories: slices.Clone(r.Repositories), Permissions: maps.Clone(r.Permissions)}
	}
	return out
}

// Lookup returns what token was issued for if it is valid now: issued by the Server, not
// revoked and not expired.
func (s *Server) Lookup(token string) (Grant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.lookupLocked(token)
	if !ok {
		return Grant{}, false
	}
	return g.clone(), true
}

func (s *Server) lookupLocked(token string) (Grant, bool) {
	is, ok := s.tokens[token]
	if !ok || is.revoked || !s.now().Before(is.ExpiresAt) {
		return Grant{}, false
	}
	return is.Grant, true
}

// Authorize reports whether r carries a valid token (see Lookup) that reaches repo with
// permission to read its contents, or with write also to push: contents:read or higher,
// contents:write or higher. It is what a fake git smart-HTTP server calls; the token may
// come as "Authorization: Basic base64(x-access-token:TOKEN)", as git sends it, or as
// "Authorization: Bearer TOKEN". repo is a repository name, optionally with an owner/
// prefix and a .git suffix ("owner/a.git" names a), compared case-insensitively.
func (s *Server) Authorize(r *http.Request, repo string, write bool) bool {
	tok, ok := credential(r.Header.Get("Authorization"))
	if !ok {
		return false
	}
	repo = strings.TrimSuffix(repo, ".git")
	repo = repo[strings.LastIndexByte(repo, '/')+1:]
	need := permLevels["read"]
	if write {
		need = permLevels["write"]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.lookupLocked(tok)
	return ok && repo != "" && containsFold(g.Repositories, repo) && permLevels[g.Permissions["contents"]] >= need
}

// credential returns the token of an Authorization header value: Basic with user
// x-access-token, or Bearer.
func credential(h string) (string, bool) {
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok {
		return "", false
	}
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		return rest, rest != ""
	case strings.EqualFold(scheme, "Basic"):
		b, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return "", false
		}
		user, pass, ok := strings.Cut(string(b), ":")
		return pass, ok && user == "x-access-token" && pass != ""
	}
	return "", false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// gitHubError answers status with GitHub's error body.
func gitHubError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}

// checkHeaders returns what is wrong with r's GitHub API headers, or "".
func checkHeaders(r *http.Request) string {
	switch {
	case r.Header.Get("Accept") != "application/vnd.github+json":
		return "Accept " + r.Header.Get("Accept")
	case r.Header.Get("X-GitHub-Api-Version") != apiVersion:
		return "X-GitHub-Api-Version " + r.Header.Get("X-GitHub-Api-Version")
	case r.Header.Get("User-Agent") == "":
		return "no User-Agent"
	}
	return ""
}

func bearer(r *http.Request) (string, bool) {
	return strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(x, s) })
}

// mint answers POST /app/installations/{id}/access_tokens.
func (s *Server) mint(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.mintReqs++
	hold, intercept := s.hold, s.intercept
	s.mu.Unlock()
	select {
	case s.started <- struct{}{}:
	default:
	}
	if hold != nil {
		<-hold
	}
	if intercept != nil && intercept(w, r) {
		return
	}
	if bad := checkHeaders(r); bad != "" {
		s.t.Errorf("fakegithub: token request: %s", bad)
		gitHubError(w, http.StatusBadRequest, bad)
		return
	}
	jwt, ok := bearer(r)
	if !ok {
		gitHubError(w, http.StatusUnauthorized, "Requires authentication")
		return
	}
	s.mu.Lock()
	s.jwts = append(s.jwts, jwt)
	fail := s.failMint
	s.mu.Unlock()
	claims, err := VerifyAppJWT(jwt, &appKey().PublicKey)
	if err != nil {
		gitHubError(w, http.StatusUnauthorized, "A JSON web token could not be decoded")
		return
	}
	now := s.now().Unix()
	switch {
	case claims.Issuer != s.appID:
		gitHubError(w, http.StatusUnauthorized, "'Issuer' claim ('iss') must be an Integer")
		return
	case claims.IssuedAt > now || claims.IssuedAt < now-120:
		gitHubError(w, http.StatusUnauthorized, "'Issued at' claim ('iat') must be an Integer representing a time in the past.")
		return
	case claims.ExpiresAt <= now || claims.ExpiresAt-claims.IssuedAt > 600:
		gitHubError(w, http.StatusUnauthorized, "'Expiration time' claim ('exp') is too far in the future")
		return
	}
	if id := r.PathValue("id"); id != strconv.FormatInt(s.inst, 10) {
		gitHubError(w, http.StatusNotFound, "Not Found")
		return
	}
	if fail != 0 {
		gitHubError(w, fail, "Server Error")
		return
	}
	var req TokenRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		gitHubError(w, http.StatusBadRequest, "Problems parsing JSON")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		s.t.Errorf("fakegithub: token request Content-Type %q", ct)
	}
	for _, name := range req.Repositories {
		if !containsFold(s.repos, name) {
			gitHubError(w, http.StatusUnprocessableEntity, "There is at least one repository that does not exist or is not accessible to the parent installation.")
			return
		}
	}
	for k, v := range req.Permissions {
		if have := s.perms[k]; permLevels[v] == 0 || permLevels[v] > permLevels[have] {
			gitHubError(w, http.StatusUnprocessableEntity, "The permissions requested are not granted to this installation.")
			return
		}
	}
	// As GitHub does, a request naming no repositories (permissions) gets all the
	// installation's.
	g := Grant{Repositories: slices.Clone(req.Repositories), Permissions: maps.Clone(req.Permissions)}
	if len(g.Repositories) == 0 {
		g.Repositories = slices.Clone(s.repos)
	}
	if len(g.Permissions) == 0 {
		g.Permissions = maps.Clone(s.perms)
	}
	var rnd [18]byte
	_, _ = rand.Read(rnd[:])
	tok := "ghs_" + hex.EncodeToString(rnd[:])
	repos := []map[string]any{}
	for _, name := range g.Repositories {
		repos = append(repos, map[string]any{"id": 1, "name": name, "full_name": Owner + "/" + name, "private": true})
	}

	s.mu.Lock()
	g.ExpiresAt = s.now().Add(s.ttl).UTC().Truncate(time.Second)
	s.tokens[tok] = &issued{Grant: g}
	s.minted = append(s.minted, tok)
	s.requests = append(s.requests, req)
	rewrite := s.rewrite
	s.mu.Unlock()
	ans := map[string]any{
		"token": tok, "expires_at": g.ExpiresAt.Format(time.RFC3339), "permissions": maps.Clone(g.Permissions),
		"repository_selection": "selected", "repositories": repos,
	}
	if rewrite != nil {
		rewrite(ans)
	}
	writeJSON(w, http.StatusCreated, ans)
}

// revoke answers DELETE /installation/token.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) {
	if bad := checkHeaders(r); bad != "" {
		s.t.Errorf("fakegithub: revocation: %s", bad)
	}
	tok, _ := bearer(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revokeReqs++
	if s.failRevoke != 0 {
		gitHubError(w, s.failRevoke, "Server Error")
		return
	}
	if _, ok := s.lookupLocked(tok); !ok {
		gitHubError(w, http.StatusUnauthorized, "Bad credentials")
		return
	}
	s.tokens[tok].revoked = true
	s.revoked = append(s.revoked, tok)
	w.WriteHeader(http.StatusNoContent)
}
