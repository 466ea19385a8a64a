package tokens

import (
	"bytes"
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/moatdev/moat/internal/errdefs"
)

const (
	defaultAPIURL        = "https://api.github.com"
	defaultHTTPTimeout   = 30 * time.Second
	defaultRefreshBefore = 5 * time.Minute
	// mintTimeout bounds one mint (and the revocation of an over-granted token); revokeTimeout
	// bounds Revoke, which outlives its caller's cancellation.
	mintTimeout   = 30 * time.Second
	revokeTimeout = 30 * time.Second
	// maxTokenLifetime caps how long a token is cached, whatever expires_at says (GitHub
	// issues installation tokens for one hour).
	maxTokenLifetime = time.Hour
	// maxAnswer bounds a GitHub answer read into memory; a token answer lists each granted
	// repository in full (a few KiB each, at most 500).
	maxAnswer = 8 << 20
	// maxRepositories is GitHub's limit on repositories per installation token.
	maxRepositories = 500
	apiVersion      = "2022-11-28"
)

// GitHubAppConfig configures NewGitHubApp.
type GitHubAppConfig struct {
	// AppID is the App's ID or client ID, sent as the JWT "iss" claim.
	AppID string
	// PrivateKeyPEM is the App's RSA private key (PKCS#1 or PKCS#8 PEM, ≥ 2048 bits).
	PrivateKeyPEM []byte
	// InstallationID is the App installation tokens are minted for.
	InstallationID int64
	// Repositories are the repository names (without owner) a token is limited to;
	// required, at most 500.
	Repositories []string
	// Permissions are what a token may do, e.g. {"contents": "write"}; required; levels
	// are "read", "write" or "admin".
	Permissions map[string]string
	// APIURL is the REST API's base, default https://api.github.com (GitHub Enterprise
	// Server: https://HOST/api/v3). Plain http is accepted only for loopback hosts.
	APIURL string
	// HTTPClient sends the requests; default: a client with a 30 s timeout. It is copied
	// and made not to follow redirects, so credentials never go to another URL.
	HTTPClient *http.Client
	// Now is the clock; default time.Now.
	Now func() time.Time
	// RefreshBefore is how long before expiry a cached token is replaced; default 5 min.
	RefreshBefore time.Duration
	// Logger receives failed refreshes that were covered by a still-valid token; default:
	// discard. Records never hold a token, a JWT or key material.
	Logger *slog.Logger
	// Events, if set, is told of each token minted ("minted") and revoked ("revoked"),
	// with its expiry, for the audit log; never the token. It must not block.
	Events func(kind string, expiresAt time.Time)
}

// appIDRule matches App IDs (digits) and client IDs ("Iv1.0123abcd", "Iv23li...").
var appIDRule = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// repoRule matches a GitHub repository name: letters, digits, '.', '_', '-'.
var repoRule = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

// permRule matches a GitHub permission name such as "pull_requests".
var permRule = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// permLevels orders permission levels; a grant above the level asked for is refused.
func permLevels() map[string]int {
	return map[string]int{"read": 1, "write": 2, "admin": 3}
}

// gitHubApp mints GitHub App installation tokens limited to the configured repositories
// and permissions. It prints itself (fmt, slog) as its App and installation only.
type gitHubApp struct {
	cfg    GitHubAppConfig // PrivateKeyPEM dropped; Repositories, Permissions copied; APIURL without trailing '/'
	key    *rsa.PrivateKey
	client *http.Client
	log    *slog.Logger

	mu     sync.Mutex
	cur    *cached // nil: no token, or revoked
	flight *flight // non-nil while a mint runs
}

var (
	_ Provider       = (*gitHubApp)(nil)
	_ fmt.Formatter  = (*gitHubApp)(nil)
	_ slog.LogValuer = (*gitHubApp)(nil)
)

// String describes the provider without its key or token.
func (g *gitHubApp) String() string {
	return fmt.Sprintf("GitHub App %s installation %d", g.cfg.AppID, g.cfg.InstallationID)
}

// Format writes String for every verb, so that no verb walks into the key or the token.
func (g *gitHubApp) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, g.String()) }

// LogValue makes slog record the App and installation only.
func (g *gitHubApp) LogValue() slog.Value {
	return slog.GroupValue(slog.String("app", g.cfg.AppID), slog.Int64("installation", g.cfg.InstallationID))
}

