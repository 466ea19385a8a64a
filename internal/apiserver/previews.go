package apiserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/envdauth"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/previews"
	"github.com/moatdev/moat/internal/sandbox"
)

// PortDialer reaches a sandbox's ports. Implemented by *sandbox.Manager.
type PortDialer interface {
	// DialPort connects to port of sandbox id from its gateway namespace.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
	// ProcNetTCP returns /proc/net/tcp{,6} of the sandbox's network namespace.
	ProcNetTCP(ctx context.Context, id string) ([]byte, error)
}

// PortStore keeps ports' visibilities and tokens. Implemented by *store.Store.
type PortStore interface {
	Ports(ctx context.Context, id string) ([]previews.Setting, error)
	Port(ctx context.Context, id string, port int) (previews.Setting, bool, error)
	SetPort(ctx context.Context, id string, p previews.Setting) error
	// AddPort stores p unless the port has a setting already (then it keeps that one).
	AddPort(ctx context.Context, id string, p previews.Setting) error
	DeletePort(ctx context.Context, id string, port int) error
}

// PreviewConfig is how port previews are served (SetPreviews).
type PreviewConfig struct {
	Dialer PortDialer
	Store  PortStore
	// Domain is the host-based previews' domain, with a :port when URLs carry one
	// ("": host-based previews are off; path-based ones always work).
	Domain string
	// AllowPublic: ports may be made public (moat serve --allow-public-ports).
	AllowPublic bool
}

// previewState is the Server's previews: the config and the proxy to sandbox ports.
type previewState struct {
	PreviewConfig
	proxy *httputil.ReverseProxy
}

// previewDest is a forwarded preview request's target (in its context).
type previewDest struct {
	t    previews.Target
	rest string // escaped path to send
	// prefix is /preview/<id>/<port> of a path-based preview ("" host-based); shared: the
	// response is served on the daemon's own origin (path-based, or E2B's header-routed).
	prefix string
	shared bool
	// e2bHeaders: an E2B SDK's request routed by E2b-Sandbox-Id/-Port.
	e2bHeaders bool
}

type previewKey struct{}

// SetPreviews turns port previews on: the routes /v1/sandboxes/{id}/ports, the
// path-based and (with a domain) host-based preview URLs, E2B's getHost and ports other
// than envd's through the E2B gateway.
func (s *Server) SetPreviews(c PreviewConfig) {
	p := &previewState{PreviewConfig: c}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			d := pr.In.Context().Value(previewKey{}).(previewDest)
			path, err := url.PathUnescape(d.rest)
			if err != nil {
				path = d.rest
			}
			pr.Out.URL = &url.URL{Scheme: "http", Host: d.t.ID + ":" + strconv.Itoa(d.t.Port), Path: path, RawPath: d.rest, RawQuery: pr.In.URL.RawQuery}
			pr.Out.Host = pr.In.Host // dev servers check their Host
			pr.SetXForwarded()
			if d.prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", d.prefix)
			}
			previews.Strip(pr.Out.Header, pr.Out.URL)
		},
		Transport: &http.Transport{
			// Hosts are "<sandbox-id>:<port>": dialled from that sandbox's gateway
			// namespace to its address only; nothing resolves or routes through the host.
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				id, ps, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				port, ok := previews.ParsePort(ps)
				if !ok || !sandbox.IsFullID(id) {
					return nil, fmt.Errorf("bad preview address %q: %w", addr, errdefs.ErrInvalidArgument)
				}
				return c.Dialer.DialPort(ctx, id, port)
			},
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		},
		FlushInterval: -1, // server-sent events, streamed output
		ModifyResponse: func(resp *http.Response) error {
			d := resp.Request.Context().Value(previewKey{}).(previewDest)
			if cs := resp.Header.Values("Set-Cookie"); len(cs) > 0 {
				resp.Header.Del("Set-Cookie")
				for _, c := range cs {
					if previews.KeepSetCookie(c, d.prefix) && (!d.shared || d.prefix != "") {
						resp.Header.Add("Set-Cookie", c)
					}
				}
			}
			if d.shared {
				resp.Header.Add("Content-Security-Policy", previews.SharedOriginCSP)
			}
			return nil
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			d := r.Context().Value(previewKey{}).(previewDest)
			msg := fmt.Sprintf("moat: port %d of sandbox %s did not answer", d.t.Port, d.t.ID)
			if errors.Is(err, syscall.ECONNREFUSED) {
				msg = fmt.Sprintf("moat: no process listens on port %d of sandbox %s", d.t.Port, d.t.ID)
			}
			s.log.Debug("preview forward failed", "sandbox", d.t.ID, "port", d.t.Port, "err", err)
			previewError(w, http.StatusBadGateway, msg)
		},
	}
	s.previews = p
}

