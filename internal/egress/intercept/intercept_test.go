package intercept

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Everything runs on loopback: a sandbox-side client trusting the sandbox CA connects to a
// listener whose handler reads the first bytes (as the proxy's sniffer does) and calls
// Serve, which dials an httptest TLS server for "api.test" whose certificate comes from a
// separate test CA.

const (
	host        = "api.test"
	value       = "sk-real-0123456789abcdef"
	placeholder = "moat-ph-7f3a9c2e1d"
)

type secretValue string

func (s secretValue) Reveal() string { return string(s) }
func (s secretValue) String() string { return "[secret]" }

// seen is one request as the upstream received it.
type seen struct {
	Method, Path string
	Header       http.Header
	Body         string
	RawPath      string // as sent (escaped), with the query
}

type upstream struct {
	srv    *httptest.Server
	roots  *x509.CertPool // trusts srv
	mu     sync.Mutex
	reqs   []seen
	conns  int
	states []string
}

// newUpstream serves h over TLS for api.test, recording every request first.
func newUpstream(t testing.TB, h http.HandlerFunc) *upstream {
	t.Helper()
	ca, err := NewCA("upstream", 0)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{roots: x509.NewCertPool()}
	u.roots.AddCert(ca.Certificate())
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, seen{r.Method, r.URL.Path, r.Header.Clone(), string(body), r.URL.RequestURI()})
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if h != nil {
			h(w, r)
		}
	}))
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	u.srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.states = append(u.states, fmt.Sprint(c.RemoteAddr(), " ", st))
		if st == http.StateNew {
			u.conns++
		}
	}
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) seen() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.reqs...)
}

func (u *upstream) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", u.srv.Listener.Addr().String())
}

type result struct {
	up, down int64
	err      error
}

// harness is the proxy's side: it accepts sandbox connections and hands each to Serve.
type harness struct {
	ca      *CA
	ln      net.Listener
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	uses    []Use
	accepts int
	results chan result
}

func newHarness(t testing.TB, u *upstream, cfg Config) *harness {
	t.Helper()
	ca, err := NewCA("sbx-test", 0)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{ca: ca, ln: ln, results: make(chan result, 64)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	cfg.CA = ca
	if cfg.RootCAs == nil {
		cfg.RootCAs = u.roots
	}
	cfg.Audit = func(use Use) {
		h.mu.Lock()
		h.uses = append(h.uses, use)
		h.mu.Unlock()
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.accepts++
			h.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The proxy's sniffer has read the ClientHello's first bytes.
				head := make([]byte, 512)
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, err := c.Read(head)
				c.SetReadDeadline(time.Time{})
				if err != nil {
					c.Close()
					return
				}
				up, down, err := Serve(h.ctx, c, head[:n], host, 443, u.dial, cfg)
				select {
				case h.results <- result{up, down, err}:
				default:
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		h.cancel()
		wg.Wait()
	})
	return h
}

func (h *harness) roots() *x509.CertPool {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(h.ca.CertPEM()) {
		panic("bad CA PEM")
	}
	return p
}

// client is the sandbox's HTTP client: it trusts the sandbox CA and reaches api.test only
// through the harness.
func (h *harness) client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", h.ln.Addr().String())
		},
		TLSClientConfig:       &tls.Config{RootCAs: h.roots(), ServerName: host},
		ExpectContinueTimeout: time.Second,
	}}
}

func (h *harness) usesSoFar() []Use {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Use(nil), h.uses...)
}

func do(t testing.TB, c *http.Client, method, url, auth string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return res, string(b)
}

func bearer() Injection {
	return Injection{Secret: "openai", Value: secretValue(value), Placeholder: placeholder}
}

// noValue fails if the real value appears anywhere in what the sandbox got.
func noValue(t *testing.T, res *http.Response, body string) {
	t.Helper()
	if strings.Contains(fmt.Sprint(res.Header, res.Trailer), value) || strings.Contains(body, value) {
		t.Fatalf("the value reached the sandbox: header %v trailer %v body %q", res.Header, res.Trailer, body)
	}
}

func TestPlaceholderReplacedUpstreamOnly(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "you sent %s", r.Header.Get("Authorization"))
	})
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	res, body := do(t, h.client(), "GET", "https://api.test/v1/models?x=1", "Bearer "+placeholder, nil)
	if res.StatusCode != 200 {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	got := u.seen()
	if len(got) != 1 || got[0].Header.Get("Authorization") != "Bearer "+value {
		t.Fatalf("upstream saw %+v", got)
	}
	if got[0].Header.Get("Accept-Encoding") != "identity" {
		t.Errorf("Accept-Encoding %q", got[0].Header.Get("Accept-Encoding"))
	}
	noValue(t, res, body)
	if res.Header.Get("X-Echo") != "Bearer "+placeholder || body != "you sent Bearer "+placeholder {
		t.Errorf("echo: header %q body %q", res.Header.Get("X-Echo"), body)
	}
}

