package daemon_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/netns"
	"github.com/moatdev/moat/internal/previews"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// previewPort is where the in-sandbox test server listens.
const previewPort = 8080

// previewLog is where it logs every request's path and headers, inside the sandbox.
const previewLog = "/tmp/preview-requests.log"

// startPreviewServer starts testdata/previewsrv.py on port in sandbox id and waits until
// it accepts connections.
func startPreviewServer(t *testing.T, e *env, id string, port int) {
	t.Helper()
	src, err := os.ReadFile("testdata/previewsrv.py")
	if err != nil {
		t.Fatal(err)
	}
	e.mustSh(id, fmt.Sprintf(`echo %s | base64 -d > /tmp/previewsrv.py && (setsid python3 /tmp/previewsrv.py %d %s >/tmp/previewsrv.out 2>&1 </dev/null &)
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/%d) 2>/dev/null && exit 0; sleep 0.1; done; cat /tmp/previewsrv.out; exit 1`,
		base64.StdEncoding.EncodeToString(src), port, previewLog, port))
}

// loggedRequest is one line of the in-sandbox server's log.
type loggedRequest struct {
	Path    string      `json:"path"`
	Headers [][2]string `json:"headers"`
}

// sandboxRequests reads back what the in-sandbox server received.
func sandboxRequests(t *testing.T, e *env, id string) []loggedRequest {
	t.Helper()
	out := e.sh(id, "", "cat "+previewLog+" 2>/dev/null").stdout
	var reqs []loggedRequest
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r loggedRequest
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("server log line %q: %v", line, err)
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// rawResponse is what a raw request got back.
type rawResponse struct {
	code   int
	header http.Header
	body   string
}

// rawRequest sends a request exactly as written (no client-side path cleaning) to addr.
func rawRequest(t *testing.T, addr, method, target, host string, hdr ...string) rawResponse {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, target, host)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, target, host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return rawResponse{resp.StatusCode, resp.Header, string(body)}
}

// hostLoopback is a server on the host's loopback that logs every request it receives: a
// preview must never reach it.
type hostLoopback struct {
	port int
	mu   sync.Mutex
	got  []string
}

func newHostLoopback(t *testing.T) *hostLoopback {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostLoopback{port: l.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.got = append(h.got, r.Method+" "+r.Host+" "+r.RequestURI)
		h.mu.Unlock()
		fmt.Fprintln(w, "HOST-LOOPBACK")
	}), ConnState: func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			h.mu.Lock()
			h.got = append(h.got, "connection from "+c.RemoteAddr().String())
			h.mu.Unlock()
		}
	}}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return h
}

func (h *hostLoopback) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}

// TestPortPreviews drives previews end to end on each runtime, through a real daemon's TCP
// listener: the access matrix (private, token, public, other keys), what of the request
// reaches the sandbox (asserted in the in-sandbox server's own log), the shared-origin
// CSP and Set-Cookie filter, a port without listener, the gateway's own ports, host
// loopback under crafted hosts and paths (asserted at a host loopback server), WebSocket,
// and a stopped sandbox.
func TestPortPreviews(t *testing.T) {
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) { portPreviews(t, rt) })
	}
}