type cached struct {
	tok       Token
	refreshAt time.Time
}

// flight is one mint shared by every Token call that arrives while it runs.
type flight struct {
	done chan struct{}
	tok  Token
	err  error
}

// NewGitHubApp checks cfg and returns a Provider of installation tokens. It makes no
// request; the first Token call mints. Bad configuration (key, IDs, repositories,
// permissions, API URL) is an error of class errdefs.ErrInvalidArgument.
func NewGitHubApp(cfg GitHubAppConfig) (Provider, error) {
	if !appIDRule.MatchString(cfg.AppID) {
		return nil, fmt.Errorf("GitHub App: AppID must be 1-64 letters, digits, '.', '_' or '-': %w", errdefs.ErrInvalidArgument)
	}
	if cfg.InstallationID <= 0 {
		return nil, fmt.Errorf("GitHub App: InstallationID must be positive: %w", errdefs.ErrInvalidArgument)
	}
	key, err := parseRSAKey(cfg.PrivateKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("GitHub App %s: %w", cfg.AppID, err)
	}
	repos, err := checkRepositories(cfg.Repositories)
	if err != nil {
		return nil, err
	}
	perms, err := checkPermissions(cfg.Permissions)
	if err != nil {
		return nil, err
	}
	cfg.Repositories, cfg.Permissions, cfg.PrivateKeyPEM = repos, perms, nil
	if cfg.APIURL == "" {
		cfg.APIURL = defaultAPIURL
	}
	if cfg.APIURL, err = checkAPIURL(cfg.APIURL); err != nil {
		return nil, err
	}
	switch {
	case cfg.RefreshBefore < 0:
		return nil, fmt.Errorf("GitHub App: negative RefreshBefore: %w", errdefs.ErrInvalidArgument)
	case cfg.RefreshBefore == 0:
		cfg.RefreshBefore = defaultRefreshBefore
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	client := &http.Client{Timeout: defaultHTTPTimeout}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		client = &c
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &gitHubApp{cfg: cfg, key: key, client: client, log: log}, nil
}

// CheckApp checks a GitHub App's identity and private key as NewGitHubApp does, without
// the task's scope: for storing an App before any task names its repositories. An empty
// apiURL means https://api.github.com. Errors are of class errdefs.ErrInvalidArgument and
// never carry key material.
func CheckApp(appID string, installationID int64, keyPEM []byte, apiURL string) error {
	if !appIDRule.MatchString(appID) {
		return fmt.Errorf("GitHub App: AppID must be 1-64 letters, digits, '.', '_' or '-': %w", errdefs.ErrInvalidArgument)
	}
	if installationID <= 0 {
		return fmt.Errorf("GitHub App: InstallationID must be positive: %w", errdefs.ErrInvalidArgument)
	}
	if _, err := parseRSAKey(keyPEM); err != nil {
		return fmt.Errorf("GitHub App %s: %w", appID, err)
	}
	if apiURL != "" {
		if _, err := checkAPIURL(apiURL); err != nil {
			return err
		}
	}
	return nil
}

// CheckScope checks a task's repositories (names without owner, 1-500) and permissions
// (name → read, write or admin; at least one) as NewGitHubApp does.
func CheckScope(repos []string, perms map[string]string) error {
	if _, err := checkRepositories(repos); err != nil {
		return err
	}
	_, err := checkPermissions(perms)
	return err
}

func checkRepositories(in []string) ([]string, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("GitHub App: no repositories; a token must be limited to some: %w", errdefs.ErrInvalidArgument)
	}
	if len(in) > maxRepositories {
		return nil, fmt.Errorf("GitHub App: %d repositories, at most %d: %w", len(in), maxRepositories, errdefs.ErrInvalidArgument)
	}
	out := make([]string, 0, len(in))
	seen := make(map[string]bool, len(in))
	for _, r := range in {
		if !repoRule.MatchString(r) || r == "." || r == ".." {
			return nil, fmt.Errorf("GitHub App: repository %.120q is not a repository name (without owner): %w", r, errdefs.ErrInvalidArgument)
		}
		if k := strings.ToLower(r); !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out, nil
}

func checkPermissions(in map[string]string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("GitHub App: no permissions; a token must be limited to some: %w", errdefs.ErrInvalidArgument)
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if !permRule.MatchString(k) {
			return nil, fmt.Errorf("GitHub App: permission name %.80q: %w", k, errdefs.ErrInvalidArgument)
		}
		if permLevels()[v] == 0 {
			return nil, fmt.Errorf("GitHub App: permission %s: level %.40q is not read, write or admin: %w", k, v, errdefs.ErrInvalidArgument)
		}
		out[k] = v
	}
	return out, nil
}

