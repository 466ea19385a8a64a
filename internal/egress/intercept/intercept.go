// Package intercept brokers credentials on a sandbox's TLS connections to a bound host.
//
// Real secrets never enter a sandbox: it holds a random placeholder. When the egress proxy
// sees a TLS connection to a host a secret is bound to, it hands the connection to Serve,
// which
//
//  1. terminates the sandbox's TLS with a leaf certificate for the host, minted by the
//     sandbox's own CA (whose certificate, never its key, is in the sandbox's trust store);
//  2. reads HTTP/1.1 requests (ALPN offers http/1.1 only), refuses those that name another
//     host (421), and writes the real value into the outbound request: in place of the
//     placeholder in the binding's own header only (Authorization unless it names
//     another), in the credential forms swapCredential lists ("Bearer PH", "PH", Basic
//     credentials with PH as user or password, ...); or as a header set from a template;
//  3. sends the request over a new TLS connection to the real upstream, verified against
//     the system roots or the operator's CAs;
//  4. streams the response back with every value, and its common encodings (URL, JSON,
//     hex, base64, also inside a longer base64 run), in headers, trailers and body,
//     replaced by the placeholder's same encoding (or "[redacted]").
//
// The same path serves hosts whose requests the egress policy limits (HTTP rules): Check
// decides each request before it is sent, with or without injections; and other ports of
// a bound host, where injections marked ScrubOnly are scrubbed from responses and never
// written into requests.
//
// What the proxy decides, not this package: plain HTTP to a host reaches Serve only when
// an HTTP rule covers the host or a binding for it says PlainHTTP, and only injections
// marked PlainHTTP are applied in clear (the value would cross the network unprotected,
// to an upstream nobody verified); TLS to hosts without a binding or HTTP rule passes
// through untouched.
//
// Limits, by design:
//   - A placeholder anywhere but in its binding's header, in a supported form, goes
//     upstream unchanged (as the harmless placeholder): other headers, the query string,
//     the path and the body never carry the value, so an upstream that keeps request data
//     cannot be made to store it where the sandbox can read it back.
//   - Scrubbing finds the value in the encodings scrubPairs lists. An upstream that
//     returns it otherwise (hashed, encrypted, compressed by itself, split into pieces,
//     across responses, or a few characters at a time) can return it to the sandbox:
//     bind secrets only to hosts trusted with them.
//   - Responses are asked for uncompressed (Accept-Encoding: identity); gzip and deflate
//     bodies sent anyway are decoded before scrubbing; any other encoding is refused (502).
//   - Protocol upgrades (WebSocket, h2c) and CONNECT are refused (501): the bytes after an
//     upgrade are framed, and scrubbing them in place would corrupt the frames.
package intercept

