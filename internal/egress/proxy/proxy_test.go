package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

// The proxy is tested on loopback: a client connects to its listener, a fake original
// destination stands for the firewall's redirect, and upstreams are servers on 127.0.0.1.
// The full path through a gateway namespace is tested in internal/egress and the daemon.

const synthetic = "198.19.0.5"

type harness struct {
	t       testing.TB
	p       *Proxy
	ln      net.Listener
	mu      sync.Mutex
	pol     *policy.Policy
	dst     netip.AddrPort // what OriginalDst reports
	addrs   []Resolved     // what Resolve returns
	dials   []netip.AddrPort
	events  []Event
	results chan Outcome
}

func newHarness(t testing.TB, rules policy.Rules, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, results: make(chan Outcome, 16)}
	h.setPolicy(rules)
	cfg.Policy = func() (string, *policy.Policy) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return "run", h.pol
	}
	cfg.Name = func(a netip.Addr) (string, bool) {
		if a == netip.MustParseAddr(synthetic) {
			return "allowed.test", true
		}
		return "", false
	}
	cfg.OriginalDst = func(net.Conn) (netip.AddrPort, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.dst, nil
	}
	cfg.Resolve = func(context.Context, string) ([]Resolved, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.addrs, nil
	}
	cfg.Dial = func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		h.mu.Lock()
		h.dials = append(h.dials, a)
		h.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", a.String())
	}
	cfg.Record = func(ev Event) func(Outcome) {
		h.mu.Lock()
		h.events = append(h.events, ev)
		h.mu.Unlock()
		return func(o Outcome) {
			select {
			case h.results <- o:
			default: // benchmarks do not read outcomes
			}
		}
	}
	h.p = New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.ln = ln
	go h.p.Serve(ln)
	t.Cleanup(func() { h.p.Close() })
	return h
}

func (h *harness) setPolicy(r policy.Rules) {
	p, err := policy.Compile(r, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.mu.Lock()
	h.pol = p
	h.mu.Unlock()
}

// upstream is a loopback server that records what it receives.
type upstream struct {
	ln    net.Listener
	mu    sync.Mutex
	conns int
}

func newUpstream(t testing.TB, handle func(net.Conn)) *upstream {
	t.Helper()
	u := &upstream{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.ln = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			u.mu.Unlock()
			go handle(c)
		}
	}()
	return u
}

func (u *upstream) port() uint16 { return uint16(u.ln.Addr().(*net.TCPAddr).Port) }

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns
}

// echo answers each line with "echo: " + line.
func echo(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, "echo: "+line); err != nil {
			return
		}
	}
}

func (h *harness) to(dst string, port uint16, addrs ...Resolved) {
	h.mu.Lock()
	h.dst = netip.AddrPortFrom(netip.MustParseAddr(dst), port)
	h.addrs = addrs
	h.mu.Unlock()
}