// previewRoutes are the routes of port settings.
func (s *Server) previewRoutes() []route {
	return []route{
		{"GET /v1/sandboxes/{id}/ports", s.listPorts, byKey},
		{"PUT /v1/sandboxes/{id}/ports/{port}", s.setPort, byKey},
		{"DELETE /v1/sandboxes/{id}/ports/{port}", s.closePort, byKey},
	}
}

// servePreview serves r when it is a preview: a host-based preview's Host, or the
// path-based previews' space /preview/. It runs before the API key gate: a preview decides
// its own access (previews.Allowed). It reports whether it served r.
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request, auth Authenticator) bool {
	p := s.previews
	if p == nil {
		return false
	}
	if t, ok := previews.ParseHost(r.Host, p.Domain); ok {
		if strconv.Itoa(t.Port) == envdPort {
			// The E2B SDK's envd URL when it runs without E2B_SANDBOX_URL: the gateway.
			r.Header.Set(e2bSandboxHeader, t.ID)
			r.Header.Set(e2bPortHeader, envdPort)
			s.e2bGateway(w, r, auth)
			return true
		}
		s.preview(w, r, auth, previewDest{t: t, rest: r.URL.EscapedPath()})
		return true
	}
	if !previews.IsPreviewPath(r.URL.Path) {
		return false
	}
	t, rest, ok := previews.ParsePath(r.URL.EscapedPath())
	if !ok {
		previewError(w, http.StatusNotFound, "moat: not a preview URL: want /preview/<sandbox-id>/<port>/ (port 1-65535)")
		return true
	}
	prefix := strings.TrimSuffix(previews.PathURL(t), "/")
	if rest == "" {
		u := prefix + "/"
		if r.URL.RawQuery != "" {
			u += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, u, http.StatusPermanentRedirect)
		return true
	}
	s.preview(w, r, auth, previewDest{t: t, rest: rest, prefix: prefix, shared: true})
	return true
}

// isPreview reports whether servePreview serves r (the metrics' route label).
func (s *Server) isPreview(r *http.Request) bool {
	if s.previews == nil {
		return false
	}
	_, host := previews.ParseHost(r.Host, s.previews.Domain)
	return host || previews.IsPreviewPath(r.URL.Path)
}

// e2bPreview serves an E2B SDK's request for a sandbox port other than envd's (E2b-Sandbox-Port;
// @e2b/code-interpreter's port 49999). Besides a preview's own access, the sandbox's envd
// access token (X-Access-Token) opens it: it already allows running anything there.
func (s *Server) e2bPreview(w http.ResponseWriter, r *http.Request, auth Authenticator, id, port string) {
	n, ok := previews.ParsePort(port)
	if s.previews == nil || !ok || !sandbox.IsFullID(id) {
		writeGone(w, id, "moat forwards port "+port+" of no sandbox (previews are off, or the port or id is not valid)")
		return
	}
	s.preview(w, r, auth, previewDest{t: previews.Target{ID: id, Port: n}, rest: r.URL.EscapedPath(), shared: true, e2bHeaders: true})
}