import (
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

// Secret is a credential's value. Reveal is called once per request; values that rotate
// (short-lived tokens) are picked up on the next request.
type Secret interface{ Reveal() string }

// Fetcher is a Secret whose current value is fetched for each request and may fail: a
// short-lived token minted on demand. A request whose fetch fails gets 502 and is not sent.
type Fetcher interface {
	Secret
	Fetch(ctx context.Context) (string, error)
}

// Injection is what to do with requests to one bound host.
type Injection struct {
	Secret string // the secret's name, for the audit log
	Value  Secret
	// Placeholder, if not empty, is replaced by the value in PlaceholderHeader, when that
	// header's value is one of the credential forms of swapCredential ("Bearer PH",
	// "token PH", "PH", "Basic base64(user:PH)", "Basic base64(PH:x)", ...), and nowhere
	// else. At least 8 bytes: a short one would match by chance.
	Placeholder string
	// PlaceholderHeader is the header the placeholder is swapped in; empty means
	// Authorization. Only with Placeholder.
	PlaceholderHeader string
	// Header, if not empty, is set on every request to Template with "{{value}}" replaced
	// by the value. An empty Template means the bare value. Hop-by-hop and framing headers
	// (Host, Content-Length, Transfer-Encoding, Connection, …) cannot be set.
	Header   string
	Template string
	// PathPrefix, if not empty, limits the injection to requests whose path, as sent
	// (escaped), starts with it (a string prefix: use "/v1/" rather than "/v1"). Paths
	// that policy.CleanHTTPPath refuses (dot or empty segments, backslashes, encoded '/',
	// '\' or '.') never match: the upstream might resolve them elsewhere.
	PathPrefix string
	// Methods, if not empty, limits the injection to these methods (case-sensitive, as
	// methods are).
	Methods []string
	// PlainHTTP lets the injection into requests on a plain HTTP connection (see
	// Config.PlainHTTP); otherwise it applies over TLS only.
	PlainHTTP bool
	// ScrubOnly keeps the value out of every request and still scrubs it from responses:
	// for a port of a bound host that the binding does not cover, where the host may
	// serve what it stored from a request on a covered one.
	ScrubOnly bool
	// Approve: a request the value would be written into is held until Config.Approve
	// says yes; refused, unanswered or without Config.Approve, it gets 403 and nothing of
	// it is sent (approve.go).
	Approve bool
}

// Use is one intercepted request, for the audit log. It never carries a value.
type Use struct {
	Scheme             string // "https", or "http" on a plain connection
	Host, Method, Path string // Path without the query
	// Secret names the injections written into the request (comma-separated), or, when
	// none was, those whose path and method limits matched.
	Secret string
	// Injected says a real value was written to the upstream connection.
	Injected bool
	// Status is the status sent to the sandbox (0 if none was).
	Status int
}

// Config is what Serve needs for one bound host.
type Config struct {
	CA *CA // the sandbox's CA; required
	// RootCAs verifies the upstream: the system roots plus the operator's extra CAs
	// (--egress-ca). nil means the system roots.
	RootCAs    *x509.CertPool
	Injections []Injection // for this host
	Audit      func(Use)   // called once per request, after the response; optional
	Log        *slog.Logger
	// PlainHTTP lets Serve take a plain HTTP connection (head does not start a TLS
	// handshake): requests are read in clear and sent to the upstream in clear, with only
	// the injections marked PlainHTTP. The proxy sets it for hosts whose HTTP rules or
	// bindings allow it; without it such a connection is an error before anything is read.
	PlainHTTP bool
	// Check, if set, decides each request before anything is sent upstream (the egress
	// policy's HTTP rules): a refused request gets 403 with reason, and nothing of it
	// reaches the upstream. path is the escaped path without the query.
	Check func(method, path string) (allow bool, reason string)
	// Git, if set, is the sandbox's git gate: pushes are decided (after Check, before the
	// credential is fetched) and push advertisements filtered; see GitGate.
	Git *GitGate
	// Approve, if set, decides the requests an injection marked Approve would be written
	// into (approve.go), after Check and the git gate, before any value is fetched.
	Approve ApproveFunc

	// IdleTimeout ends a client connection that sends no request for this long
	// (default 15 min, the proxy's idle timeout).
	IdleTimeout time.Duration
	// HandshakeTimeout bounds each TLS handshake, with the sandbox and with the upstream
	// (default 10 s).
	HandshakeTimeout time.Duration
	// UpstreamSessions, if set, lets upstream TLS sessions be resumed across client
	// connections. Share one per sandbox, never between sandboxes; make a new one when
	// RootCAs changes (a resumed session is not verified again). Unused with Upstreams.
	UpstreamSessions tls.ClientSessionCache
	// Upstreams, if set, is the sandbox's pool of upstream connections, reused across
	// its client connections (it verifies with its own roots, not RootCAs). Without it
	// each client connection has its own upstream connection.
	Upstreams *Upstreams
}

const (
	tlsHandshake     = 0x16 // the first byte of a TLS record carrying a ClientHello
	minPlaceholder   = 8
	redacted         = "[redacted]"
	valueToken       = "{{value}}"
	upstreamIdleTime = 90 * time.Second
)

// Validate reports whether inj can be used.
func (inj *Injection) Validate() error {
	switch {
	case inj.Value == nil:
		return fmt.Errorf("injection of %q: no value", inj.Secret)
	case inj.Placeholder == "" && inj.Header == "":
		return fmt.Errorf("injection of %q: neither a placeholder nor a header", inj.Secret)
	case inj.Placeholder != "" && len(inj.Placeholder) < minPlaceholder:
		return fmt.Errorf("injection of %q: the placeholder is shorter than %d bytes", inj.Secret, minPlaceholder)
	case inj.PathPrefix != "" && !strings.HasPrefix(inj.PathPrefix, "/"):
		return fmt.Errorf("injection of %q: the path prefix %q does not start with /", inj.Secret, inj.PathPrefix)
	case inj.PlaceholderHeader != "" && inj.Placeholder == "":
		return fmt.Errorf("injection of %q: a placeholder header without a placeholder", inj.Secret)
	case inj.PlaceholderHeader != "" && !SwappableHeader(inj.PlaceholderHeader):
		return fmt.Errorf("injection of %q: the placeholder cannot be swapped in %q", inj.Secret, inj.PlaceholderHeader)
	}
	if inj.Header != "" {
		if !IsToken(inj.Header) {
			return fmt.Errorf("injection of %q: %q is not a header name", inj.Secret, inj.Header)
		}
		if forbiddenHeader(inj.Header) {
			return fmt.Errorf("injection of %q: the header %s cannot be set", inj.Secret, http.CanonicalHeaderKey(inj.Header))
		}
		if inj.Template != "" && !strings.Contains(inj.Template, valueToken) {
			return fmt.Errorf("injection of %q: the template has no %s", inj.Secret, valueToken)
		}
	}
	return nil
}

// Serve terminates TLS on client, the sandbox's connection to host:port, whose first
// bytes head (the TLS ClientHello) the proxy has already read; it presents the CA's leaf
// for host. It then serves HTTP/1.1 requests on it, keeping the connection alive, and sends
// each (with cfg's injections applied) over TLS to the upstream: dial connects to the
// policy-checked upstream address, and Serve verifies the upstream's certificate for host
// against cfg.RootCAs. Responses come back streamed, with real values scrubbed.
//
// The proxy calls Serve only for a connection it has allowed, whose SNI (or Host) named
// host, and only for hosts with a binding or an HTTP rule; a plain HTTP connection only
// with cfg.PlainHTTP. Bad cfg or host is an error before anything is read.
//
// Serve returns when the client goes away (nil), or when ctx ends (its cause): the proxy's
// policy change, total timeout or Close. It closes client. up and down count the bytes
// read from (head included) and written to client, TLS included.
func Serve(ctx context.Context, client net.Conn, head []byte, host string, port int, dial func(ctx context.Context) (net.Conn, error), cfg Config) (up, down int64, err error) {
	cc := &countConn{Conn: client, head: head}
	defer func() {
		client.Close()
		up, down = cc.up.Load(), cc.down.Load()
	}()
	plain := len(head) > 0 && head[0] != tlsHandshake
	if plain && !cfg.PlainHTTP {
		return 0, 0, fmt.Errorf("intercept: a plain connection to %s, which takes TLS only", host)
	}
	s, err := newSession(host, port, dial, cfg, plain)
	if err != nil {
		return 0, 0, err
	}
	var conn net.Conn = cc
	if !plain {
		tlsConf, err := cfg.CA.serverConfig(s.host)
		if err != nil {
			return 0, 0, err
		}
		tc := tls.Server(cc, tlsConf)
		hctx, cancel := context.WithTimeout(ctx, s.handshakeTimeout)
		err = tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			return 0, 0, fmt.Errorf("TLS with the sandbox for %s: %w", s.host, err)
		}
		conn = tc
	}
	if s.own != nil {
		defer s.own.CloseIdleConnections()
	}

	l := newOneConnListener(conn)
	var closed sync.Once
	done := make(chan struct{})
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.idleTimeout,
		IdleTimeout:       s.idleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				closed.Do(func() { close(done); l.Close() })
			}
		},
	}
	stop := context.AfterFunc(ctx, func() {
		client.Close() // first: a close_notify to a gone client would wait
		srv.Close()
	})
	defer stop()
	srv.Serve(l) // returns once l is closed
	if l.handedOut() {
		<-done // the request in flight, if any, has been answered or abandoned
	}
	srv.Close()
	if ctx.Err() != nil {
		return 0, 0, context.Cause(ctx)
	}
	return 0, 0, nil
}