func (h *harness) dial() net.Conn {
	h.t.Helper()
	c, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func (h *harness) lastEvent() Event {
	h.t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		n := len(h.events)
		var ev Event
		if n > 0 {
			ev = h.events[n-1]
		}
		h.mu.Unlock()
		if n > 0 {
			return ev
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatal("no event recorded")
	return Event{}
}

func loopback() Resolved { return Resolved{Addr: netip.MustParseAddr("127.0.0.1"), Pinned: true} }

// closed reports whether the proxy closed c (EOF or reset) within a second.
func closed(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestAllowedRelays(t *testing.T) {
	up := newUpstream(t, echo)
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	r := bufio.NewReader(c)
	for _, msg := range []string{"hello\n", "again\n"} {
		io.WriteString(c, msg)
		line, err := r.ReadString('\n')
		if err != nil || line != "echo: "+msg {
			t.Fatalf("got %q, %v", line, err)
		}
	}
	c.Close()
	out := <-h.results
	if out.Up != 12 || out.Down != 24 {
		t.Errorf("bytes up/down = %d/%d, want 12/24", out.Up, out.Down)
	}
	if out.Upstream.Port() != up.port() {
		t.Errorf("upstream = %s", out.Upstream)
	}
	ev := h.lastEvent()
	if !ev.Allowed || ev.Name != "allowed.test" || ev.Rule == "" {
		t.Errorf("event = %+v", ev)
	}
}

func TestDenied(t *testing.T) {
	up := newUpstream(t, echo)
	cases := []struct {
		name   string
		rules  policy.Rules
		dst    string
		send   string
		reason string
	}{
		{"deny-all", policy.Rules{Net: "deny-all"}, synthetic, "hi\n", ""},
		{"direct IP", policy.Rules{Allow: []string{"allowed.test"}}, "192.0.2.7", "hi\n", "direct"},
		{"gateway address", policy.Rules{Allow: []string{"allowed.test"}}, "198.18.0.1", "hi\n", "direct"},
		{"denied by rule", policy.Rules{Net: "allow-all", Deny: []string{"allowed.test"}}, synthetic, "hi\n", ""},
		{"HTTP Host of another name", policy.Rules{Allow: []string{"allowed.test"}}, synthetic,
			"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n", "denied.test"},
		{"TLS SNI of another name", policy.Rules{Allow: []string{"allowed.test"}}, synthetic, "", "denied.test"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.rules, Config{PeekTimeout: 200 * time.Millisecond})
			h.to(tc.dst, up.port(), loopback())
			c := h.dial()
			if tc.send != "" {
				io.WriteString(c, tc.send)
			} else {
				go tls.Client(c, &tls.Config{ServerName: "denied.test", InsecureSkipVerify: true}).Handshake()
			}
			if !closed(c) {
				t.Errorf("connection was not closed")
			}
			ev := h.lastEvent()
			if ev.Allowed || !strings.Contains(ev.Reason, tc.reason) {
				t.Errorf("event = %+v, want denied with reason containing %q", ev, tc.reason)
			}
			if len(h.dials) != 0 || up.count() != 0 {
				t.Errorf("upstream was dialled: %v", h.dials)
			}
		})
	}
}

func TestMatchingSNIAndHostPass(t *testing.T) {
	up := newUpstream(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 4096)
		n, _ := c.Read(buf)
		c.Write([]byte(strings.ToUpper(string(buf[:min(n, 3)]))))
	})
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	io.WriteString(c, "get / HTTP/1.1\r\nhost: ALLOWED.test:80\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b, _ := io.ReadAll(c)
	if string(b) != "GET" {
		t.Errorf("got %q (the lowercase method is not HTTP to the sniffer, so it passes as opaque)", b)
	}
}

func TestRefusedAddresses(t *testing.T) {
	up := newUpstream(t, echo)
	for _, tc := range []struct {
		addr   string
		reason string
	}{
		{"10.0.0.5", "private"},
		{"169.254.169.254", "metadata"},
		{"127.0.0.1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::7f00:1", "IPv4-compatible"},
		{"64:ff9b::7f00:1", "NAT64"},
		{"64:ff9b:1::7f00:1", "local-use NAT64"},
		{"2002:7f00:1::", "6to4"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo client"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
			h.to(synthetic, up.port(), Resolved{Addr: netip.MustParseAddr(tc.addr)})
			c := h.dial()
			io.WriteString(c, "hi\n")
			if !closed(c) {
				t.Fatal("not closed")
			}
			ev := h.lastEvent()
			if ev.Allowed || !strings.Contains(ev.Reason, tc.reason) {
				t.Errorf("event = %+v, want refused (%s)", ev, tc.reason)
			}
			if len(h.dials) != 0 {
				t.Errorf("dialled %v", h.dials)
			}
		})
	}
	// A CIDR rule naming an IPv4 range does not name the IPv6 forms that carry it.
	t.Run("CIDR rule and 6to4", func(t *testing.T) {
		h := newHarness(t, policy.Rules{Allow: []string{"allowed.test", "127.0.0.0/8"}}, Config{})
		h.to(synthetic, up.port(), Resolved{Addr: netip.MustParseAddr("2002:7f00:1::")})
		c := h.dial()
		io.WriteString(c, "hi\n")
		if !closed(c) {
			t.Fatal("not closed")
		}
		if ev := h.lastEvent(); ev.Allowed || !strings.Contains(ev.Reason, "6to4") || !strings.Contains(ev.Reason, "--egress-hosts") {
			t.Errorf("event = %+v, want refused (6to4)", ev)
		}
		if len(h.dials) != 0 {
			t.Errorf("dialled %v", h.dials)
		}
	})
	// A CIDR rule naming the address lets it through.
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test", "127.0.0.0/8"}}, Config{})
	h.to(synthetic, up.port(), Resolved{Addr: netip.MustParseAddr("127.0.0.1")})
	c := h.dial()
	io.WriteString(c, "hi\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "echo: hi\n" {
		t.Errorf("with a CIDR rule: %q, %v", line, err)
	}
}

