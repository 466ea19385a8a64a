package netns

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

// The per-user source ports, on the kernel: connections opened in S by sockets of
// different owners reach the gateway's proxy listener with source ports of their owner's
// range. A socket's owner is its creator's fsuid: a thread of this test in S takes the
// host uid of a sandbox uid (testIDs.Host + uid) for the socket() call, as a process of
// that uid inside the sandbox would be.

var testUsers = []sandbox.User{{Name: "alice", UID: 2001}, {Name: "bob", UID: 2002}}

// dialAs connects from S to the gateway's proxy listener with a socket owned by the
// sandbox's uid (nil: the thread's own, host root, which S's user namespace does not map),
// bound first to port bind if not 0. It returns the source port the proxy listener saw.
func dialAs(tb testing.TB, sNS string, ln net.Listener, uid *uint32, bind int) int {
	tb.Helper()
	accepted := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- -1
			return
		}
		accepted <- c.RemoteAddr().(*net.TCPAddr).Port
		c.Close()
	}()
	inNS(tb, sNS, func() error {
		if uid != nil {
			unix.Setfsuid(int(testIDs.Host + *uid))
			defer unix.Setfsuid(0)
		}
		d := net.Dialer{}
		if bind != 0 {
			d.LocalAddr = &net.TCPAddr{Port: bind}
		}
		c, err := d.Dial("tcp4", "198.18.0.1:15001")
		if err != nil {
			return err
		}
		_ = c.(*net.TCPConn).SetLinger(0)
		return c.Close()
	})
	return <-accepted
}

func TestUserPorts(t *testing.T) {
	e := newEnv(t)
	id, sNS := e.setup(t)
	ls, err := e.m.Listen(id)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	ports, _ := sandbox.PortMap(testUsers)
	if err := e.m.SetUserPorts(sNS, ports); err != nil {
		t.Fatal(err)
	}
	// Installing again replaces the table (a change of the users).
	if err := e.m.SetUserPorts(sNS, ports); err != nil {
		t.Fatal(err)
	}
	alice, bob := uint32(2001), uint32(2002)
	other := uint32(1000)
	for _, c := range []struct {
		name string
		uid  *uint32
		bind int
		want string
	}{
		{"alice", &alice, 0, "alice"},
		{"bob", &bob, 0, "bob"},
		{"a uid without a range", &other, 0, ""},
		{"host root (unmapped)", nil, 0, ""},
		{"bob on a port of alice's", &bob, int(ports[0].Lo) + 3, "bob"},
		{"bob on a default port", &bob, int(sandbox.DefaultPorts.Lo) + 3, "bob"},
		{"alice on her own port", &alice, int(ports[0].Lo) + 5, "alice"},
		{"root on a port of bob's", nil, int(ports[1].Lo) + 3, ""},
	} {
		port := dialAs(t, sNS, ls.Proxy, c.uid, c.bind)
		user, known := sandbox.UserOf(ports, uint16(port))
		if !known || user != c.want {
			t.Errorf("%s: source port %d is %q (known %v), want %q", c.name, port, user, known, c.want)
		}
		if c.name == "alice on her own port" && port != c.bind {
			t.Errorf("alice's own port %d was rewritten to %d", c.bind, port)
		}
	}
}

// TestUserPortsRefusedOutsideS: the table only goes into a sandbox's namespace, never the
// host's.
func TestUserPortsRefusedOutsideS(t *testing.T) {
	e := newEnv(t)
	err := e.m.SetUserPorts("/proc/self/ns/net", nil)
	if err == nil || !strings.Contains(err.Error(), "host's network namespace") {
		t.Errorf("host namespace: %v", err)
	}
}

// BenchmarkUserPortsConnect: connection setup from S to the gateway's proxy listener
// (connect, accept, close) in a sandbox without the per-user table (the baseline) and in
// one with it (8 users, the socket owned by the last one, so every rule before it is
// evaluated), alternating one connection each so both see the same load. It reports the
// median of each and their ratio.
func BenchmarkUserPortsConnect(b *testing.B) {
	e := newEnv(b)
	var users []sandbox.User
	for i := range 8 {
		users = append(users, sandbox.User{Name: "u" + string(rune('a'+i)), UID: uint32(2001 + i)})
	}
	ports, _ := sandbox.PortMap(users)
	// A dialer per sandbox: a goroutine on a thread in its S, owning sockets as the last
	// user, timing one connection per request.
	dialer := func(withTable bool) chan chan time.Duration {
		id, sNS := e.setup(b)
		ls, err := e.m.Listen(id)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ls.Close() })
		if withTable {
			if err := e.m.SetUserPorts(sNS, ports); err != nil {
				b.Fatal(err)
			}
		}
		go func() {
			for {
				c, err := ls.Proxy.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		f, err := linux.OpenNetNS(sNS)
		if err != nil {
			b.Fatal(err)
		}
		reqs := make(chan chan time.Duration)
		go func() {
			defer f.Close()
			_ = linux.RunInNetNS(f, func() error {
				unix.Setfsuid(int(testIDs.Host + 2008))
				defer unix.Setfsuid(0)
				for r := range reqs {
					t0 := time.Now()
					c, err := net.Dial("tcp4", "198.18.0.1:15001")
					if err != nil {
						close(r)
						continue
					}
					_ = c.(*net.TCPConn).SetLinger(0)
					c.Close()
					r <- time.Since(t0)
				}
				return nil
			})
		}()
		b.Cleanup(func() { close(reqs) })
		return reqs
	}
	plain, peruser := dialer(false), dialer(true)
	once := func(d chan chan time.Duration) time.Duration {
		r := make(chan time.Duration, 1)
		d <- r
		v, ok := <-r
		if !ok {
			b.Fatal("dial failed")
		}
		return v
	}
	var tp, tu []time.Duration
	for b.Loop() {
		tp = append(tp, once(plain))
		tu = append(tu, once(peruser))
	}
	mp, mu := median(tp), median(tu)
	b.ReportMetric(float64(mp.Nanoseconds()), "plain-median-ns")
	b.ReportMetric(float64(mu.Nanoseconds()), "peruser-median-ns")
	b.ReportMetric(float64(mu)/float64(mp), "ratio")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