// session serves one client connection.
type session struct {
	host             string // normalized
	port             int
	scheme           string // of the upstream: "https", or "http" for a plain session
	authority        string // host:port, for the upstream URL
	inj              []Injection
	audit            func(Use)
	check            func(method, path string) (bool, string)
	git              *GitGate
	approve          ApproveFunc
	log              *slog.Logger
	idleTimeout      time.Duration
	handshakeTimeout time.Duration
	// own is the session's transport, or nil when it takes them from upstreams (per
	// request, so that a Reset applies to the next one).
	own       *http.Transport
	upstreams *Upstreams
	key       upstreamKey
	dial      dialFunc
	proxy     *httputil.ReverseProxy
}

func newSession(host string, port int, dial func(context.Context) (net.Conn, error), cfg Config, plain bool) (*session, error) {
	if cfg.CA == nil {
		return nil, errors.New("intercept: no CA")
	}
	if cfg.Git != nil && cfg.Git.Policy == nil {
		return nil, errors.New("intercept: a git gate without a policy")
	}
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("intercept: bad port %d", port)
	}
	if dial == nil {
		return nil, errors.New("intercept: no dial")
	}
	for i := range cfg.Injections {
		if err := cfg.Injections[i].Validate(); err != nil {
			return nil, err
		}
	}
	inj := slices.Clone(cfg.Injections)
	scheme := "https"
	if plain {
		// In clear, only the injections that allow it; the others are still scrubbed.
		for i := range inj {
			inj[i].ScrubOnly = inj[i].ScrubOnly || !inj[i].PlainHTTP
		}
		scheme = "http"
	}
	s := &session{
		host:             normalizeHost(host),
		port:             port,
		scheme:           scheme,
		inj:              inj,
		audit:            cfg.Audit,
		check:            cfg.Check,
		git:              cfg.Git,
		approve:          cfg.Approve,
		log:              cfg.Log,
		idleTimeout:      cfg.IdleTimeout,
		handshakeTimeout: cfg.HandshakeTimeout,
	}
	s.authority = net.JoinHostPort(s.host, strconv.Itoa(port))
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.idleTimeout <= 0 {
		s.idleTimeout = 15 * time.Minute
	}
	if s.handshakeTimeout <= 0 {
		s.handshakeTimeout = 10 * time.Second
	}
	key := upstreamKey{host: s.host, port: port, plain: plain}
	if cfg.Upstreams != nil {
		s.upstreams = cfg.Upstreams
	} else {
		// One client connection sends one request at a time: one upstream connection,
		// waited for rather than raced by a new dial while the last response finishes.
		s.own = newTransport(key, cfg.RootCAs, cfg.UpstreamSessions, s.handshakeTimeout, 1, 1)
	}
	s.key, s.dial = key, dial
	s.proxy = &httputil.ReverseProxy{
		Rewrite:        s.rewrite,
		Transport:      s,
		ModifyResponse: s.modifyResponse,
		ErrorHandler:   s.upstreamError,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// RoundTrip sends an outbound request over the session's transport, which dials, when it
// must, through the session's dial.
func (s *session) RoundTrip(r *http.Request) (*http.Response, error) {
	t := s.own
	if t == nil {
		t = s.upstreams.transport(s.key, s.handshakeTimeout)
	}
	return t.RoundTrip(r.WithContext(withDial(r.Context(), s.dial)))
}

// exchange is the state of one request, shared by the handler, Rewrite and ModifyResponse
// through the request's context.
type exchange struct {
	values   []string // each injection's value, revealed once for this request
	matched  []string // names of injections whose limits matched
	injected []string // names of injections written into the request
	scrub    *replacer
	// basic holds old, new pairs: the Basic credentials written → as the client sent them.
	basic []string
	sent  atomic.Bool
	// advert: the request asks for a push advertisement, whose answer is filtered.
	advert bool
	// after, if set, runs once the exchange is over (the answer written): work that must
	// not share the host's CPU with the request it concerns (an allowed push's reports).
	after func()
}

type exchangeKey struct{}

func (s *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{values: make([]string, len(s.inj)), scrub: newReplacer()}
	rw := &responseWriter{ResponseWriter: w, ex: ex}
	defer func() {
		if ex.after != nil {
			ex.after()
		}
		u := Use{Scheme: s.scheme, Host: s.host, Method: r.Method, Path: r.URL.Path, Status: rw.status}
		if len(ex.injected) > 0 && ex.sent.Load() {
			u.Secret, u.Injected = strings.Join(ex.injected, ","), true
		} else if len(ex.injected) > 0 {
			u.Secret = strings.Join(ex.injected, ",")
		} else {
			u.Secret = strings.Join(ex.matched, ",")
		}
		s.log.Debug("intercept: request", "host", u.Host, "method", u.Method, "path", u.Path,
			"secret", u.Secret, "injected", u.Injected, "status", u.Status)
		if s.audit != nil {
			s.audit(u)
		}
	}()
	if why := s.misdirected(r); why != "" {
		s.log.Info("intercept: misdirected request", "host", s.host, "why", why)
		http.Error(rw, "moat: this connection is for "+s.host+"; "+why, http.StatusMisdirectedRequest)
		return
	}
	if r.Method == http.MethodConnect || r.Header.Get("Upgrade") != "" {
		http.Error(rw, "moat: protocol upgrades and CONNECT are not supported to a host whose requests moat inspects", http.StatusNotImplemented)
		return
	}
	if s.check != nil {
		if ok, why := s.check(r.Method, r.URL.EscapedPath()); !ok {
			http.Error(rw, "moat: blocked by the egress policy: "+why, http.StatusForbidden)
			return
		}
	}
	if s.git != nil && !s.gate(rw, r, ex) {
		return
	}
	if !s.approved(rw, r) {
		return
	}
	for i := range s.inj {
		inj := &s.inj[i]
		f, ok := inj.Value.(Fetcher)
		if !ok {
			ex.values[i] = inj.Value.Reveal()
			continue
		}
		v, err := f.Fetch(r.Context())
		if err != nil {
			s.log.Warn("intercept: the credential is unavailable", "host", s.host, "secret", inj.Secret, "err", err)
			http.Error(rw, "moat: the credential "+inj.Secret+" is unavailable; the daemon log says why", http.StatusBadGateway)
			return
		}
		ex.values[i] = v
	}
	ex.scrub = s.scrubber(ex)
	ctx := context.WithValue(r.Context(), exchangeKey{}, ex)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { ex.sent.Store(true) },
	})
	s.proxy.ServeHTTP(rw, r.WithContext(ctx))
}