func TestBasicCredentials(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
	})
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	req, _ := http.NewRequest("GET", "https://api.test/", nil)
	req.SetBasicAuth("user", placeholder)
	sent := req.Header.Get("Authorization")
	res, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header = u.seen()[0].Header
	if user, pass, ok := r.BasicAuth(); !ok || user != "user" || pass != value {
		t.Fatalf("upstream got Basic %q %q %v", user, pass, ok)
	}
	// The upstream echoes the credentials it got: the sandbox sees those it sent.
	if got := res.Header.Get("X-Echo"); got != sent {
		t.Errorf("echoed %q, want %q", got, sent)
	}
}

func TestHeaderInjection(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("X-Api-Key"))
		io.WriteString(w, r.Header.Get("X-Api-Key"))
	})
	inj := Injection{Secret: "anthropic", Value: secretValue(value), Header: "x-api-key", Template: "key {{value}}"}
	h := newHarness(t, u, Config{Injections: []Injection{inj}})
	res, body := do(t, h.client(), "POST", "https://api.test/v1/messages", "", strings.NewReader("{}"))
	if got := u.seen()[0].Header.Get("X-Api-Key"); got != "key "+value {
		t.Fatalf("upstream got X-Api-Key %q", got)
	}
	noValue(t, res, body)
	if body != "key "+redacted || res.Header.Get("X-Echo") != "key "+redacted {
		t.Errorf("got %q, %q", body, res.Header.Get("X-Echo"))
	}
}

func TestLimits(t *testing.T) {
	u := newUpstream(t, nil)
	inj := bearer()
	inj.PathPrefix, inj.Methods = "/v1/", []string{"POST"}
	h := newHarness(t, u, Config{Injections: []Injection{inj}})
	c := h.client()
	for _, tc := range []struct {
		method, path string
		inject       bool
	}{
		{"POST", "/v1/chat", true},
		{"GET", "/v1/chat", false},
		{"POST", "/v2/chat", false},
		{"POST", "/v1", false},
		{"POST", "/v1/../admin", false},
		{"POST", "/v1//x", false},
		{"POST", "/v1/%2e%2e/admin", false},
		{"POST", "/v1/a/", true},
	} {
		do(t, c, tc.method, "https://api.test"+tc.path, "Bearer "+placeholder, strings.NewReader("x"))
		got := u.seen()
		auth := got[len(got)-1].Header.Get("Authorization")
		want := "Bearer " + placeholder
		if tc.inject {
			want = "Bearer " + value
		}
		if auth != want {
			t.Errorf("%s %s: upstream got %q, want %q", tc.method, tc.path, auth, want)
		}
	}
	uses := h.usesSoFar()
	if len(uses) != 8 || !uses[0].Injected || uses[0].Secret != "openai" || uses[1].Injected || uses[1].Secret != "" {
		t.Errorf("audit: %+v", uses)
	}
}

// The value comes back in a header, a trailer and a body written in small flushes that
// split it; a gzip body too.
func TestResponseScrubbed(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Token", "token="+value)
		w.Header().Set("Trailer", "X-Trail")
		if r.URL.Path == "/gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			fmt.Fprintf(zw, "zipped %s zipped", value)
			zw.Close()
			return
		}
		body := "start " + value + " middle " + value + value + " end " + value[:5]
		for i := 0; i < len(body); i += 3 {
			io.WriteString(w, body[i:min(i+3, len(body))])
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Trail", value)
	})
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	c := h.client()
	res, body := do(t, c, "GET", "https://api.test/stream", "", nil)
	noValue(t, res, body)
	p := placeholder
	if want := "start " + p + " middle " + p + p + " end " + value[:5]; body != want {
		t.Errorf("body %q, want %q", body, want)
	}
	if res.Header.Get("X-Token") != "token="+p || res.Trailer.Get("X-Trail") != p {
		t.Errorf("header %q trailer %q", res.Header.Get("X-Token"), res.Trailer.Get("X-Trail"))
	}
	res, body = do(t, c, "GET", "https://api.test/gzip", "", nil)
	noValue(t, res, body)
	if body != "zipped "+p+" zipped" {
		t.Errorf("gzip body %q", body)
	}
}

func TestUnscrubbableEncodingRefused(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br")
		io.WriteString(w, value)
	})
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	res, body := do(t, h.client(), "GET", "https://api.test/", "", nil)
	noValue(t, res, body)
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d", res.StatusCode)
	}
}