// preview decides and forwards one preview request. Whatever stops it before the
// sandbox's state is known (no such sandbox, not the caller's, no or a wrong token, a
// public port while public ports are off) answers the same 404.
func (s *Server) preview(w http.ResponseWriter, r *http.Request, auth Authenticator, d previewDest) {
	ctx := r.Context()
	denied := func() {
		previewError(w, http.StatusNotFound, fmt.Sprintf("moat: no preview of port %d of sandbox %s that you may open (authenticate with an API key, or give the port's token)", d.t.Port, d.t.ID))
	}
	if !sandbox.IsFullID(d.t.ID) {
		denied()
		return
	}
	sb, err := s.sandboxes.Get(ctx, d.t.ID)
	if err != nil || sb.Warm {
		denied()
		return
	}
	a := previews.Access{Given: previews.GivenToken(r.Header, r.URL.Query()), AllowPublic: s.previews.AllowPublic}
	if set, ok, err := s.previews.Store.Port(ctx, sb.ID, d.t.Port); err != nil {
		s.log.Error("reading a port setting", "sandbox", sb.ID, "port", d.t.Port, "err", err)
		previewError(w, http.StatusInternalServerError, "moat: reading the port's setting failed")
		return
	} else if ok {
		a.Visibility, a.Token = set.Visibility, set.Token
	}
	if set, ok, err := s.previews.Store.Port(ctx, sb.ID, 0); err == nil && ok {
		a.SandboxToken = set.Token
	}
	if c, ok := s.previewCaller(r, auth); ok && c.MayUse(sb) {
		a.MayUse = true
	} else if d.e2bHeaders && sb.AccessToken != "" && envdauth.NewToken(sb.AccessToken).Equal(r.Header.Get("X-Access-Token")) {
		a.MayUse = true
	}
	if !previews.Allowed(a) {
		denied()
		return
	}
	if sb.State != sandbox.StateRunning && !sandbox.Resumable(sb) {
		previewError(w, http.StatusBadGateway, fmt.Sprintf("moat: sandbox %s is %s; start it (moat start %s) to reach its port %d", sb.ID, sb.State, sb.ID, d.t.Port))
		return
	}
	// An allowed request resumes a sandbox stopped for idleness, and keeps it in use
	// while the answer (or WebSocket) lasts.
	cur, release, err := s.acquireStarting(ctx, sb) // e2b_templates.go: a fresh start runs the start command
	if err != nil {
		previewError(w, http.StatusBadGateway, fmt.Sprintf("moat: sandbox %s could not be resumed: %v", sb.ID, err))
		return
	}
	defer release()
	if cur.State != sandbox.StateRunning {
		previewError(w, http.StatusBadGateway, fmt.Sprintf("moat: sandbox %s is %s", sb.ID, cur.State))
		return
	}
	s.previews.proxy.ServeHTTP(w, r.WithContext(context.WithValue(ctx, previewKey{}, d)))
}

// previewCaller returns who a preview request authenticates as: the operator on the unix
// socket (auth nil), or the API key it carries as the gate reads one (Authorization:
// Bearer, else X-API-KEY), else its console session. A missing or unknown key is no caller (not an error: the
// request may still hold the port's token, or the port be public).
func (s *Server) previewCaller(r *http.Request, auth Authenticator) (sandbox.Caller, bool) {
	if auth == nil {
		return sandbox.Caller{Operator: true}, true
	}
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		key = r.Header.Get("X-API-KEY")
	}
	if key == "" {
		// A console session (session.go), with its CSRF and Origin checks: a navigation
		// from the console's ports tab opens a private port; a page inside a path-based
		// preview (an opaque origin, see previews.SharedOriginCSP) sends no session.
		c, ok, err := s.sessionCaller(r)
		return c, ok && err == nil
	}
	c, err := auth.Authenticate(r.Context(), key)
	if err != nil {
		return sandbox.Caller{}, false
	}
	c.Operator = false
	return c, true
}

// previewError answers a preview with a plain-text error (a browser shows it as text).
func previewError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", previews.SharedOriginCSP)
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}

// portOf parses the {port} of a route.
func portOf(r *http.Request) (int, error) {
	n, ok := previews.ParsePort(r.PathValue("port"))
	if !ok {
		return 0, fmt.Errorf("port %q: want 1-65535: %w", r.PathValue("port"), errdefs.ErrInvalidArgument)
	}
	return n, nil
}

// toPort is the API's view of a port.
func (s *Server) toPort(r *http.Request, id string, set previews.Setting, listening bool) v1.Port {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	t := previews.Target{ID: id, Port: set.Port}
	p := v1.Port{Port: set.Port, Visibility: set.Visibility, Listening: listening, Token: set.Token,
		URL: previews.HostURL(scheme, s.previews.Domain, t), PathURL: previews.PathURL(t)}
	if p.Visibility == "" {
		p.Visibility = v1.PortPrivate
	}
	if p.Visibility != v1.PortToken {
		p.Token = ""
	}
	return p
}

func (s *Server) previewsOff(w http.ResponseWriter) bool {
	if s.previews == nil {
		writeError(w, fmt.Errorf("port previews are not available: %w", errdefs.ErrNotImplemented))
		return true
	}
	return false
}

// listPorts answers the sandbox's listening ports (from its /proc/net/tcp{,6}) and the
// ports opened beyond private, merged.
func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	if s.previewsOff(w) {
		return
	}
	id := r.PathValue("id")
	sb, err := s.sandboxes.Get(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	sets, err := s.previews.Store.Ports(r.Context(), sb.ID)
	if err != nil {
		writeError(w, err)
		return
	}
	listening := map[int]bool{}
	if sb.State == sandbox.StateRunning {
		if b, err := s.previews.Dialer.ProcNetTCP(r.Context(), sb.ID); err == nil {
			for _, p := range previews.ListeningPorts(b) {
				if strconv.Itoa(p) != envdPort { // moat-init's own (the E2B gateway's)
					listening[p] = true
				}
			}
		} else {
			s.log.Debug("listing a sandbox's sockets", "sandbox", sb.ID, "err", err)
		}
	}
	byPort := map[int]previews.Setting{}
	for _, set := range sets {
		if set.Port > 0 {
			byPort[set.Port] = set
		}
	}
	for p := range listening {
		if _, ok := byPort[p]; !ok {
			byPort[p] = previews.Setting{Port: p, Visibility: v1.PortPrivate}
		}
	}
	out := make([]v1.Port, 0, len(byPort))
	for _, set := range byPort {
		out = append(out, s.toPort(r, sb.ID, set, listening[set.Port]))
	}
	slices.SortFunc(out, func(a, b v1.Port) int { return a.Port - b.Port })
	writeJSON(w, http.StatusOK, out)
}

