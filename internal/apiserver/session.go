package apiserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/console"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// The web console (internal/console) signs people in with an API key and then keeps a
// session: a random id in the moat_session cookie (HttpOnly, SameSite=Strict, Path=/,
// Secure behind TLS), stored hashed in SQLite (store/sessions.go) for sessionTTL. The gate
// (Handler) takes a session as its key's Caller when a request brings no API key
// (sessionCaller). A state-changing request so authenticated must carry the session's CSRF
// token in X-CSRF-Token, and any request with an Origin header must come from the
// daemon's own origin: a cookie rides on cross-site requests' handshakes, a header set by
// script does not.

const (
	sessionCookie = "moat_session"
	// loginCookie holds the pre-session token of the sign-in form (login CSRF).
	loginCookie = "moat_login"
	// CSRFHeader carries a console session's CSRF token on state-changing requests.
	CSRFHeader = "X-CSRF-Token"
	sessionTTL = 12 * time.Hour
)

// Sessions stores console sessions. Implemented by *store.Store.
type Sessions interface {
	// CreateSession starts a session for (already authenticated) API key key.
	CreateSession(ctx context.Context, key string, ttl time.Duration) (id, csrf string, err error)
	// SessionCaller returns whom session id acts as and its CSRF token; an unknown,
	// expired or orphaned (key deleted) session is errdefs.ErrUnauthenticated.
	SessionCaller(ctx context.Context, id string) (sandbox.Caller, string, error)
	DeleteSession(ctx context.Context, id string) error
}

// consoleConfig is what SetConsole gave: nil, no console (its routes answer 404).
type consoleConfig struct {
	sessions Sessions
	auth     Authenticator
	// proxyTLS: a TLS proxy is in front of the listener (moat serve
	// --console-secure-cookie), so cookies are Secure and the origin is https.
	proxyTLS bool
}

// SetConsole turns the web console on: sessions stores its sessions, auth checks the API
// keys people sign in with; proxyTLS says a TLS-terminating proxy is in front.
func (s *Server) SetConsole(sessions Sessions, auth Authenticator, proxyTLS bool) {
	s.console = &consoleConfig{sessions: sessions, auth: auth, proxyTLS: proxyTLS}
}

func (s *Server) consoleRoutes() []route {
	return []route{
		{"GET /ui/", s.uiAssets, public},
		{"GET /ui/login", s.uiLoginPage, public},
		{"POST /ui/login", s.uiLogin, public},
		{"POST /ui/logout", s.uiLogout, public},
		{"GET /ui/session", s.uiSession, public},
		{"GET /v1/sandboxes/{id}/terminal", s.terminal, byKey}, // terminal.go
	}
}

// https reports whether r reached the daemon over TLS (directly or through the proxy
// --console-secure-cookie declares).
func (c *consoleConfig) https(r *http.Request) bool { return r.TLS != nil || c.proxyTLS }

// sessionCaller is the gate's hook for requests without an API key: ok is false when r
// has no session cookie (or the console is off); otherwise the session's Caller, or an
// error: unauthenticated (no such session), permission denied (CSRF: a state-changing
// request without the session's token, or a request from another origin).
func (s *Server) sessionCaller(r *http.Request) (sandbox.Caller, bool, error) {
	c, _, ok, err := s.session(r)
	return c, ok, err
}

// session is sessionCaller with the session's CSRF token.
func (s *Server) session(r *http.Request) (c sandbox.Caller, csrf string, ok bool, err error) {
	ck, cerr := r.Cookie(sessionCookie)
	if s.console == nil || cerr != nil || ck.Value == "" {
		return sandbox.Caller{}, "", false, nil
	}
	c, csrf, err = s.console.sessions.SessionCaller(r.Context(), ck.Value)
	if err != nil {
		return sandbox.Caller{}, "", true, err
	}
	if err := checkCSRF(r.Method, r.Header.Get(CSRFHeader), csrf, r.Header.Get("Origin"), r.Host, s.console.https(r)); err != nil {
		s.log.Warn("console request refused", "method", r.Method, "path", r.URL.Path, "api_key", c.APIKey, "origin", r.Header.Get("Origin"), "err", err)
		return sandbox.Caller{}, "", true, err
	}
	c.Operator = false
	return c, csrf, true, nil
}

// checkCSRF decides whether a request authenticated by a session cookie may proceed:
// a request with an Origin header must come from the daemon's own origin (host, and
// scheme https or http); a state-changing one (not GET, HEAD or OPTIONS) must bear the
// session's CSRF token, compared in constant time. It is pure.
func checkCSRF(method, token, want, origin, host string, https bool) error {
	if origin != "" && !sameOrigin(origin, host, https) {
		return fmt.Errorf("a console request from origin %q (not this daemon's): %w", origin, errdefs.ErrPermissionDenied)
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(token), []byte(want)) != 1 {
		return fmt.Errorf("a console request without its session's %s header: %w", CSRFHeader, errdefs.ErrPermissionDenied)
	}
	return nil
}

// sameOrigin reports whether origin (an Origin header) is the daemon's own: scheme https
// when the request came over TLS, http otherwise, and host (with port) equal to the
// request's Host. "null" (an opaque origin: a sandboxed frame, a redirect's target) is
// never the daemon's. It is pure.
func sameOrigin(origin, host string, https bool) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" || u.User != nil || u.RawQuery != "" {
		return false
	}
	scheme := "http"
	if https {
		scheme = "https"
	}
	return u.Scheme == scheme && strings.EqualFold(u.Host, host)
}