func TestServerSpeaksFirst(t *testing.T) {
	up := newUpstream(t, func(c net.Conn) {
		defer c.Close()
		io.WriteString(c, "220 banner\n")
		echo(c)
	})
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{PeekTimeout: 50 * time.Millisecond})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	r := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "220 banner\n" {
		t.Fatalf("banner = %q, %v", line, err)
	}
}

func TestRecheckCutsConnections(t *testing.T) {
	up := newUpstream(t, echo)
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	io.WriteString(c, "hi\n")
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if n := h.p.Recheck(); n != 0 {
		t.Errorf("Recheck with the same policy cut %d", n)
	}
	h.setPolicy(policy.Rules{Net: "deny-all"})
	if n := h.p.Recheck(); n != 1 {
		t.Errorf("Recheck cut %d, want 1", n)
	}
	if !closed(c) {
		t.Errorf("connection survived the policy change")
	}
	out := <-h.results
	if !strings.Contains(out.Err, "policy changed") {
		t.Errorf("outcome error = %q", out.Err)
	}
}

func TestIdleTimeout(t *testing.T) {
	up := newUpstream(t, echo)
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{IdleTimeout: 200 * time.Millisecond})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	io.WriteString(c, "hi\n")
	r := bufio.NewReader(c)
	r.ReadString('\n')
	// Activity keeps it open past the timeout.
	for range 4 {
		time.Sleep(100 * time.Millisecond)
		io.WriteString(c, "hi\n")
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatalf("busy connection was cut: %v", err)
		}
	}
	select {
	case out := <-h.results:
		if !strings.Contains(out.Err, "idle") {
			t.Errorf("outcome = %+v, want an idle timeout", out)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("idle connection was not cut")
	}
}

func TestMaxDuration(t *testing.T) {
	up := newUpstream(t, echo)
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{MaxDuration: 300 * time.Millisecond})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	io.WriteString(c, "hi\n")
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-h.results:
		if !strings.Contains(out.Err, "longer than") {
			t.Errorf("outcome = %+v", out)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("connection outlived its maximum duration")
	}
	if !closed(c) {
		t.Error("client side still open")
	}
}

func TestMaxConns(t *testing.T) {
	up := newUpstream(t, echo)
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{MaxConns: 2})
	h.to(synthetic, up.port(), loopback())
	var open []net.Conn
	for range 2 {
		c := h.dial()
		io.WriteString(c, "hi\n")
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	if err := h.refusal(); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("third connection over a cap of 2: %v, want a reset", err)
	}
	if ev := h.lastEvent(); ev.Allowed || !strings.Contains(ev.Reason, "connections at once") {
		t.Errorf("event = %+v", ev)
	}
	open[0].Close()
	time.Sleep(100 * time.Millisecond)
	c := h.dial()
	io.WriteString(c, "hi\n")
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Errorf("after one closed, a new connection failed: %v", err)
	}
}

func TestCloseCutsEverything(t *testing.T) {
	up := newUpstream(t, echo)
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	io.WriteString(c, "hi\n")
	bufio.NewReader(c).ReadString('\n')
	h.p.Close()
	if !closed(c) {
		t.Error("connection survived Close")
	}
	if _, err := net.DialTimeout("tcp", h.ln.Addr().String(), time.Second); err == nil {
		t.Error("listener still accepts after Close")
	}
}

