package egress_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/netns"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/store"
)

// rig is one sandbox network (S, G and the firewall, as the daemon makes them) served by
// an egress.Manager journaling into a real store. Upstreams are on 127.0.0.1.
type rig struct {
	caPEM string // the interception CA, with credential bindings
	id    string
	s     *os.File // the sandbox's network namespace
	m     *egress.Manager
	st    *store.Store
	net   *netns.Manager
}

func newRig(tb testing.TB, hosts egress.Hosts, spec policy.Spec) *rig {
	return newRigWith(tb, hosts, spec, nil, nil)
}

// newRigWith is newRig with credential bindings: configure adjusts the Manager's config
// (secrets, CA directory, upstream roots) before the sandbox is attached with creds.
func newRigWith(tb testing.TB, hosts egress.Hosts, spec policy.Spec, creds []sandbox.Credential, configure func(*egress.Config)) *rig {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, nftables)")
	}
	dir := tb.TempDir()
	st, err := store.Open(filepath.Join(dir, "moat.db"))
	if err != nil {
		tb.Fatal(err)
	}
	r := &rig{id: "sb-egress" + fmt.Sprint(time.Now().UnixNano()%1e6), st: st, net: netns.New(filepath.Join(dir, "run"), nil)}
	sPath := filepath.Join(dir, "s-netns")
	if err := linux.CreateNetNS(sPath, func() error { return nil }); err != nil {
		tb.Fatal(err)
	}
	if err := r.net.Setup(context.Background(), r.id, sPath); err != nil {
		tb.Fatal(err)
	}
	if r.s, err = linux.OpenNetNS(sPath); err != nil {
		tb.Fatal(err)
	}
	cfg := egress.Config{Listener: r.net, Journal: st, Resolver: egress.NewResolver(hosts, "")}
	if configure != nil {
		configure(&cfg)
	}
	r.m = egress.New(cfg)
	if r.caPEM, err = r.m.Attach(r.id, spec, creds, sandbox.GitSettings{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		r.m.Close()
		r.net.Teardown(context.Background(), r.id)
		r.net.Close()
		r.s.Close()
		linux.UnmountFile(sPath)
		st.Close()
	})
	return r
}