func portPreviews(t *testing.T, rt string) {
	addr := freeLoopbackAddr(t)
	_, lport, _ := net.SplitHostPort(addr)
	domain := "preview.localhost:" + lport
	configure := func(c *daemon.Config) {
		c.Listen = addr
		c.Previews = daemon.PreviewsConfig{Domain: domain}
	}
	e := newEnvWith(t, configure)
	ctx := context.Background()
	keyA, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := sdk.NewHTTP("http://"+addr, keyA.Key), sdk.NewHTTP("http://"+addr, keyB.Key)
	sbA, err := a.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 512 << 20, DiskBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	sbB, err := b.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 512 << 20, DiskBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	startPreviewServer(t, e, sbA.ID, previewPort)
	startPreviewServer(t, e, sbB.ID, previewPort)
	loop := newHostLoopback(t)
	path := func(id string, port int, rest string) string {
		return "/preview/" + id + "/" + strconv.Itoa(port) + rest
	}
	hostOf := func(id string, port int) string { return strconv.Itoa(port) + "-" + id + "." + domain }
	bearerA := []string{"Authorization", "Bearer " + keyA.Key}
	okBody := func(r rawResponse, rest string) bool { return r.code == 200 && r.body == "sandbox-ok "+rest+"\n" }

	// The owner, path-based, with every credential moat knows of: none reaches the sandbox.
	r := rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/hello?x=1&moat_preview_token=tok"), addr,
		"Authorization", "Bearer "+keyA.Key, "X-API-KEY", keyA.Key, "Cookie", "moat_session=SESSION-SECRET; app=keep",
		"X-Moat-Preview-Token", "TOKEN-SECRET", "E2b-Traffic-Access-Token", "TOKEN-SECRET", "X-App", "kept")
	if !okBody(r, "/hello?x=1") {
		t.Fatalf("owner path-based: %d %q", r.code, r.body)
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "sandbox ") || strings.Contains(csp, "allow-same-origin") {
		t.Errorf("path-based preview CSP = %q, want a sandbox without allow-same-origin", csp)
	}
	if cs := r.header.Values("Set-Cookie"); len(cs) != 1 || cs[0] != "app=1" {
		t.Errorf("path-based Set-Cookie = %q, want only app=1 (no moat_session, none scoped to /)", cs)
	}
	reqs := sandboxRequests(t, e, sbA.ID)
	if len(reqs) != 1 {
		t.Fatalf("the sandbox server got %d requests, want 1: %+v", len(reqs), reqs)
	}
	var cookie, app string
	for _, h := range reqs[0].Headers {
		v := strings.ToLower(h[0] + ": " + h[1])
		for _, secret := range []string{keyA.Key, "session-secret", "token-secret", "authorization", "x-api-key", "moat_session", "preview-token", "traffic-access-token"} {
			if strings.Contains(v, strings.ToLower(secret)) {
				t.Errorf("the sandbox received %q (contains %q)", h[0]+": "+h[1], secret)
			}
		}
		switch strings.ToLower(h[0]) {
		case "cookie":
			cookie = h[1]
		case "x-app":
			app = h[1]
		}
	}
	if cookie != "app=keep" || app != "kept" {
		t.Errorf("the sandbox's own cookie %q and header %q did not pass", cookie, app)
	}

	// Host-based, X-API-KEY: no CSP (its own origin).
	r = rawRequest(t, addr, "GET", "/h", hostOf(sbA.ID, previewPort), "X-API-KEY", keyA.Key)
	if !okBody(r, "/h") || r.header.Get("Content-Security-Policy") != "" {
		t.Errorf("owner host-based: %d %q CSP %q", r.code, r.body, r.header.Get("Content-Security-Policy"))
	}
	// A path without the trailing slash is redirected to it.
	if r = rawRequest(t, addr, "GET", path(sbA.ID, previewPort, ""), addr, bearerA...); r.code != 308 || r.header.Get("Location") != path(sbA.ID, previewPort, "/") {
		t.Errorf("no trailing slash: %d %q", r.code, r.header.Get("Location"))
	}

	// Access matrix. notFound is the answer for a sandbox that does not exist.
	ghost := "sb-000000000000"
	notFound := rawRequest(t, addr, "GET", path(ghost, previewPort, "/"), addr, bearerA...)
	if notFound.code != 404 {
		t.Fatalf("a sandbox that does not exist: %d %q", notFound.code, notFound.body)
	}
	same404 := func(what string, r rawResponse, id string) {
		t.Helper()
		if r.code != 404 || strings.ReplaceAll(r.body, id, ghost) != notFound.body {
			t.Errorf("%s: %d %q, want the 404 of a sandbox that does not exist (%q)", what, r.code, r.body, notFound.body)
		}
	}
	before := len(sandboxRequests(t, e, sbB.ID))
	same404("key A to key B's sandbox (path)", rawRequest(t, addr, "GET", path(sbB.ID, previewPort, "/"), addr, bearerA...), sbB.ID)
	same404("key A to key B's sandbox (host)", rawRequest(t, addr, "GET", "/", hostOf(sbB.ID, previewPort), bearerA...), sbB.ID)
	same404("no key (private)", rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/"), addr), sbA.ID)
	same404("a wrong key", rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/"), addr, "Authorization", "Bearer e2b_nope"), sbA.ID)
	same404("a token on a private port", rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/"), addr, "X-Moat-Preview-Token", "x"), sbA.ID)
	if n := len(sandboxRequests(t, e, sbB.ID)); n != before {
		t.Errorf("key B's sandbox server received %d requests from key A", n-before)
	}
	// Key B cannot open key A's port either.
	if _, err := b.SetPort(ctx, sbA.ID, previewPort, v1.PortToken); !isNotFound(err) {
		t.Errorf("key B opens key A's port: %v", err)
	}
	// Token.
	p, err := a.SetPort(ctx, sbA.ID, previewPort, v1.PortToken)
	if err != nil || len(p.Token) < 32 || p.Visibility != v1.PortToken || p.URL != "http://"+hostOf(sbA.ID, previewPort)+"/" {
		t.Fatalf("open with a token: %+v %v", p, err)
	}
	if p2, err := a.SetPort(ctx, sbA.ID, previewPort, v1.PortToken); err != nil || p2.Token != p.Token {
		t.Errorf("opening again changed the token: %+v %v", p2, err)
	}
	if r = rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/t"), addr, "X-Moat-Preview-Token", p.Token); !okBody(r, "/t") {
		t.Errorf("token header: %d %q", r.code, r.body)
	}
	if r = rawRequest(t, addr, "GET", "/e", hostOf(sbA.ID, previewPort), "e2b-traffic-access-token", p.Token); !okBody(r, "/e") {
		t.Errorf("E2B token header: %d %q", r.code, r.body)
	}
	if r = rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/q?moat_preview_token="+p.Token), addr); !okBody(r, "/q") {
		t.Errorf("token query: %d %q", r.code, r.body)
	}
	wrong := []byte(p.Token)
	wrong[len(wrong)-1] ^= 1 // another hex digit
	same404("a wrong token", rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/"), addr, "X-Moat-Preview-Token", string(wrong)), sbA.ID)
	same404("key B with A's port open by token but no token", rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/"), addr, "Authorization", "Bearer "+keyB.Key), sbA.ID)
	if list, err := a.Ports(ctx, sbA.ID); err != nil || len(list) != 1 || list[0].Port != previewPort || !list[0].Listening || list[0].Token != p.Token {
		t.Errorf("ports of A: %+v %v", list, err)
	}
	// The setting survives a daemon restart (the sandbox and its server keep running).
	e.stop()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), configure)
	if r = rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/after-restart"), addr, "X-Moat-Preview-Token", p.Token); !okBody(r, "/after-restart") {
		t.Errorf("token after a daemon restart: %d %q", r.code, r.body)
	}
	if list, err := b.Ports(ctx, sbA.ID); !isNotFound(err) {
		t.Errorf("key B lists key A's ports: %+v %v", list, err)
	}
	// Public needs the operator's flag.
	if _, err := a.SetPort(ctx, sbA.ID, previewPort, v1.PortPublic); err == nil {
		t.Errorf("a public port without --allow-public-ports")
	}
	// A port made public while the operator allowed it (a daemon since restarted without
	// --allow-public-ports): closed to anyone without key or token.
	if err := e.d.Store.SetPort(ctx, sbA.ID, previews.Setting{Port: previewPort, Visibility: v1.PortPublic}); err != nil {
		t.Fatal(err)
	}
	same404("a public port while public ports are off", rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/"), addr), sbA.ID)
	// Close: the token stops working.
	if _, err := a.ClosePort(ctx, sbA.ID, previewPort); err != nil {
		t.Fatal(err)
	}
	same404("a revoked token", rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/"), addr, "X-Moat-Preview-Token", p.Token), sbA.ID)

	// Nothing but the named sandbox's port: a port without listener, the gateway's own
	// ports, host loopback's port.
	served := len(sandboxRequests(t, e, sbA.ID))
	for _, port := range []int{8081, netns.DNSPort, netns.ProxyPort, loop.port} {
		if r = rawRequest(t, addr, "GET", path(sbA.ID, port, "/"), addr, bearerA...); r.code != 502 || !strings.Contains(r.body, "no process listens") {
			t.Errorf("port %d without listener in the sandbox: %d %q, want 502", port, r.code, r.body)
		}
	}
	// Crafted URLs: none may reach host loopback (or any other target).
	lp := strconv.Itoa(loop.port)
	for _, c := range []struct{ target, host string }{
		{path(sbA.ID, loop.port, "/../../"), addr},
		{"/preview/" + sbA.ID + "/" + lp + "/%2e%2e/%2e%2e/", addr},
		{"/preview/127.0.0.1/" + lp + "/", addr},
		{"/preview/" + sbA.ID + "/0/", addr},
		{"/preview/" + sbA.ID + "/65536/", addr},
		{"/preview/" + sbA.ID + "/-1/", addr},
		{"/preview/" + sbA.ID + "." + lp + "/" + lp + "/", addr},
		{"/preview/" + sbA.ID + "%2f..%2f127.0.0.1/" + lp + "/", addr},
		{"/preview/..%2f..%2f/" + lp + "/", addr},
		{"/", lp + "-127.0.0.1." + domain},
		{"/", lp + "-" + sbA.ID + ".127.0.0.1." + domain},
		{"/", "127.0.0.1:" + lp},
		{"http://127.0.0.1:" + lp + "/", hostOf(sbA.ID, loop.port)},
		{"/", "0-" + sbA.ID + "." + domain},
		{"/", "65536-" + sbA.ID + "." + domain},
		{"/", lp + "-" + sbA.ID + "." + domain + "@127.0.0.1:" + lp},
	} {
		r = rawRequest(t, addr, "GET", c.target, c.host, bearerA...)
		if r.code == 200 || strings.Contains(r.body, "HOST-LOOPBACK") {
			t.Errorf("GET %s Host %s: %d %q", c.target, c.host, r.code, r.body)
		}
	}
	if got := loop.requests(); len(got) != 0 {
		t.Errorf("host loopback received: %q", got)
	}
	if n := len(sandboxRequests(t, e, sbA.ID)); n != served {
		t.Errorf("the sandbox server received %d of the crafted requests", n-served)
	}

	// WebSocket echo through both forms.
	for _, how := range []struct{ target, host string }{
		{path(sbA.ID, previewPort, "/ws"), addr},
		{"/ws", hostOf(sbA.ID, previewPort)},
	} {
		ws := dialWebSocket(t, addr, how.target, how.host, bearerA...)
		for _, msg := range []string{"hello", strings.Repeat("x", 70000)} {
			ws.send(t, msg)
			if got := ws.recv(t); got != msg {
				t.Errorf("WebSocket echo of %d bytes: got %d bytes", len(msg), len(got))
			}
		}
		ws.c.Close()
	}

	// Streaming: the first event arrives while the server still holds the second.
	sc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(sc, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", path(sbA.ID, previewPort, "/stream"), addr, keyA.Key)
	_ = sc.SetReadDeadline(time.Now().Add(2 * time.Second))
	sresp, err := http.ReadResponse(bufio.NewReader(sc), nil)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	first := make([]byte, len("data: one\n\n"))
	if _, err := io.ReadFull(sresp.Body, first); err != nil || string(first) != "data: one\n\n" {
		t.Errorf("the first streamed event within 2 s: %q %v", first, err)
	}
	sc.Close()
	// The unix socket serves previews too, to the operator.
	uc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(e.runDir, "moat.sock"))
	}}}
	if resp, err := uc.Get("http://moat" + path(sbA.ID, previewPort, "/unix")); err != nil {
		t.Errorf("preview on the unix socket: %v", err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "sandbox-ok /unix\n" {
			t.Errorf("preview on the unix socket: %d %q", resp.StatusCode, body)
		}
	}

	// A stopped sandbox: 502 saying so.
	if _, err := a.Stop(ctx, sbA.ID); err != nil {
		t.Fatal(err)
	}
	if r = rawRequest(t, addr, "GET", path(sbA.ID, previewPort, "/"), addr, bearerA...); r.code != 502 || !strings.Contains(r.body, "stopped") {
		t.Errorf("a stopped sandbox: %d %q", r.code, r.body)
	}
}