// checkAPIURL returns raw without a trailing '/', or an error if it is not an absolute
// https URL (http only to a loopback host) without user info, query or fragment.
func checkAPIURL(raw string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("GitHub App: APIURL %.200q %s: %w", raw, why, errdefs.ErrInvalidArgument)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("does not parse")
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return bad("is not an http(s) URL")
	case u.Host == "" || u.Hostname() == "":
		return bad("has no host")
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "":
		return bad("must not have user info, a query or a fragment")
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return bad("uses plain http to a host other than loopback")
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Token returns the cached installation token while it is more than RefreshBefore from
// expiry, otherwise mints one. Concurrent calls share one mint, which is not cancelled
// when a caller's ctx ends (it is bounded by its own timeout). If a refresh fails while
// the cached token is still valid, that token is returned and the failure is logged.
func (g *gitHubApp) Token(ctx context.Context) (Token, error) {
	g.mu.Lock()
	if c := g.cur; c != nil && g.cfg.Now().Before(c.refreshAt) {
		g.mu.Unlock()
		return c.tok, nil
	}
	f := g.flight
	if f == nil {
		f = &flight{done: make(chan struct{})}
		g.flight = f
		go g.fly(context.WithoutCancel(ctx), f)
	}
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.tok, f.err
	case <-ctx.Done():
		return Token{}, fmt.Errorf("GitHub App installation token: %w", ctx.Err())
	}
}

// fly runs mint for flight f and publishes its result.
func (g *gitHubApp) fly(ctx context.Context, f *flight) {
	ctx, cancel := context.WithTimeout(ctx, mintTimeout)
	defer cancel()
	c, err := g.mint(ctx)
	if err == nil && g.cfg.Events != nil {
		g.cfg.Events("minted", c.tok.ExpiresAt)
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		g.cur = &c
		f.tok = c.tok
	case g.cur != nil && g.cfg.Now().Before(g.cur.tok.ExpiresAt):
		g.log.Warn("refreshing GitHub App installation token failed; the current one is still valid",
			"app", g.cfg.AppID, "installation", g.cfg.InstallationID, "expires_at", g.cur.tok.ExpiresAt, "err", err)
		f.tok = g.cur.tok
	default:
		f.err = err
	}
	g.flight = nil
	close(f.done)
}

// accessTokenRequest is the body of POST /app/installations/{id}/access_tokens.
type accessTokenRequest struct {
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
}

// accessTokenAnswer is the part of GitHub's answer moat reads.
type accessTokenAnswer struct {
	Token               string            `json:"token"`
	ExpiresAt           time.Time         `json:"expires_at"`
	Permissions         map[string]string `json:"permissions"`
	RepositorySelection string            `json:"repository_selection"`
	Repositories        []struct {
		Name string `json:"name"`
	} `json:"repositories"`
}