// lookup asks moat's DNS from inside S (at any address: the firewall redirects).
func (r *rig) lookup(tb testing.TB, name string) (netip.Addr, int) {
	tb.Helper()
	var conn net.Conn
	if err := linux.RunInNetNS(r.s, func() (err error) {
		conn, err = net.Dial("udp4", "192.0.2.53:53")
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	c := &dns.Conn{Conn: conn}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if err := c.WriteMsg(q); err != nil {
		tb.Fatal(err)
	}
	a, err := c.ReadMsg()
	if err != nil {
		tb.Fatal(err)
	}
	for _, rr := range a.Answer {
		if x, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(x.A.To4())
			return ip, a.Rcode
		}
	}
	return netip.Addr{}, a.Rcode
}

// dial connects from inside S.
func (r *rig) dial(tb testing.TB, addr netip.AddrPort) net.Conn {
	tb.Helper()
	var c net.Conn
	if err := linux.RunInNetNS(r.s, func() (err error) {
		c, err = net.DialTimeout("tcp4", addr.String(), 2*time.Second)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	return c
}

func echoServer(tb testing.TB) (port uint16, accepted chan struct{}) {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	accepted = make(chan struct{}, 1000)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case accepted <- struct{}{}:
			default:
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port), accepted
}

func TestEgressThroughGateway(t *testing.T) {
	port, accepted := echoServer(t)
	hosts := egress.Hosts{"up.test": {netip.MustParseAddr("127.0.0.1")}, "other.test": {netip.MustParseAddr("127.0.0.1")}}
	spec := policy.Spec{Phase: "setup", Phases: map[string]policy.Rules{
		"setup": {Allow: []string{"up.test"}},
		"run":   {Net: "deny-all"},
	}}
	r := newRig(t, hosts, spec)

	ip, rcode := r.lookup(t, "UP.test")
	if !egress.SyntheticPrefix.Contains(ip) || rcode != dns.RcodeSuccess {
		t.Fatalf("up.test resolved to %s (rcode %d), want a synthetic address", ip, rcode)
	}
	if ip2, _ := r.lookup(t, "up.test"); ip2 != ip {
		t.Errorf("second lookup gave %s, first %s", ip2, ip)
	}
	if ip, rcode := r.lookup(t, "other.test"); ip.IsValid() || rcode != dns.RcodeNameError {
		t.Errorf("other.test: %s rcode %d, want NXDOMAIN", ip, rcode)
	}

	c := r.dial(t, netip.AddrPortFrom(ip, port))
	defer c.Close()
	br := bufio.NewReader(c)
	io.WriteString(c, "hello\n")
	if line, err := br.ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("echo through the proxy: %q, %v", line, err)
	}
	<-accepted

	// Switching to the closed phase cuts the connection.
	spec.Phase = "run"
	if n, err := r.m.SetPolicy(r.id, spec); err != nil || n != 1 {
		t.Errorf("SetPolicy = %d, %v; want 1 connection cut", n, err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Errorf("connection survived the phase switch")
	}
	// A new connection to the same address is refused and never reaches upstream.
	c2 := r.dial(t, netip.AddrPortFrom(ip, port))
	io.WriteString(c2, "again\n")
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
		t.Errorf("new connection in the closed phase got an answer")
	}
	c2.Close()
	select {
	case <-accepted:
		t.Errorf("upstream accepted a connection in the closed phase")
	case <-time.After(100 * time.Millisecond):
	}

	r.m.Flush()
	log, err := r.st.Egress(context.Background(), r.id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range log {
		got = append(got, fmt.Sprintf("%s %s %s %t", e.Phase, e.Proto, e.Name, e.Allowed))
		if e.Open {
			t.Errorf("entry still open: %+v", e)
		}
	}
	for _, want := range []string{"setup dns up.test true", "setup dns other.test false", "setup tcp up.test true", "run tcp up.test false"} {
		if !slices.Contains(got, want) {
			t.Errorf("egress log lacks %q: %v", want, got)
		}
	}
	for _, e := range log {
		if e.Proto == "tcp" && e.Allowed && (e.Up != 6 || e.Down != 6 || !strings.Contains(e.Error, "policy changed")) {
			t.Errorf("allowed entry: %+v", e)
		}
	}
}

// BenchmarkEgress compares a connection through the whole boundary (from a sandbox
// namespace, over the veth, redirected by nftables to the proxy, which dials upstream) with
// a direct loopback connection to the same upstream, in the same run. The client loops run
// on a thread inside the sandbox namespace (as a sandbox's process would), so no namespace
// switch is measured.
func BenchmarkEgress(b *testing.B) {
	port, _ := echoServer(b)
	srcPort := sourceServer(b)
	hosts := egress.Hosts{"up.test": {netip.MustParseAddr("127.0.0.1")}}
	r := newRig(b, hosts, policy.Single(policy.Rules{Allow: []string{"up.test"}}))
	ip, _ := r.lookup(b, "up.test")
	host := r.s // run in the sandbox namespace
	for _, path := range []struct {
		name string
		ip   netip.Addr
		ns   *os.File
	}{{"direct", netip.MustParseAddr("127.0.0.1"), nil}, {"proxied", ip, host}} {
		// Both clients run on a locked thread: the sandbox's must (it is in S), and the
		// direct one does too, so that both pay the same scheduling costs.
		in := func(b *testing.B, fn func()) {
			if path.ns == nil {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				fn()
				return
			}
			if err := linux.RunInNetNS(path.ns, func() error { fn(); return nil }); err != nil {
				b.Fatal(err)
			}
		}
		echoAddr := netip.AddrPortFrom(path.ip, port).String()
		b.Run("new-connection/"+path.name, func(b *testing.B) {
			var lat []time.Duration
			in(b, func() {
				for b.Loop() {
					t0 := time.Now()
					c, err := net.Dial("tcp4", echoAddr)
					if err != nil {
						b.Fatal(err)
					}
					roundTrip(b, c, bufio.NewReader(c))
					lat = append(lat, time.Since(t0))
					c.Close()
				}
			})
			reportLatency(b, lat)
		})
		b.Run("reused-connection/"+path.name, func(b *testing.B) {
			var c net.Conn
			in(b, func() {
				var err error
				if c, err = net.Dial("tcp4", echoAddr); err != nil {
					b.Fatal(err)
				}
			})
			defer c.Close()
			br := bufio.NewReader(c)
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				roundTrip(b, c, br)
				lat = append(lat, time.Since(t0))
			}
			reportLatency(b, lat)
		})
		b.Run("download/"+path.name, func(b *testing.B) {
			var c net.Conn
			in(b, func() {
				var err error
				if c, err = net.Dial("tcp4", netip.AddrPortFrom(path.ip, srcPort).String()); err != nil {
					b.Fatal(err)
				}
			})
			defer c.Close()
			io.WriteString(c, "go\n") // the source starts once the proxy has a first byte
			const chunk = 64 << 10
			b.SetBytes(chunk)
			buf := make([]byte, chunk)
			b.ResetTimer()
			for range b.N {
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func roundTrip(tb testing.TB, c net.Conn, br *bufio.Reader) {
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		tb.Fatal(err)
	}
	if _, err := br.ReadString('\n'); err != nil {
		tb.Fatal(err)
	}
}

// sourceServer sends zeros to each client, after its first line, until it goes away.
func sourceServer(tb testing.TB) uint16 {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
					return
				}
				buf := make([]byte, 256<<10)
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