func TestKeepAlive(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	c := h.client()
	for i := range 3 {
		res, body := do(t, c, "POST", fmt.Sprintf("https://api.test/%d", i), "Bearer "+placeholder, strings.NewReader("body"))
		if res.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, body)
		}
	}
	h.mu.Lock()
	accepts := h.accepts
	h.mu.Unlock()
	u.mu.Lock()
	conns := u.conns
	u.mu.Unlock()
	if accepts != 1 || conns != 1 {
		u.mu.Lock()
		t.Errorf("3 requests took %d sandbox connections and %d upstream connections: %q", accepts, conns, u.states)
		u.mu.Unlock()
	}
	c.CloseIdleConnections()
	select {
	case r := <-h.results:
		if r.err != nil || r.up == 0 || r.down == 0 {
			t.Errorf("Serve returned %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the client closed")
	}
	if n := len(h.usesSoFar()); n != 3 {
		t.Errorf("%d audit records", n)
	}
}

func TestChunkedAndExpectContinue(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "got "+fmt.Sprint(r.ContentLength))
	})
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	c := h.client()
	pr, pw := io.Pipe()
	go func() {
		for i := range 5 {
			fmt.Fprintf(pw, "part%d;", i)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", "https://api.test/chunked", pr) // length unknown: chunked
	req.Header.Set("Authorization", "Bearer "+placeholder)
	req.Header.Set("Expect", "100-continue")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	got := u.seen()[0]
	if got.Body != "part0;part1;part2;part3;part4;" || got.Header.Get("Authorization") != "Bearer "+value {
		t.Fatalf("upstream got %+v", got)
	}
}

func TestMisdirected(t *testing.T) {
	u := newUpstream(t, nil)
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	c := h.client()
	for _, hostHeader := range []string{"evil.test", "api.test:8443", "api.test.evil"} {
		req, _ := http.NewRequest("GET", "https://api.test/", nil)
		req.Host = hostHeader
		req.Header.Set("Authorization", "Bearer "+placeholder)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("Host %s: status %d", hostHeader, res.StatusCode)
		}
	}
	// Accepted spellings of the bound host.
	for _, hostHeader := range []string{"API.test", "api.test:443", "api.test."} {
		req, _ := http.NewRequest("GET", "https://api.test/", nil)
		req.Host = hostHeader
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("Host %s: status %d", hostHeader, res.StatusCode)
		}
	}

	// An absolute URL names the host, whatever the Host header says; and the TLS server
	// name must be the host too.
	for _, tc := range []struct{ sni, request string }{
		{host, "GET https://evil.test/ HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + placeholder + "\r\n\r\n"},
		{"evil.test", "GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + placeholder + "\r\n\r\n"},
	} {
		conn, err := tls.Dial("tcp", h.ln.Addr().String(), &tls.Config{ServerName: tc.sni, RootCAs: h.roots(), InsecureSkipVerify: tc.sni != host})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, tc.request)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		conn.Close()
		if res.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("SNI %s, %q: status %d", tc.sni, tc.request, res.StatusCode)
		}
	}
	if n := len(u.seen()); n != 3 {
		t.Errorf("upstream saw %d requests, want the 3 for the bound host", n)
	}
}

func TestUpgradeRefused(t *testing.T) {
	u := newUpstream(t, nil)
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	req, _ := http.NewRequest("GET", "https://api.test/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	res, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotImplemented || len(u.seen()) != 0 {
		t.Fatalf("status %d, upstream saw %d", res.StatusCode, len(u.seen()))
	}
}