// setPort sets a port's visibility: token makes (or keeps) the port's token; private
// forgets the setting; public needs the operator's --allow-public-ports.
func (s *Server) setPort(w http.ResponseWriter, r *http.Request) {
	if s.previewsOff(w) {
		return
	}
	port, err := portOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if strconv.Itoa(port) == envdPort {
		writeError(w, fmt.Errorf("port %s is moat-init's envd (reached with the sandbox's access token), not a preview: %w", envdPort, errdefs.ErrInvalidArgument))
		return
	}
	var req v1.PortRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if !previews.ValidVisibility(req.Visibility) {
		writeError(w, fmt.Errorf("visibility %q: want %s, %s or %s: %w", req.Visibility, v1.PortPrivate, v1.PortToken, v1.PortPublic, errdefs.ErrInvalidArgument))
		return
	}
	if req.Visibility == v1.PortPublic && !s.previews.AllowPublic {
		writeError(w, fmt.Errorf("public ports are off on this daemon (the operator allows them with `moat serve --allow-public-ports`); use --visibility token: %w", errdefs.ErrPermissionDenied))
		return
	}
	id := r.PathValue("id")
	set := previews.Setting{Port: port, Visibility: req.Visibility}
	switch req.Visibility {
	case v1.PortPrivate:
		err = s.previews.Store.DeletePort(r.Context(), id, port)
	case v1.PortToken:
		if cur, ok, gerr := s.previews.Store.Port(r.Context(), id, port); gerr == nil && ok && cur.Token != "" {
			set.Token = cur.Token // opening a token port again keeps its token
		} else {
			set.Token = newPreviewToken()
		}
		fallthrough
	default:
		err = s.previews.Store.SetPort(r.Context(), id, set)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.toPort(r, id, set, false))
}

// closePort makes a port private again and revokes its token.
func (s *Server) closePort(w http.ResponseWriter, r *http.Request) {
	if s.previewsOff(w) {
		return
	}
	port, err := portOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if err := s.previews.Store.DeletePort(r.Context(), id, port); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.toPort(r, id, previews.Setting{Port: port, Visibility: v1.PortPrivate}, false))
}

// newPreviewToken is a port's (or a sandbox's traffic) token: 256 random bits.
func newPreviewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "mpt_" + hex.EncodeToString(b[:])
}

// e2bPreviewFields fills an E2B create/connect answer's domain (the preview domain, for
// the SDK's getHost) and trafficAccessToken: the sandbox-wide token the SDK sends on its
// port requests (E2B-Traffic-Access-Token), made on first use. Ports stay private to
// everyone else, as if every E2B sandbox were created with allowPublicTraffic false.
func (s *Server) e2bPreviewFields(ctx context.Context, e *e2bSandbox) {
	if s.previews == nil {
		return
	}
	e.Domain = s.previewDomain()
	tok, err := s.e2bTrafficToken(ctx, e.SandboxID)
	if err != nil {
		s.log.Error("making a sandbox's traffic token", "sandbox", e.SandboxID, "err", err)
		return
	}
	e.TrafficAccessToken = &tok
}

// previewDomain is the preview domain E2B answers carry (nil: none).
func (s *Server) previewDomain() *string {
	if s.previews == nil || s.previews.Domain == "" {
		return nil
	}
	d := s.previews.Domain
	return &d
}

func (s *Server) e2bTrafficToken(ctx context.Context, id string) (string, error) {
	if set, ok, err := s.previews.Store.Port(ctx, id, 0); err != nil {
		return "", err
	} else if ok && set.Token != "" {
		return set.Token, nil
	}
	// Two answers at once make one token: the first stored wins, both read it back.
	if err := s.previews.Store.AddPort(ctx, id, previews.Setting{Port: 0, Visibility: v1.PortToken, Token: newPreviewToken()}); err != nil {
		return "", err
	}
	set, _, err := s.previews.Store.Port(ctx, id, 0)
	return set.Token, err
}