// wsConn is a minimal WebSocket client (text frames, masked as a client must).
type wsConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialWebSocket(t *testing.T, addr, target, host string, hdr ...string) *wsConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	var key [16]byte
	_, _ = rand.Read(key[:])
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: %s\r\n",
		target, host, base64.StdEncoding.EncodeToString(key[:]))
	for i := 0; i+1 < len(hdr); i += 2 {
		req += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("WebSocket upgrade %s (Host %s): %v %v", target, host, resp, err)
	}
	return &wsConn{c, br}
}

func (w *wsConn) send(t testing.TB, msg string) {
	t.Helper()
	hdr := []byte{0x81}
	switch n := len(msg); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 65536:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	mask := [4]byte{1, 2, 3, 4}
	hdr = append(hdr, mask[:]...)
	data := []byte(msg)
	for i := range data {
		data[i] ^= mask[i%4]
	}
	if _, err := w.c.Write(append(hdr, data...)); err != nil {
		t.Fatal(err)
	}
}

func (w *wsConn) recv(t testing.TB) string {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		t.Fatal(err)
	}
	n := uint64(h[1] & 127)
	switch n {
	case 126:
		var b [2]byte
		_, _ = io.ReadFull(w.br, b[:])
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, _ = io.ReadFull(w.br, b[:])
		n = binary.BigEndian.Uint64(b[:])
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(w.br, data); err != nil {
		t.Fatal(err)
	}
	return string(data)
}