func TestLeafPresented(t *testing.T) {
	u := newUpstream(t, nil)
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	conn, err := tls.Dial("tcp", h.ln.Addr().String(), &tls.Config{ServerName: host, RootCAs: h.roots()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := conn.ConnectionState()
	if st.NegotiatedProtocol != "" && st.NegotiatedProtocol != "http/1.1" {
		t.Errorf("ALPN %q", st.NegotiatedProtocol)
	}
	leaf := st.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: h.roots()}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: u.roots}); err == nil {
		t.Error("the leaf chains to another CA")
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != host || leaf.IsCA {
		t.Errorf("leaf SANs %v, IsCA %v", leaf.DNSNames, leaf.IsCA)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life > leafValidity+clockSkew {
		t.Errorf("leaf valid for %s", life)
	}
	if k, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
		t.Errorf("leaf key %T", leaf.PublicKey)
	}
	// h2 is never offered.
	c2, err := tls.Dial("tcp", h.ln.Addr().String(), &tls.Config{ServerName: host, RootCAs: h.roots(), NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if p := c2.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("ALPN with h2 offered: %q", p)
	}
}

func TestCA(t *testing.T) {
	ca, err := NewCA("sbx", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("CertPEM holds %v and %d more bytes", block, len(rest))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || cert.MaxPathLen != 0 || !cert.MaxPathLenZero {
		t.Errorf("IsCA %v MaxPathLen %d", cert.IsCA, cert.MaxPathLen)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life != 2*time.Hour+clockSkew {
		t.Errorf("CA valid for %s", life)
	}
	// The key is nowhere in what leaves the package.
	keyDER, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ca.key.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{ca.CertPEM(), block.Bytes} {
		if bytes.Contains(b, keyDER) || bytes.Contains(b, d) || bytes.Contains(b, []byte("PRIVATE")) {
			t.Fatal("the CA key is in CertPEM")
		}
	}
	// Leaves are cached, renewed near expiry, and never outlive the CA.
	l1, err := ca.Leaf("API.test.")
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := ca.Leaf(host)
	if l1 != l2 {
		t.Error("the leaf was not cached")
	}
	ca.now = func() time.Time { return l1.Leaf.NotAfter.Add(-leafRenew + time.Second) }
	l3, _ := ca.Leaf(host)
	if l3 == l1 {
		t.Error("a leaf about to expire was served from the cache")
	}
	ca.now = func() time.Time { return cert.NotAfter.Add(-10 * time.Minute) }
	l4, err := ca.Leaf(host)
	if err != nil || !l4.Leaf.NotAfter.Equal(cert.NotAfter) {
		t.Errorf("a leaf near the CA's end: %v, %v", l4.Leaf.NotAfter, err)
	}
	ca.now = func() time.Time { return cert.NotAfter.Add(time.Second) }
	if _, err := ca.Leaf("other.test"); err == nil {
		t.Error("an expired CA minted a leaf")
	}
	ca.now = time.Now
	ip, err := ca.Leaf("192.0.2.1")
	if err != nil || len(ip.Leaf.IPAddresses) != 1 || len(ip.Leaf.DNSNames) != 0 {
		t.Errorf("IP leaf %v, %v", ip, err)
	}
	for _, bad := range []string{"", "a..b", "*.test", "a b", "x/y"} {
		if _, err := ca.Leaf(bad); err == nil {
			t.Errorf("Leaf(%q) succeeded", bad)
		}
	}
}

// An upstream whose certificate RootCAs does not trust gets nothing: no request line, no
// header, no body. The sandbox gets a 502.
func TestUntrustedUpstream(t *testing.T) {
	u := newUpstream(t, nil)
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}, RootCAs: x509.NewCertPool()})
	res, body := do(t, h.client(), "POST", "https://api.test/upload", "Bearer "+placeholder, strings.NewReader("request body"))
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	if strings.Contains(body, "certificate") {
		t.Errorf("the sandbox is told internal detail: %q", body)
	}
	if got := u.seen(); len(got) != 0 {
		t.Fatalf("the untrusted upstream received %+v", got)
	}
	uses := h.usesSoFar()
	if len(uses) != 1 || uses[0].Injected || uses[0].Status != http.StatusBadGateway {
		t.Errorf("audit %+v", uses)
	}
}

// The audit log gets host, method, path, secret name and whether it was injected, and
// never the value.
func TestAuditNeverCarriesValue(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, value) })
	inj2 := Injection{Secret: "gh", Value: secretValue("ghp_other_value_123"), Header: "X-Gh"}
	h := newHarness(t, u, Config{Injections: []Injection{bearer(), inj2}})
	c := h.client()
	do(t, c, "GET", "https://api.test/a?q="+placeholder, "Bearer "+placeholder, nil)
	do(t, c, "DELETE", "https://api.test/b", "", nil)
	uses := h.usesSoFar()
	want := []Use{
		{Scheme: "https", Host: host, Method: "GET", Path: "/a", Secret: "openai,gh", Injected: true, Status: 200},
		{Scheme: "https", Host: host, Method: "DELETE", Path: "/b", Secret: "gh", Injected: true, Status: 200},
	}
	if fmt.Sprint(uses) != fmt.Sprint(want) {
		t.Errorf("audit\n got %+v\nwant %+v", uses, want)
	}
	for _, use := range uses {
		for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
			if s := fmt.Sprintf(f, use); strings.Contains(s, value) || strings.Contains(s, "ghp_other") || strings.Contains(s, placeholder) {
				t.Fatalf("%s of a Use holds a value or the query: %s", f, s)
			}
		}
	}
}