func TestCheckAddr(t *testing.T) {
	host := []netip.Addr{netip.MustParseAddr("203.0.114.9")}
	for addr, want := range map[string]string{
		"93.184.216.34":   "",
		"2606:4700::1111": "",
		"127.0.0.1":       "loopback",
		"10.1.2.3":        "private",
		"172.16.0.1":      "private",
		"172.32.0.1":      "",
		"192.168.1.1":     "private",
		"100.64.0.1":      "CGNAT",
		"169.254.169.254": "metadata",
		"169.254.1.1":     "link-local",
		"198.18.0.1":      "moat",
		"198.19.0.5":      "moat",
		"0.0.0.0":         "unspecified",
		"224.0.0.1":       "multicast",
		"255.255.255.255": "reserved",
		"::1":             "loopback",
		"::ffff:10.0.0.1": "private",
		"fd00::1":         "private",
		"fe80::1":         "link-local",
		"fd00:ec2::254":   "metadata",
		"203.0.114.9":     "host's own",
		"192.0.2.1":       "documentation",
		"fec0::1":         "site-local",
		"fe80::1%eth0":    "zoned",
		// IPv6 forms that carry an IPv4 address are judged by it too.
		"::ffff:0:7f00:1":                      "carrying 127.0.0.1 (IPv4-translated), a loopback",
		"::7f00:1":                             "carrying 127.0.0.1 (IPv4-compatible), a loopback",
		"::a9fe:a9fe":                          "carrying 169.254.169.254 (IPv4-compatible), the cloud metadata",
		"64:ff9b::7f00:1":                      "carrying 127.0.0.1 (NAT64), a loopback",
		"64:ff9b::a00:1":                       "NAT64), a private",
		"64:ff9b::cb00:7209":                   "NAT64), one of the host's own",
		"64:ff9b::808:808":                     "",
		"64:ff9b:1::808:808":                   "local-use NAT64",
		"64:ff9b:1:7f00:1::":                   "local-use NAT64",
		"2002:7f00:1::":                        "carrying 127.0.0.1 (6to4), a loopback",
		"2002:a9fe:a9fe:1::1":                  "6to4), the cloud metadata",
		"2002:c612:1::":                        "6to4), a benchmarking",
		"2002:808:808::1":                      "",
		"2001:0:4136:e378:8000:63bf:80ff:fffe": "carrying 127.0.0.1 (Teredo client), a loopback",
		"2001:0:a00:1:8000:63bf:f7f7:f7f7":     "carrying 10.0.0.1 (Teredo server), a private",
		"2001:0:4136:e378:8000:63bf:f7f7:f7f7": "",
		"2606:4700::5efe:7f00:1":               "(ISATAP), a loopback",
		"2606:4700::200:5efe:808:808":          "",
	} {
		got := CheckAddr(netip.MustParseAddr(addr), host)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("CheckAddr(%s) = %q, want %q", addr, got, want)
		}
	}
	if CheckAddr(netip.Addr{}, nil) == "" {
		t.Error("the zero address passed")
	}
}