// consoleHeaders sets the console's response headers: a strict Content-Security-Policy
// (scripts and connections only from the daemon itself; no inline script, no framing),
// no MIME sniffing, no referrer to other sites.
func (s *Server) consoleHeaders(w http.ResponseWriter, r *http.Request) {
	ws := "ws://" + r.Host
	if s.console != nil && s.console.https(r) {
		ws = "wss://" + r.Host
	}
	h := w.Header()
	// style-src allows inline style: xterm.js writes its own <style> element.
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "+
		"connect-src 'self' "+ws+"; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer a form post's Origin is "null".
	h.Set("Referrer-Policy", "same-origin")
}

func (s *Server) uiAssets(w http.ResponseWriter, r *http.Request) {
	if s.console == nil {
		http.NotFound(w, r)
		return
	}
	s.consoleHeaders(w, r)
	console.Assets().ServeHTTP(w, r)
}

// cookie returns a console cookie: HttpOnly, SameSite=Strict, Secure over TLS.
func (s *Server) cookie(r *http.Request, name, value, path string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: path, MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: s.console.https(r)}
}

// uiLoginPage serves the sign-in form with a fresh pre-session token, also set as the
// login cookie: a sign-in POST must bring both (a page of another site can post the form
// but cannot read or set the cookie), so nobody can sign a browser in to their own key.
func (s *Server) uiLoginPage(w http.ResponseWriter, r *http.Request) {
	s.loginForm(w, r, http.StatusOK, "")
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if s.console == nil {
		http.NotFound(w, r)
		return
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	s.consoleHeaders(w, r)
	http.SetCookie(w, s.cookie(r, loginCookie, tok, "/ui/login", 600))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = console.Login(w, tok, msg)
}

// uiLogin signs in: same origin, the pre-session token matching the login cookie, and a
// valid API key; then a new session's cookie and a redirect to the console.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) {
	if s.console == nil {
		http.NotFound(w, r)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host, s.console.https(r)) {
		s.log.Warn("console sign-in refused: cross-origin", "origin", o)
		s.loginForm(w, r, http.StatusForbidden, "Sign-in refused: the form was posted from another site.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		s.loginForm(w, r, http.StatusBadRequest, "Sign-in refused: unreadable form.")
		return
	}
	ck, err := r.Cookie(loginCookie)
	if err != nil || ck.Value == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(r.PostForm.Get("login_token"))) != 1 {
		s.log.Warn("console sign-in refused: no matching pre-session token")
		s.loginForm(w, r, http.StatusForbidden, "Sign-in refused: the sign-in page expired; try again.")
		return
	}
	key := strings.TrimSpace(r.PostForm.Get("key"))
	c, err := s.console.auth.Authenticate(r.Context(), key)
	if err != nil || key == "" {
		s.log.Warn("console sign-in refused: invalid API key", "remote", r.RemoteAddr)
		s.loginForm(w, r, http.StatusUnauthorized, "That API key is not valid.")
		return
	}
	id, _, err := s.console.sessions.CreateSession(r.Context(), key, sessionTTL)
	if err != nil {
		s.log.Error("console sign-in: creating the session", "err", err)
		s.loginForm(w, r, http.StatusInternalServerError, "Sign-in failed: the daemon could not store the session.")
		return
	}
	s.log.Info("console sign-in", "api_key", c.APIKey)
	http.SetCookie(w, s.cookie(r, loginCookie, "", "/ui/login", -1))
	http.SetCookie(w, s.cookie(r, sessionCookie, id, "/", int(sessionTTL/time.Second)))
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// uiLogout ends the session (a state-changing request: it needs the CSRF token).
func (s *Server) uiLogout(w http.ResponseWriter, r *http.Request) {
	if s.console == nil {
		http.NotFound(w, r)
		return
	}
	c, ok, err := s.sessionCaller(r)
	if err == nil && !ok {
		err = fmt.Errorf("not signed in: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	ck, _ := r.Cookie(sessionCookie)
	if err := s.console.sessions.DeleteSession(r.Context(), ck.Value); err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("console sign-out", "api_key", c.APIKey)
	http.SetCookie(w, s.cookie(r, sessionCookie, "", "/", -1))
	w.WriteHeader(http.StatusNoContent)
}

// ConsoleSession is GET /ui/session's answer: who is signed in and the CSRF token the
// page sends back in X-CSRF-Token.
type ConsoleSession struct {
	APIKey    string `json:"api_key"`
	CSRFToken string `json:"csrf_token"`
	// Owner is the key's owner name ("": none given) and Admin whether it sees every
	// sandbox (owners.go).
	Owner string `json:"owner,omitempty"`
	Admin bool   `json:"admin,omitempty"`
}

func (s *Server) uiSession(w http.ResponseWriter, r *http.Request) {
	if s.console == nil {
		http.NotFound(w, r)
		return
	}
	s.consoleHeaders(w, r)
	w.Header().Set("Cache-Control", "no-store")
	c, csrf, ok, err := s.session(r)
	if err == nil && !ok {
		err = fmt.Errorf("not signed in: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ConsoleSession{APIKey: c.APIKey, CSRFToken: csrf, Owner: c.Name, Admin: c.Admin})
}

// sessionHeaders marks every answer to a session-authenticated API request (set before
// the handler, so the envd proxy keeps them beside the sandbox's own headers): whatever
// a sandbox sends through the daemon's origin (a file's bytes, an envd answer) is never
// sniffed as HTML nor run as script with the console's origin, even when opened directly
// in the browser's tab.
func sessionHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
}