func TestServeEndsWithContext(t *testing.T) {
	u := newUpstream(t, nil)
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	c := h.client()
	do(t, c, "GET", "https://api.test/", "", nil) // the connection stays open, idle
	h.cancel()
	select {
	case r := <-h.results:
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("Serve returned %v", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return when its context ended")
	}
}

func TestBadConfig(t *testing.T) {
	ca, _ := NewCA("x", 0)
	for _, inj := range []Injection{
		{Secret: "a", Placeholder: placeholder},
		{Secret: "a", Value: secretValue("v")},
		{Secret: "a", Value: secretValue("v"), Placeholder: "short"},
		{Secret: "a", Value: secretValue("v"), Header: "Bad Header"},
		{Secret: "a", Value: secretValue("v"), Header: "Host"},
		{Secret: "a", Value: secretValue("v"), Header: "Proxy-Authorization"},
		{Secret: "a", Value: secretValue("v"), Header: "X-Key", Template: "no token"},
		{Secret: "a", Value: secretValue("v"), Placeholder: placeholder, PathPrefix: "v1/"},
	} {
		a, b := net.Pipe()
		_, _, err := Serve(context.Background(), a, nil, host, 443, nil, Config{CA: ca, Injections: []Injection{inj}})
		b.Close()
		if err == nil {
			t.Errorf("Serve accepted %+v", inj)
		}
	}
}

// TestServeOverPipe: Serve needs nothing of a socket (net.Pipe has no TCP half-close).
func TestServeOverPipe(t *testing.T) {
	u := newUpstream(t, nil)
	ca, _ := NewCA("pipe", 0)
	sandbox, proxy := net.Pipe()
	done := make(chan error, 1)
	go func() {
		_, _, err := Serve(context.Background(), proxy, nil, host, 443, u.dial, Config{CA: ca, RootCAs: u.roots, Injections: []Injection{bearer()}})
		done <- err
	}()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	tc := tls.Client(sandbox, &tls.Config{ServerName: host, RootCAs: roots})
	io.WriteString(tc, "GET /p HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "+placeholder+"\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	tc.Close()
	if err := <-done; err != nil || res.StatusCode != 200 || u.seen()[0].Header.Get("Authorization") != "Bearer "+value {
		t.Fatalf("status %d, Serve: %v", res.StatusCode, err)
	}
}

func TestCheckRefusesBeforeUpstream(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream "+r.URL.Path) })
	var mu sync.Mutex
	var asked []string
	h := newHarness(t, u, Config{Check: func(method, path string) (bool, string) {
		mu.Lock()
		asked = append(asked, method+" "+path)
		mu.Unlock()
		if method == "GET" && path == "/ok/x" {
			return true, ""
		}
		return false, "no rule allows " + method + " " + path
	}})
	c := h.client()
	res, body := do(t, c, "GET", "https://api.test/ok/x?q=1", "", nil)
	if res.StatusCode != 200 || body != "upstream /ok/x" {
		t.Fatalf("allowed request: %d %q", res.StatusCode, body)
	}
	for _, tc := range []struct{ method, url, path string }{
		{"POST", "https://api.test/ok/x", "/ok/x"},
		{"GET", "https://api.test/other", "/other"},
		{"GET", "https://api.test/ok/%2e%2e/secret", "/ok/%2e%2e/secret"},
	} {
		res, body := do(t, c, tc.method, tc.url, "", strings.NewReader("payload"))
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "blocked by the egress policy: no rule allows "+tc.method+" "+tc.path) {
			t.Errorf("%s %s: %d %q, want 403 naming the request", tc.method, tc.url, res.StatusCode, body)
		}
	}
	// Only the allowed request reached the upstream, and every request was asked about
	// with its escaped path (the same connection stays usable after a refusal).
	if got := u.seen(); len(got) != 1 || got[0].Path != "/ok/x" {
		t.Errorf("upstream saw %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"GET /ok/x", "POST /ok/x", "GET /other", "GET /ok/%2e%2e/secret"}; strings.Join(asked, "|") != strings.Join(want, "|") {
		t.Errorf("Check asked %q, want %q", asked, want)
	}
}

// rotating is a Fetcher handing out a new token on each fetch, or failing.
type rotating struct {
	mu   sync.Mutex
	n    int
	fail bool
}

func (r *rotating) Fetch(context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return "", errors.New("mint refused")
	}
	r.n++
	return fmt.Sprintf("ghs_token%04d_0123456789", r.n), nil
}

func (r *rotating) Reveal() string { v, _ := r.Fetch(context.Background()); return v }

func TestFetcherPerRequest(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Header.Get("Authorization")) })
	src := &rotating{}
	inj := Injection{Secret: "GH", Value: src, Placeholder: placeholder}
	h := newHarness(t, u, Config{Injections: []Injection{inj}})
	c := h.client()
	for i := 1; i <= 2; i++ {
		res, body := do(t, c, "GET", "https://api.test/", "Bearer "+placeholder, nil)
		want := fmt.Sprintf("Bearer ghs_token%04d_0123456789", i)
		if got := u.seen()[i-1].Header.Get("Authorization"); got != want {
			t.Errorf("request %d: upstream got %q, want %q", i, got, want)
		}
		if res.StatusCode != 200 || body != "Bearer "+placeholder {
			t.Errorf("request %d: sandbox got %d %q, want the placeholder back", i, res.StatusCode, body)
		}
	}
	src.mu.Lock()
	src.fail = true
	src.mu.Unlock()
	res, body := do(t, c, "GET", "https://api.test/after-failure", "Bearer "+placeholder, nil)
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, "credential GH is unavailable") || strings.Contains(body, "mint refused") {
		t.Errorf("failed fetch: %d %q", res.StatusCode, body)
	}
	if n := len(u.seen()); n != 2 {
		t.Errorf("the upstream saw %d requests, want 2 (none after the failed fetch)", n)
	}
}