// misdirected says why r must not be sent to s.host, or "".
func (s *session) misdirected(r *http.Request) string {
	if r.TLS != nil && r.TLS.ServerName != "" && normalizeHost(r.TLS.ServerName) != s.host {
		return "the TLS server name is " + r.TLS.ServerName
	}
	// r.Host is the absolute URL's host if there is one, else the Host header.
	name, port := r.Host, ""
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		name, port = h, p
	} else {
		name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	}
	if name == "" {
		return "the request names no host"
	}
	if normalizeHost(name) != s.host || port != "" && port != strconv.Itoa(s.port) {
		return "the request is for " + r.Host
	}
	return ""
}

// scrubber replaces, in responses, each value and its encodings (scrubPairs) by its
// placeholder's (or "[redacted]"), and each Basic credential written by the one the client
// sent. Longer strings go first, so a value containing another is replaced whole, and a
// whole encoding before the part of it that a longer run would share.
func (s *session) scrubber(ex *exchange) *replacer {
	var pairs [][2]string
	for i := range s.inj {
		kv := scrubPairs(ex.values[i], s.inj[i].Placeholder)
		for j := 0; j < len(kv); j += 2 {
			pairs = append(pairs, [2]string{kv[j], kv[j+1]})
		}
	}
	for i := 0; i < len(ex.basic); i += 2 {
		pairs = append(pairs, [2]string{ex.basic[i], ex.basic[i+1]})
	}
	sort.SliceStable(pairs, func(i, j int) bool { return len(pairs[i][0]) > len(pairs[j][0]) })
	flat := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		flat = append(flat, p[0], p[1])
	}
	return newReplacer(flat...)
}