// BenchmarkNewConnection is the proxy alone on loopback (no namespace hop): accept, peek,
// decide, resolve, dial upstream, one round trip.
func BenchmarkNewConnection(b *testing.B) {
	up := newUpstream(b, echo)
	h := newHarness(b, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
	h.to(synthetic, up.port(), loopback())
	for b.Loop() {
		c, err := net.Dial("tcp", h.ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		io.WriteString(c, "hi\n")
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// TestEvasions: ways to name one host and reach another, each refused before a byte
// reaches the upstream.
func TestEvasions(t *testing.T) {
	var got sync.Mutex
	received := 0
	up := newUpstream(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 100)
		if n, _ := c.Read(buf); n > 0 {
			got.Lock()
			received += n
			got.Unlock()
		}
	})
	tlsHello := func(c net.Conn, sni string) {
		go tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	}
	for _, tc := range []struct {
		name   string
		rules  policy.Rules
		dst    string
		addrs  []Resolved
		client func(c net.Conn)
		reason string
	}{
		{"TLS hello after the peek window", policy.Rules{Allow: []string{"allowed.test"}}, synthetic, []Resolved{loopback()},
			func(c net.Conn) { time.Sleep(300 * time.Millisecond); tlsHello(c, "denied.test") }, ""},
		{"HTTP behind empty lines", policy.Rules{Allow: []string{"allowed.test"}}, synthetic, []Resolved{loopback()},
			func(c net.Conn) { io.WriteString(c, "\r\n\r\nGET / HTTP/1.1\r\nHost: denied.test\r\n\r\n") }, "denied.test"},
		{"direct IP naming a denied host under allow-all", policy.Rules{Net: "allow-all", Deny: []string{"denied.test"}}, "127.0.0.1", nil,
			func(c net.Conn) { tlsHello(c, "denied.test") }, "denied.test"},
		{"allowed name resolving into a denied range", policy.Rules{Net: "allow-all", Deny: []string{"127.0.0.0/8"}}, synthetic,
			[]Resolved{loopback()}, func(c net.Conn) { io.WriteString(c, "hi\n") }, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.rules, Config{PeekTimeout: 100 * time.Millisecond})
			h.to(tc.dst, up.port(), tc.addrs...)
			c := h.dial()
			tc.client(c)
			if !closed(c) {
				t.Errorf("connection was not closed")
			}
			time.Sleep(50 * time.Millisecond)
			got.Lock()
			n := received
			got.Unlock()
			if n != 0 {
				t.Errorf("the upstream received %d bytes", n)
			}
			ev := h.lastEvent()
			if tc.reason != "" && (ev.Allowed || !strings.Contains(ev.Reason, tc.reason)) {
				t.Errorf("event = %+v, want denied naming %q", ev, tc.reason)
			}
		})
	}
}

// fakeInterceptor records what the proxy hands it and answers with one line.
type fakeInterceptor struct {
	mu    sync.Mutex
	calls []string
	plain atomic.Bool
}

func (f *fakeInterceptor) Serve(ctx context.Context, client net.Conn, head []byte, host string, port int, dial func(context.Context) (net.Conn, error)) (int64, int64, error) {
	up, err := dial(ctx)
	if err != nil {
		return 0, 0, err
	}
	up.Close()
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf("%s:%d tls=%t", host, port, len(head) > 0 && head[0] == 0x16))
	f.mu.Unlock()
	n, _ := io.WriteString(client, "intercepted\n")
	return int64(len(head)), int64(n), nil
}

func (f *fakeInterceptor) PlainHTTP() bool { return f.plain.Load() }