// TestSandboxSuppliedHeaders (security case D06): a header binding replaces every
// same-name header the sandbox sent, whatever their case; proxy headers are not forwarded.
func TestSandboxSuppliedHeaders(t *testing.T) {
	u := newUpstream(t, nil)
	inj := Injection{Secret: "key", Value: secretValue(value), Header: "X-Api-Key"}
	h := newHarness(t, u, Config{Injections: []Injection{inj}})
	req, _ := http.NewRequest("GET", "https://api.test/", nil)
	req.Header["X-Api-Key"] = []string{"attacker-1"}
	req.Header["x-api-key"] = []string{"attacker-2"}
	req.Header.Set("Proxy-Authorization", "Basic attacker")
	res, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	got := u.seen()[0].Header
	if v := got.Values("X-Api-Key"); len(v) != 1 || v[0] != value {
		t.Errorf("upstream X-Api-Key = %q, want exactly the injected value", v)
	}
	if v := got.Get("Proxy-Authorization"); v != "" {
		t.Errorf("Proxy-Authorization forwarded: %q", v)
	}
}

// TestRedirectNotFollowed (security case D07): a redirect from the bound host goes back to
// the sandbox as it is; moat never follows it with the credential.
func TestRedirectNotFollowed(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.test/collect", http.StatusFound)
	})
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	c := h.client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, _ := do(t, c, "GET", "https://api.test/start", "Bearer "+placeholder, nil)
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "https://elsewhere.test/collect" {
		t.Errorf("got %d Location %q", res.StatusCode, res.Header.Get("Location"))
	}
	if n := len(u.seen()); n != 1 {
		t.Errorf("the upstream saw %d requests, want 1", n)
	}
}

// TestPlainHTTP: a plain connection is served only with Config.PlainHTTP, and then carries
// only the injections marked PlainHTTP; responses are scrubbed as over TLS.
func TestPlainHTTP(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		fmt.Fprintf(w, "you sent %s / %s", r.Header.Get("Authorization"), r.Header.Get("X-Key"))
	}))
	t.Cleanup(srv.Close)
	u := &upstream{srv: srv, roots: x509.NewCertPool()}
	plainInj := bearer()
	plainInj.PlainHTTP = true
	tlsOnly := Injection{Secret: "key", Value: secretValue("other-secret-value"), Header: "X-Key"}

	h := newHarness(t, u, Config{PlainHTTP: true, Injections: []Injection{plainInj, tlsOnly}})
	res, body := do(t, h.client(), "GET", "http://api.test/x", "Bearer "+placeholder, nil)
	mu.Lock()
	if len(got) != 1 || got[0].Get("Authorization") != "Bearer "+value || got[0].Get("X-Key") != "" {
		t.Errorf("upstream got %v: want the plain injection only", got)
	}
	mu.Unlock()
	noValue(t, res, body)
	if body != "you sent Bearer "+placeholder+" / " {
		t.Errorf("body %q", body)
	}
	if uses := h.usesSoFar(); len(uses) != 1 || uses[0].Scheme != "http" || !uses[0].Injected {
		t.Errorf("uses %+v", uses)
	}

	// Without PlainHTTP the connection ends before anything is sent.
	h2 := newHarness(t, u, Config{Injections: []Injection{plainInj}})
	req, _ := http.NewRequest("GET", "http://api.test/refused", nil)
	if res, err := h2.client().Do(req); err == nil {
		res.Body.Close()
		t.Errorf("a plain request went through: %d", res.StatusCode)
	}
	if r := <-h2.results; r.err == nil || !strings.Contains(r.err.Error(), "takes TLS only") {
		t.Errorf("Serve error %v", r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Errorf("the upstream saw %d requests, want 1", len(got))
	}
}

// TestUpstreamSessionsResumed: with Config.UpstreamSessions, a second client connection's
// upstream TLS session is resumed.
func TestUpstreamSessionsResumed(t *testing.T) {
	var mu sync.Mutex
	var resumed []bool
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		resumed = append(resumed, r.TLS.DidResume)
		mu.Unlock()
	})
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}, UpstreamSessions: tls.NewLRUClientSessionCache(8)})
	for range 2 {
		c := h.client()
		c.Transport.(*http.Transport).DisableKeepAlives = true
		do(t, c, "GET", "https://api.test/", "", nil)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(resumed) != 2 || resumed[0] || !resumed[1] {
		t.Errorf("upstream sessions resumed: %v, want [false true]", resumed)
	}
}