// rewrite makes the outbound request: to the bound host only, with the injections.
// ReverseProxy has already removed hop-by-hop and X-Forwarded headers.
func (s *session) rewrite(pr *httputil.ProxyRequest) {
	ex := pr.In.Context().Value(exchangeKey{}).(*exchange)
	out := pr.Out
	out.URL.Scheme = s.scheme
	out.URL.Host = s.authority
	out.URL.User = nil
	out.URL.RawQuery = pr.In.URL.RawQuery // as the client sent it, unparsed
	out.Host = pr.In.Host                 // checked by misdirected; as the client signed it
	out.Header.Set("Accept-Encoding", "identity")
	if out.Body != nil && out.ContentLength > 0 {
		out.Body = &sizedBody{ReadCloser: out.Body, n: out.ContentLength}
	}
	for i := range s.inj {
		inj := &s.inj[i]
		if inj.ScrubOnly || !inj.applies(pr.In.Method, pr.In.URL) {
			continue
		}
		ex.matched = append(ex.matched, inj.Secret)
		v, wrote := ex.values[i], false
		if inj.Placeholder != "" {
			name := inj.PlaceholderHeader
			if name == "" {
				name = defaultPlaceholderHeader
			}
			wrote = swapInHeader(out.Header, name, inj.Placeholder, v, &ex.basic)
		}
		if inj.Header != "" {
			t := inj.Template
			if t == "" {
				t = valueToken
			}
			out.Header.Set(inj.Header, strings.ReplaceAll(t, valueToken, v))
			wrote = true
		}
		if wrote {
			ex.injected = append(ex.injected, inj.Secret)
		}
	}
	if len(ex.basic) > 0 {
		ex.scrub = s.scrubber(ex)
	}
}