// TestInterceptHook: connections to a host with a credential binding go to the
// interceptor when they are TLS, and are refused when they are not.
func TestInterceptHook(t *testing.T) {
	up := newUpstream(t, echo)
	ic := &fakeInterceptor{}
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{
		Intercept: func(host string, _ uint16) Interceptor {
			if host == "allowed.test" {
				return ic
			}
			return nil
		},
	})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	go tls.Client(c, &tls.Config{ServerName: "allowed.test", InsecureSkipVerify: true}).Handshake()
	time.Sleep(200 * time.Millisecond)
	ic.mu.Lock()
	calls := strings.Join(ic.calls, ",")
	ic.mu.Unlock()
	if calls != fmt.Sprintf("allowed.test:%d tls=true", up.port()) {
		t.Errorf("interceptor calls: %q", calls)
	}
	plain := h.dial()
	io.WriteString(plain, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if !closed(plain) {
		t.Error("plain HTTP to a bound host was not closed")
	}
	if ev := h.lastEvent(); ev.Allowed || !strings.Contains(ev.Reason, "only TLS connections") {
		t.Errorf("event = %+v", ev)
	}
	// An interceptor that takes plain HTTP gets it.
	ic.plain.Store(true)
	plain = h.dial()
	io.WriteString(plain, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if line, _ := bufio.NewReader(plain).ReadString('\n'); line != "intercepted\n" {
		t.Errorf("plain HTTP to an interceptor taking it: %q", line)
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if n := len(ic.calls); n != 2 || !strings.HasSuffix(ic.calls[1], "tls=false") {
		t.Errorf("interceptor calls: %q", ic.calls)
	}
}

// TestRecheckCutsNowInspected: a policy change that makes moat inspect a host (an HTTP
// rule) ends the connections to it that pass through, so that every later request is
// checked.
func TestRecheckCutsNowInspected(t *testing.T) {
	up := newUpstream(t, echo)
	var inspect atomic.Bool
	ic := &fakeInterceptor{}
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{
		Intercept: func(host string, _ uint16) Interceptor {
			if inspect.Load() {
				return ic
			}
			return nil
		},
	})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	io.WriteString(c, "hi\n")
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if n := h.p.Recheck(); n != 0 {
		t.Errorf("Recheck before the change cut %d", n)
	}
	inspect.Store(true)
	if n := h.p.Recheck(); n != 1 {
		t.Errorf("Recheck cut %d, want 1", n)
	}
	if !closed(c) {
		t.Errorf("a passed-through connection survived its host becoming inspected")
	}
	if out := <-h.results; !strings.Contains(out.Err, "now inspected") {
		t.Errorf("outcome error = %q", out.Err)
	}
}

// TestDirectClaimOfInspectedHost: a direct IP connection whose TLS SNI or HTTP Host names
// a host moat inspects (a credential binding, an HTTP rule) is refused before a byte
// reaches the upstream, also when the client speaks after the peek window: it would reach
// that host around the interception, and the scrubbing, that a named connection gets. A
// connection naming another host passes.
func TestDirectClaimOfInspectedHost(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := newUpstream(t, func(c net.Conn) {
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		mu.Lock()
		got = append(got, line)
		mu.Unlock()
		io.WriteString(c, "echo: "+line)
	})
	ic := &fakeInterceptor{}
	h := newHarness(t, policy.Rules{Allow: []string{"127.0.0.1/32"}}, Config{
		PeekTimeout: 100 * time.Millisecond,
		Intercept: func(host string, _ uint16) Interceptor {
			if host == "bound.test" {
				return ic
			}
			return nil
		},
	})
	h.to("127.0.0.1", up.port())
	for name, client := range map[string]func(net.Conn){
		"TLS SNI": func(c net.Conn) {
			go tls.Client(c, &tls.Config{ServerName: "Bound.Test", InsecureSkipVerify: true}).Handshake()
		},
		"HTTP Host": func(c net.Conn) { io.WriteString(c, "GET / HTTP/1.1\r\nHost: bound.test:443\r\n\r\n") },
		"late claim": func(c net.Conn) {
			time.Sleep(300 * time.Millisecond)
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: bound.test\r\n\r\n")
		},
		"late SNI": func(c net.Conn) {
			time.Sleep(300 * time.Millisecond)
			go tls.Client(c, &tls.Config{ServerName: "bound.test", InsecureSkipVerify: true}).Handshake()
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := h.dial()
			client(c)
			if !closed(c) {
				t.Error("the connection was not closed")
			}
		})
	}
	mu.Lock()
	if strings.Join(got, "") != "" {
		t.Errorf("the upstream received %q", got)
	}
	mu.Unlock()
	// The early claims are refused at the decision; the late ones (dialled, nothing sent)
	// end with the reason.
	refused := 0
	h.mu.Lock()
	for _, ev := range h.events {
		if !ev.Allowed && strings.Contains(ev.Reason, "reach it by name") {
			refused++
		}
	}
	h.mu.Unlock()
	for range 2 {
		select {
		case out := <-h.results:
			if strings.Contains(out.Err, "reach it by name") {
				refused++
			}
		case <-time.After(2 * time.Second):
		}
	}
	if refused != 4 {
		t.Errorf("%d of 4 connections refused for naming an inspected host", refused)
	}
	c := h.dial()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "echo: GET / HTTP/1.1\r\n" {
		t.Errorf("a direct connection naming another host: %q, %v", line, err)
	}
}