// TestPlaceholderOnlyInItsHeader: the placeholder is swapped in the binding's header
// only (Authorization by default); in any other header, the query string, the path and
// the body it reaches the upstream unchanged, so an upstream that keeps request data
// never keeps the value where the sandbox put it.
func TestPlaceholderOnlyInItsHeader(t *testing.T) {
	u := newUpstream(t, nil)
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}})
	ph := placeholder
	req, _ := http.NewRequest("POST", "https://api.test/v1/"+ph+"/x?q="+ph+"&key=Bearer+"+ph, strings.NewReader(`{"token":"`+ph+`"}`))
	req.Header.Set("Authorization", "Bearer "+ph)
	req.Header.Set("X-Other", ph)
	req.Header.Set("X-Api-Key", "Bearer "+ph)
	req.Header.Set("Cookie", "session="+ph)
	req.Header.Set("X-Basic", "Basic "+basicOf("x-access-token", ph))
	req.Header.Add("Authorization-Extra", ph)
	req.Header["x-lower"] = []string{ph}
	res, err := h.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	got := u.seen()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests", len(got))
	}
	r := got[0]
	if a := r.Header.Get("Authorization"); a != "Bearer "+value {
		t.Errorf("Authorization %q, want the value", a)
	}
	r.Header.Del("Authorization")
	everything := fmt.Sprint(r.Header, r.RawPath, r.Body)
	if strings.Contains(everything, value) {
		t.Errorf("the value reached the upstream outside Authorization: %s", everything)
	}
	for name, want := range map[string]string{"X-Other": ph, "X-Api-Key": "Bearer " + ph, "Cookie": "session=" + ph, "Authorization-Extra": ph, "X-Lower": ph,
		"X-Basic": "Basic " + basicOf("x-access-token", ph)} {
		if v := r.Header.Get(name); v != want {
			t.Errorf("%s: upstream got %q, want %q", name, v, want)
		}
	}
	if want := "/v1/" + ph + "/x?q=" + ph + "&key=Bearer+" + ph; r.RawPath != want || r.Body != `{"token":"`+ph+`"}` {
		t.Errorf("upstream got %q with body %q", r.RawPath, r.Body)
	}

	// A binding that names its header is swapped there, and not in Authorization.
	inj := Injection{Secret: "anthropic", Value: secretValue(value), Placeholder: ph, PlaceholderHeader: "x-api-key"}
	h2 := newHarness(t, u, Config{Injections: []Injection{inj}})
	req, _ = http.NewRequest("GET", "https://api.test/v1/messages", nil)
	req.Header.Set("X-Api-Key", ph)
	req.Header.Set("Authorization", "Bearer "+ph)
	res, err = h2.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	r = u.seen()[1]
	if r.Header.Get("X-Api-Key") != value || r.Header.Get("Authorization") != "Bearer "+ph {
		t.Errorf("X-Api-Key %q, Authorization %q: want the value in X-Api-Key only", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
	}
	if uses := h2.usesSoFar(); len(uses) != 1 || !uses[0].Injected {
		t.Errorf("uses %+v", uses)
	}
}

// echoForms is an upstream handler that serves back, in every encoding the scrubber
// knows, the credential it was sent in Authorization ("Bearer VALUE") on an earlier
// request (POST /store), or the one given as known: in headers, in a header's name, and in
// the body, gzipped on /gzip.
func echoForms(known string) (http.HandlerFunc, func() string) {
	var mu sync.Mutex
	stored := known
	get := func() string {
		mu.Lock()
		defer mu.Unlock()
		return stored
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			mu.Lock()
			stored = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			mu.Unlock()
			return
		}
		v := get()
		var b strings.Builder
		for name, e := range encodings(v) {
			fmt.Fprintf(&b, "%s=%s\n", name, e)
			w.Header().Set("X-"+name, e)
		}
		fmt.Fprintf(&b, "json=%q\n", v)
		for _, pre := range []string{"x-access-token:", "a:", "ab:"} {
			for _, e := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
				run := e.EncodeToString([]byte(pre + v + "\n"))
				fmt.Fprintf(&b, "b64(%s)=%s\n", pre, run)
				w.Header().Add("X-Run", run)
			}
		}
		w.Header().Set("X-"+v, "name")
		w.Header().Set("Trailer", "X-Trail")
		if r.URL.Path == "/gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, b.String())
			zw.Close()
		} else {
			io.WriteString(w, b.String())
		}
		w.Header().Set("X-Trail", base64.StdEncoding.EncodeToString([]byte("u:"+v)))
	}, get
}