// applies says whether inj's limits let it into a request.
func (inj *Injection) applies(method string, u *url.URL) bool {
	if len(inj.Methods) > 0 && !slices.Contains(inj.Methods, method) {
		return false
	}
	if inj.PathPrefix == "" {
		return true
	}
	// The path as sent, which is what the upstream resolves.
	p := u.EscapedPath()
	return policy.CleanHTTPPath(p) && strings.HasPrefix(p, inj.PathPrefix)
}

// swapInHeader swaps the placeholder ph for v in the values of header name (any case)
// that are a credential form (swapCredential); for Basic credentials it appends to basic
// the credentials written and those the client sent. It says whether it swapped anything.
func swapInHeader(h http.Header, name, ph, v string, basic *[]string) bool {
	wrote := false
	for k, vs := range h {
		if !strings.EqualFold(k, name) {
			continue
		}
		for i, hv := range vs {
			out, sent, written, ok := swapCredential(hv, ph, v)
			if !ok {
				continue
			}
			vs[i], wrote = out, true
			if written != "" {
				*basic = append(*basic, written, sent)
			}
		}
	}
	return wrote
}

var errEncoding = errors.New("a response body in an encoding that cannot be scrubbed")

// modifyResponse wraps the body in the scrubber. Header values are scrubbed as they are
// written (responseWriter), trailers when the body ends.
func (s *session) modifyResponse(res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols {
		return errors.New("the upstream switched protocols unasked")
	}
	ex := res.Request.Context().Value(exchangeKey{}).(*exchange)
	if res.Body == nil || res.Body == http.NoBody {
		return nil
	}
	body, decoded := io.Reader(res.Body), false
	ce := strings.ToLower(strings.TrimSpace(strings.Join(res.Header.Values("Content-Encoding"), ",")))
	switch ce {
	case "", "identity":
	case "gzip", "x-gzip":
		body, decoded = &lazyDecoder{src: res.Body, open: func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }}, true
	case "deflate":
		body, decoded = &lazyDecoder{src: res.Body, open: func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) }}, true
	default:
		return fmt.Errorf("%w: %q", errEncoding, ce)
	}
	if ex.advert && res.StatusCode == http.StatusOK {
		adv, err := filterAdvertisement(res, body)
		if err != nil {
			return err
		}
		res.Body, body = adv, adv
	}
	if ex.scrub.empty() && !decoded {
		return nil
	}
	sr := newScrubReader(body, ex.scrub)
	sr.atEOF = func() { ex.scrub.Header(res.Trailer) }
	res.Body = readCloser{sr, res.Body}
	if decoded {
		res.Header.Del("Content-Encoding")
	}
	if decoded || !ex.scrub.sameLen {
		res.Header.Del("Content-Length")
		res.ContentLength = -1
	}
	return nil
}

