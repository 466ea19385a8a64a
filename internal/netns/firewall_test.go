package netns

import (
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/linux"
)

// TestFirewallRedirects checks G's firewall from inside S: every TCP connection, whatever
// its destination, arrives at the egress listener with its original destination intact;
// DNS over UDP and TCP arrives at the DNS listeners (and UDP replies find their way back);
// other UDP and ICMP are dropped. All destinations are documentation addresses that exist
// only as far as G: G has no interface out.
func TestFirewallRedirects(t *testing.T) {
	e := newEnv(t)
	id, sNS := e.setup(t)
	if err := checkFirewall(mustOpen(t, e.m.gwPath(id))); err != nil {
		t.Fatalf("firewall after setup: %v", err)
	}
	ls, err := e.m.Listen(id)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()

	// TCP to anywhere reaches the proxy listener; SO_ORIGINAL_DST tells where it went.
	for _, dst := range []string{"192.0.2.10:8443", "198.19.3.4:22", "198.18.0.1:49983"} {
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ls.Proxy.Accept()
			if err == nil {
				accepted <- c
			}
		}()
		var c net.Conn
		inNS(t, sNS, func() (err error) {
			c, err = net.DialTimeout("tcp4", dst, 2*time.Second)
			return err
		})
		select {
		case sc := <-accepted:
			got, err := linux.OriginalDst(sc.(*net.TCPConn))
			if err != nil {
				t.Errorf("%s: original destination: %v", dst, err)
			} else if got != netip.MustParseAddrPort(dst) {
				t.Errorf("original destination = %s, want %s", got, dst)
			}
			sc.Close()
		case <-time.After(2 * time.Second):
			t.Errorf("TCP to %s did not reach the proxy listener", dst)
		}
		c.Close()
	}

	// DNS over UDP to any address reaches the DNS listener, and the answer comes back
	// from the address the sandbox asked.
	var u net.Conn
	inNS(t, sNS, func() (err error) {
		u, err = net.Dial("udp4", "192.0.2.53:53")
		return err
	})
	defer u.Close()
	if _, err := u.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	ls.DNSUDP.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, from, err := ls.DNSUDP.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "query" {
		t.Fatalf("DNS listener read %q, %v", buf[:n], err)
	}
	if _, err := ls.DNSUDP.WriteTo([]byte("answer"), from); err != nil {
		t.Fatal(err)
	}
	u.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := u.Read(buf); err != nil || string(buf[:n]) != "answer" {
		t.Errorf("sandbox read %q, %v; want the answer", buf[:n], err)
	}

	// DNS over TCP reaches the DNS TCP listener, not the proxy.
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ls.DNSTCP.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	inNS(t, sNS, func() error {
		c, err := net.DialTimeout("tcp4", "192.0.2.53:53", 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	select {
	case <-accepted:
	case <-time.After(2 * time.Second):
		t.Errorf("TCP DNS did not reach the DNS TCP listener")
	}

	// Other UDP is dropped: nothing arrives at the DNS listener, and no port-unreachable
	// comes back either (a drop, not a reject).
	inNS(t, sNS, func() error {
		c, err := net.Dial("udp4", "198.18.0.1:5000")
		if err != nil {
			return err
		}
		defer c.Close()
		c.Write([]byte("x"))
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err = c.Read(buf)
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			t.Errorf("UDP to the gateway's port 5000: %v, want a timeout (dropped)", err)
		}
		return nil
	})
	ls.DNSUDP.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, _, err := ls.DNSUDP.ReadFrom(buf); err == nil {
		t.Errorf("UDP to port 5000 reached the DNS listener")
	}

	// ICMP echo to the gateway gets no reply.
	inNS(t, sNS, func() error {
		c, err := net.Dial("ip4:icmp", GatewayAddr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		echo := []byte{8, 0, 0xf7, 0xfe, 0, 1, 0, 0} // type 8, checksum for id 1 seq 0
		if _, err := c.Write(echo); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := c.Read(buf); err == nil {
			t.Errorf("ICMP echo to the gateway was answered (%d bytes)", n)
		}
		return nil
	})
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := linux.OpenNetNS(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestProbeFirewall(t *testing.T) {
	requireRoot(t)
	if err := ProbeFirewall(t.TempDir()); err != nil {
		t.Fatalf("ProbeFirewall: %v", err)
	}
}