// mint asks GitHub for a new installation token and checks that it grants no more than
// asked; a token that does is revoked and refused.
func (g *gitHubApp) mint(ctx context.Context) (cached, error) {
	now := g.cfg.Now()
	jwt, err := signAppJWT(g.key, g.cfg.AppID, now)
	if err != nil {
		return cached{}, fmt.Errorf("GitHub App %s: %w", g.cfg.AppID, err)
	}
	body, err := json.Marshal(accessTokenRequest{Repositories: g.cfg.Repositories, Permissions: g.cfg.Permissions})
	if err != nil {
		return cached{}, fmt.Errorf("GitHub App %s: encoding token request: %w", g.cfg.AppID, err)
	}
	path := "/app/installations/" + strconv.FormatInt(g.cfg.InstallationID, 10) + "/access_tokens"
	data, err := g.do(ctx, http.MethodPost, path, jwt, body)
	if err != nil {
		return cached{}, fmt.Errorf("minting installation token for GitHub App %s: %w", g.cfg.AppID, err)
	}
	ans, err := parseAccessToken(data)
	if err != nil {
		return cached{}, fmt.Errorf("minting installation token for GitHub App %s: %w", g.cfg.AppID, err)
	}
	tok := NewSecret(ans.Token)
	if err := checkGrant(ans, g.cfg.Repositories, g.cfg.Permissions); err != nil {
		err = fmt.Errorf("GitHub App %s installation %d: %w", g.cfg.AppID, g.cfg.InstallationID, err)
		if rerr := g.revoke(ctx, tok); rerr != nil {
			err = errors.Join(err, fmt.Errorf("revoking that token: %w", rerr))
		}
		return cached{}, err
	}
	if !ans.ExpiresAt.After(now) {
		_ = g.revoke(ctx, tok)
		return cached{}, fmt.Errorf("GitHub App %s: installation token already expired at %s: %w", g.cfg.AppID, ans.ExpiresAt.Format(time.RFC3339), errdefs.ErrUnavailable)
	}
	return cached{tok: Token{Value: tok, ExpiresAt: ans.ExpiresAt}, refreshAt: refreshAt(now, ans.ExpiresAt, g.cfg.RefreshBefore)}, nil
}

// refreshAt is when a token minted at now and expiring at exp is replaced: RefreshBefore
// ahead of expiry (capped at an hour's life), or halfway through a shorter life.
func refreshAt(now, exp time.Time, before time.Duration) time.Time {
	if limit := now.Add(maxTokenLifetime); exp.After(limit) {
		exp = limit
	}
	life := exp.Sub(now)
	if life <= before {
		return now.Add(life / 2)
	}
	return exp.Add(-before)
}

// parseAccessToken decodes GitHub's answer to a token request and checks that it holds a
// usable token: 1-1024 visible ASCII characters (it goes into a header) and an expiry.
// Errors never contain the token.
func parseAccessToken(data []byte) (accessTokenAnswer, error) {
	var ans accessTokenAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return accessTokenAnswer{}, fmt.Errorf("GitHub answer is not JSON (offset %d): %w", se.Offset, errdefs.ErrUnavailable)
		}
		// Type errors name the field and type, never the value.
		return accessTokenAnswer{}, fmt.Errorf("malformed GitHub answer: %v: %w", err, errdefs.ErrUnavailable)
	}
	if l := len(ans.Token); l == 0 || l > 1024 {
		return accessTokenAnswer{}, fmt.Errorf("GitHub answer holds a token of %d bytes: %w", l, errdefs.ErrUnavailable)
	}
	for i := 0; i < len(ans.Token); i++ {
		if c := ans.Token[i]; c <= ' ' || c >= 0x7f {
			return accessTokenAnswer{}, fmt.Errorf("GitHub answer holds a token with a byte that cannot go in a header: %w", errdefs.ErrUnavailable)
		}
	}
	if ans.ExpiresAt.IsZero() {
		return accessTokenAnswer{}, fmt.Errorf("GitHub answer has no expires_at: %w", errdefs.ErrUnavailable)
	}
	return ans, nil
}

// ErrOverGranted is the class of errors for a token that grants more than was asked for.
var ErrOverGranted = errors.New("token grants more than asked")