// upstreamError answers a request the upstream did not: unreachable, untrusted, broken.
// The detail goes to the daemon log; the sandbox learns which host failed.
func (s *session) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		s.log.Debug("intercept: client went away", "host", s.host, "err", err)
	} else {
		s.log.Warn("intercept: upstream request failed", "host", s.host, "method", r.Method, "path", r.URL.Path, "err", err)
	}
	msg := "moat: could not get a response from " + s.host + " over verified TLS"
	if errors.Is(err, errEncoding) {
		msg = "moat: " + s.host + " answered in a content encoding moat cannot scrub"
	}
	http.Error(w, msg, http.StatusBadGateway)
}

// responseWriter scrubs header values as they are sent (1xx included) and remembers the
// final status.
type responseWriter struct {
	http.ResponseWriter
	ex     *exchange
	status int
}

func (w *responseWriter) WriteHeader(code int) {
	w.ex.scrub.Header(w.ResponseWriter.Header())
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sizedBody ends a request body of known length by itself. The Transport reads once more
// after the last byte to see the end; when the upstream answers before that read, the
// handler may have returned and closed the inbound body, the read fails, and the upstream
// connection is not reused.
type sizedBody struct {
	io.ReadCloser
	n int64
}

func (b *sizedBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.ReadCloser.Read(p)
	b.n -= int64(n)
	if b.n <= 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

// lazyDecoder opens a decompressor on the first Read, not in ModifyResponse: a gzip
// reader reads its header at once, and that would wait for the upstream's first bytes.
type lazyDecoder struct {
	src  io.Reader
	open func(io.Reader) (io.Reader, error)
	r    io.Reader
}

func (d *lazyDecoder) Read(p []byte) (int, error) {
	if d.r == nil {
		r, err := d.open(d.src)
		if err != nil {
			return 0, fmt.Errorf("decoding the response body: %w", err)
		}
		d.r = r
	}
	return d.r.Read(p)
}

// countConn counts the bytes read from and written to a connection, replaying head first.
type countConn struct {
	net.Conn
	head     []byte
	up, down atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	var n int
	var err error
	if len(c.head) > 0 {
		n = copy(p, c.head)
		c.head = c.head[n:]
	} else {
		n, err = c.Conn.Read(p)
	}
	c.up.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.down.Add(int64(n))
	return n, err
}

// oneConnListener hands out one connection, then blocks until closed.
type oneConnListener struct {
	mu     sync.Mutex
	c      net.Conn
	handed bool
	closed chan struct{}
	once   sync.Once
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{c: c, closed: make(chan struct{})}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.handed {
		select {
		case <-l.closed:
		default:
			l.handed = true
			l.mu.Unlock()
			return l.c, nil
		}
	}
	l.mu.Unlock()
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) handedOut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.handed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// IsToken says whether s is an RFC 9110 token (a valid header name or auth scheme).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// SwappableHeader says whether name is a header a placeholder may be swapped in: a valid
// name, and not one that frames or routes the request (forbiddenHeader).
func SwappableHeader(name string) bool { return IsToken(name) && !forbiddenHeader(name) }

// forbiddenHeader names headers an injection must not set: they frame the message, route
// it, or are hop-by-hop.
func forbiddenHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
		"Proxy-Connection", "Te", "Trailer", "Upgrade", "Expect", "Accept-Encoding":
		return true
	}
	return strings.HasPrefix(http.CanonicalHeaderKey(name), "Proxy-")
}