// TestEchoedEncodingsScrubbed: an upstream that stored the credential from Authorization
// and serves it back raw, URL-escaped, hex, base64 (three alignments inside a longer run,
// both alphabets), in headers, a header name, a trailer and the body, plain or gzipped,
// gives the sandbox nothing from which the value can be decoded.
func TestEchoedEncodingsScrubbed(t *testing.T) {
	const odd = "sk/real+0123456789=abcdef&<x> ~y"
	handler, stored := echoForms("")
	u := newUpstream(t, handler)
	inj := Injection{Secret: "key", Value: secretValue(odd), Placeholder: placeholder}
	h := newHarness(t, u, Config{Injections: []Injection{inj}})
	c := h.client()
	do(t, c, "POST", "https://api.test/store", "Bearer "+placeholder, nil)
	if stored() != odd {
		t.Fatalf("the upstream stored %q, want the value", stored())
	}
	for _, path := range []string{"/echo", "/gzip"} {
		res, body := do(t, c, "GET", "https://api.test"+path, "", nil)
		all := fmt.Sprint(res.Header, res.Trailer, body)
		if res.StatusCode != 200 || reveals(all, odd) {
			t.Errorf("%s: %d, the value can be read from\n%s", path, res.StatusCode, all)
		}
		for _, want := range []string{"raw=" + placeholder + "\n", "hex=" + hex.EncodeToString([]byte(placeholder)) + "\n", "b64=" + base64.StdEncoding.EncodeToString([]byte(placeholder)) + "\n", "query=" + placeholder + "\n"} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: the body lacks %q:\n%s", path, want, body)
			}
		}
		if res.Header.Get("X-Raw") != placeholder || len(res.Header.Values("X-Run")) != 6 {
			t.Errorf("%s: headers %v", path, res.Header)
		}
	}
}

// TestScrubOnly: an injection marked ScrubOnly (another port of a bound host) writes
// nothing into requests, and its value is scrubbed from responses in every form.
func TestScrubOnly(t *testing.T) {
	handler, _ := echoForms(value)
	u := newUpstream(t, handler)
	inj := bearer()
	inj.ScrubOnly = true
	h := newHarness(t, u, Config{Injections: []Injection{inj}})
	res, body := do(t, h.client(), "GET", "https://api.test/echo", "Bearer "+placeholder, nil)
	if a := u.seen()[0].Header.Get("Authorization"); a != "Bearer "+placeholder {
		t.Errorf("upstream got Authorization %q, want the placeholder", a)
	}
	if all := fmt.Sprint(res.Header, res.Trailer, body); reveals(all, value) || !strings.Contains(body, "raw="+placeholder) {
		t.Errorf("the value can be read from\n%s", all)
	}
	// Header names are case-insensitive: the value is in none, in any case.
	for k := range res.Header {
		if strings.Contains(strings.ToLower(k), strings.ToLower(value)) {
			t.Errorf("the value names a header: %s", k)
		}
	}
	if uses := h.usesSoFar(); len(uses) != 1 || uses[0].Injected || uses[0].Secret != "" {
		t.Errorf("uses %+v", uses)
	}
}

// TestUpstreamsReused: with a pool, a sandbox's second client connection reuses the
// upstream connection of the first; after Reset a new one is dialled.
func TestUpstreamsReused(t *testing.T) {
	u := newUpstream(t, nil)
	pool := NewUpstreams(u.roots)
	h := newHarness(t, u, Config{Injections: []Injection{bearer()}, Upstreams: pool})
	get := func(path string) {
		c := h.client()
		c.Transport.(*http.Transport).DisableKeepAlives = true
		res, _ := do(t, c, "GET", "https://api.test"+path, "Bearer "+placeholder, nil)
		if res.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, res.StatusCode)
		}
	}
	conns := func() int {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.conns
	}
	get("/one")
	get("/two")
	if n := conns(); n != 1 {
		t.Errorf("two client connections made %d upstream connections, want 1", n)
	}
	pool.Reset()
	get("/three")
	if n := conns(); n != 2 {
		t.Errorf("after Reset: %d upstream connections, want 2", n)
	}
	seen := u.seen()
	if len(seen) != 3 {
		t.Fatalf("upstream saw %d requests", len(seen))
	}
	for _, r := range seen {
		if r.Header.Get("Authorization") != "Bearer "+value {
			t.Errorf("%s: Authorization %q", r.Path, r.Header.Get("Authorization"))
		}
	}
}

// TestUpstreamsConcurrent: the pool does not cap a sandbox's concurrent requests to one
// host: ten held open at once all reach the upstream.
func TestUpstreamsConcurrent(t *testing.T) {
	const n = 10
	var arrived sync.WaitGroup
	arrived.Add(n)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			http.Error(w, "not all requests arrived", http.StatusGatewayTimeout)
		}
	})
	pool := NewUpstreams(u.roots)
	h := newHarness(t, u, Config{Upstreams: pool, Check: func(string, string) (bool, string) { return true, "" }})
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, _ := do(t, h.client(), "GET", "https://api.test/", "", nil)
			codes <- res.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("status %d: the pool held requests back", c)
		}
	}
}