// checkGrant returns an error (ErrOverGranted) unless the answer lists its repositories
// and permissions and each is among, and at most the level of, those asked for.
func checkGrant(ans accessTokenAnswer, repos []string, perms map[string]string) error {
	if ans.RepositorySelection == "all" {
		return fmt.Errorf("token reaches all repositories: %w", ErrOverGranted)
	}
	if ans.Repositories == nil {
		return fmt.Errorf("answer does not list the token's repositories: %w", ErrOverGranted)
	}
	for _, r := range ans.Repositories {
		if !containsFold(repos, r.Name) {
			return fmt.Errorf("token reaches repository %.120q, not asked for: %w", r.Name, ErrOverGranted)
		}
	}
	if ans.Permissions == nil {
		return fmt.Errorf("answer does not list the token's permissions: %w", ErrOverGranted)
	}
	for k, got := range ans.Permissions {
		want, ok := perms[k]
		if !ok {
			return fmt.Errorf("token has permission %.80q, not asked for: %w", k, ErrOverGranted)
		}
		if g := permLevels()[got]; g == 0 || g > permLevels()[want] {
			return fmt.Errorf("token has %.80q permission %.40q, asked for %s: %w", k, got, want, ErrOverGranted)
		}
	}
	return nil
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// Revoke revokes the current installation token (DELETE /installation/token), waiting for
// a mint in progress to finish first. Without a token, or with an expired one, it does
// nothing; GitHub answering 401 (the token is no longer valid) counts as success. If the
// revocation fails the token is kept, so a later Revoke tries again. It runs for up to
// 30 s whatever ctx does.
func (g *gitHubApp) Revoke(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), revokeTimeout)
	defer cancel()
	g.mu.Lock()
	for g.flight != nil {
		f := g.flight
		g.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return fmt.Errorf("revoking GitHub App installation token: waiting for a mint: %w", ctx.Err())
		}
		g.mu.Lock()
	}
	c := g.cur
	g.cur = nil
	g.mu.Unlock()
	if c == nil || !g.cfg.Now().Before(c.tok.ExpiresAt) {
		return nil
	}
	if err := g.revoke(ctx, c.tok.Value); err != nil {
		g.mu.Lock()
		if g.cur == nil && g.flight == nil {
			g.cur = c
		}
		g.mu.Unlock()
		return fmt.Errorf("revoking installation token of GitHub App %s: %w", g.cfg.AppID, err)
	}
	if g.cfg.Events != nil {
		g.cfg.Events("revoked", c.tok.ExpiresAt)
	}
	return nil
}

// revoke invalidates tok at GitHub.
func (g *gitHubApp) revoke(ctx context.Context, tok Secret) error {
	_, err := g.do(ctx, http.MethodDelete, "/installation/token", tok.Reveal(), nil)
	var ae *APIError
	if errors.As(err, &ae) && ae.StatusCode == http.StatusUnauthorized {
		return nil // the token is not valid any more: that is what was wanted
	}
	return err
}

// do sends method path to the API with bearer credential cred and returns the body of a
// 2xx answer, or an *APIError. Errors never contain cred.
func (g *gitHubApp) do(ctx context.Context, method, path, cred string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.cfg.APIURL+path, rd)
	if err != nil {
		return nil, fmt.Errorf("building %s %s: %w", method, path, errdefs.ErrInvalidArgument)
	}
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", apiVersion)
	req.Header.Set("User-Agent", "moat")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := g.client.Do(req)
	if err != nil {
		// A *url.Error names the method and URL (no credentials) and the cause.
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading answer: %w: %w", method, path, err, errdefs.ErrUnavailable)
	}
	if len(data) > maxAnswer {
		return nil, fmt.Errorf("%s %s: answer larger than %d bytes: %w", method, path, maxAnswer, errdefs.ErrUnavailable)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, newAPIError(method, path, resp.StatusCode, data, cred)
	}
	return data, nil
}

// APIError is a non-2xx answer from the GitHub API.
type APIError struct {
	Method, Path string // e.g. "POST", "/app/installations/1/access_tokens"
	StatusCode   int
	Message      string // GitHub's "message", shortened and cleaned; may be empty
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("GitHub API %s %s: %d %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap gives the error's class: ErrInvalidArgument for 404 and 422 (the installation,
// a repository or a permission is not there to grant), ErrUnavailable for the rest.
func (e *APIError) Unwrap() error {
	switch e.StatusCode {
	case http.StatusNotFound, http.StatusUnprocessableEntity:
		return errdefs.ErrInvalidArgument
	}
	return errdefs.ErrUnavailable
}

// maxMessage bounds the GitHub message kept in an APIError.
const maxMessage = 300

// newAPIError reads GitHub's {"message": ...} from data, removes cred from it should the
// server have echoed it, and keeps at most maxMessage printable characters.
func newAPIError(method, path string, status int, data []byte, cred string) *APIError {
	var body struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(data, &body)
	msg := body.Message
	if cred != "" {
		msg = strings.ReplaceAll(msg, cred, redacted)
	}
	msg = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, msg)
	if r := []rune(msg); len(r) > maxMessage {
		msg = string(r[:maxMessage]) + "…"
	}
	return &APIError{Method: method, Path: path, StatusCode: status, Message: strings.TrimSpace(msg)}
}
