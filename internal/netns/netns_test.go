package netns

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
)

// Test namespaces map onto a host id range no sandbox slot uses.
var testIDs = linux.IDRange{Host: 0x7f000000, Size: 65536}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
}

func newID(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return "sb-" + hex.EncodeToString(b)
}

// env is a run directory with a Manager, checked for leftovers when the test ends.
type env struct {
	runDir    string
	m         *Manager
	hostLinks []string
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	requireRoot(tb)
	e := &env{runDir: tb.TempDir()}
	e.m = New(e.runDir, nil)
	e.hostLinks = hostLinkNames(tb)
	tb.Cleanup(func() {
		e.m.Close()
		// Leftover mounts would make TempDir's removal fail: report them, then clear them.
		if mps := mountsUnder(tb, e.runDir); len(mps) > 0 {
			tb.Errorf("mounts left under the run directory: %v", mps)
			for _, mp := range slices.Backward(mps) {
				_ = unix.Unmount(mp, unix.MNT_DETACH)
			}
		}
		if got := hostLinkNames(tb); !slices.Equal(got, e.hostLinks) {
			tb.Errorf("host links changed: before %v, after %v", e.hostLinks, got)
		}
		checkThreads(tb)
	})
	return e
}

// sandboxNS creates the sandbox namespace S of id the way the daemon does, at
// <runDir>/sandboxes/<id>/netns, removed when the test ends.
func (e *env) sandboxNS(tb testing.TB, id string) string {
	tb.Helper()
	dir := filepath.Join(e.runDir, "sandboxes", id)
	files := linux.NamespaceFiles{User: filepath.Join(dir, "userns"), Net: filepath.Join(dir, "netns")}
	if err := linux.CreateUserAndNetNS(files, testIDs, linux.OwnerRange); err != nil {
		tb.Fatalf("creating sandbox namespaces: %v", err)
	}
	tb.Cleanup(func() {
		_ = linux.UnmountFile(files.Net)
		_ = linux.UnmountFile(files.User)
	})
	return files.Net
}

// setup creates S for a new sandbox and sets its network up.
func (e *env) setup(tb testing.TB) (id, sandboxNS string) {
	tb.Helper()
	id = newID(tb)
	sandboxNS = e.sandboxNS(tb, id)
	if err := e.m.Setup(context.Background(), id, sandboxNS); err != nil {
		tb.Fatalf("Setup: %v", err)
	}
	tb.Cleanup(func() { _ = e.m.Teardown(context.Background(), id) })
	return id, sandboxNS
}

// inNS runs fn on a thread inside the network namespace pinned at path.
func inNS(tb testing.TB, path string, fn func() error) {
	tb.Helper()
	f, err := linux.OpenNetNS(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := linux.RunInNetNS(f, fn); err != nil {
		tb.Fatalf("in %s: %v", path, err)
	}
}

// handle returns a netlink handle in the namespace at path.
func handle(tb testing.TB, path string) *netlink.Handle {
	tb.Helper()
	var h *netlink.Handle
	inNS(tb, path, func() (err error) {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	tb.Cleanup(h.Close)
	return h
}

// echoServer listens on addr inside the namespace at path and echoes each connection.
func echoServer(tb testing.TB, path, addr string) net.Listener {
	tb.Helper()
	var ln net.Listener
	inNS(tb, path, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln
}

// hostLinkNames lists the veths of the host namespace (other kinds of link may come and go
// with other packages' tests running alongside).
func hostLinkNames(tb testing.TB) []string {
	tb.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, l := range links {
		if l.Type() == "veth" {
			names = append(names, l.Attrs().Name)
		}
	}
	slices.Sort(names)
	return names
}

// mountsUnder lists the mount points at or below dir from /proc/self/mountinfo.
func mountsUnder(tb testing.TB, dir string) []string {
	tb.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// checkThreads asserts that every thread of the process is in the process's network
// namespace: nothing was left behind in G or S.
func checkThreads(tb testing.TB) {
	tb.Helper()
	want, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		tb.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		tb.Fatal(err)
	}
	for _, t := range tasks {
		got, err := os.Readlink("/proc/self/task/" + t.Name() + "/ns/net")
		if err != nil {
			continue // the thread exited
		}
		if got != want {
			tb.Errorf("thread %s is in network namespace %s, want %s", t.Name(), got, want)
		}
	}
}

func nsInode(tb testing.TB, path string) uint64 {
	tb.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		tb.Fatal(err)
	}
	return st.Ino
}

func exchange(tb testing.TB, c net.Conn, msg string) {
	tb.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		tb.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		tb.Fatalf("read: %v", err)
	}
	if string(buf) != msg {
		tb.Fatalf("echo = %q, want %q", buf, msg)
	}
}

func TestSetupDialTeardown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, sNS := e.setup(t)
	ln := echoServer(t, sNS, "0.0.0.0:0")
	port := ln.Addr().(*net.TCPAddr).Port

	c, err := e.m.DialSandbox(ctx, id, port)
	if err != nil {
		t.Fatalf("DialSandbox: %v", err)
	}
	if got, want := c.RemoteAddr().String(), fmt.Sprintf("198.18.0.2:%d", port); got != want {
		t.Errorf("RemoteAddr = %s, want %s", got, want)
	}
	if got := c.LocalAddr().(*net.TCPAddr).IP.String(); got != "198.18.0.1" {
		t.Errorf("LocalAddr = %s, want 198.18.0.1", got)
	}
	exchange(t, c, "hello, sandbox")
	c.Close()

	gw := e.m.gwPath(id)
	if !linux.IsMountPoint(gw) {
		t.Fatalf("%s is not a mount point", gw)
	}
	if err := e.m.Teardown(ctx, id); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if _, err := os.Lstat(gw); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists: %v", gw, err)
	}
	if mps := mountsUnder(t, gw); len(mps) > 0 {
		t.Errorf("still mounted: %v", mps)
	}
	hs := handle(t, sNS)
	if l, err := hs.LinkByName(SandboxLink); err == nil {
		t.Errorf("%s still in the sandbox namespace: %+v", SandboxLink, l.Attrs())
	}
	if err := e.m.Teardown(ctx, id); err != nil {
		t.Errorf("second Teardown: %v", err)
	}
	if _, err := e.m.DialSandbox(ctx, id, port); !errdefs.IsNotFound(err) {
		t.Errorf("DialSandbox after Teardown = %v, want ErrNotFound", err)
	}
}

// TestSandboxIsolated checks that nothing leaves S: one default route, to G, no IPv6, a
// gateway that forwards nothing, and host addresses unreachable while no egress listener
// serves (the firewall fails closed). Every packet sent here stays on this machine:
// the only destinations are G and the host's own addresses.
func TestSandboxIsolated(t *testing.T) {
	e := newEnv(t)
	id, sNS := e.setup(t)
	gwNS := e.m.gwPath(id)
	hs, hg := handle(t, sNS), handle(t, gwNS)

	routes, err := hs.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			if !r.Gw.Equal(GatewayAddr.AsSlice()) {
				t.Errorf("sandbox's default route is not via the gateway: %s", r)
			}
			continue
		}
		if r.Table == unix.RT_TABLE_MAIN && r.Dst.String() != "198.18.0.0/30" {
			t.Errorf("sandbox has an unexpected route: %s", r)
		}
	}
	for name, h := range map[string]*netlink.Handle{"sandbox": hs, "gateway": hg} {
		links, err := h.LinkList()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range links {
			names = append(names, l.Attrs().Name)
			if l.Attrs().Flags&net.FlagUp == 0 {
				t.Errorf("%s: %s is down", name, l.Attrs().Name)
			}
		}
		slices.Sort(names)
		want := []string{SandboxLink, "lo"}
		if name == "gateway" {
			want = []string{"lo", GatewayLink}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s links = %v, want %v", name, names, want)
		}
		addrs, err := h.AddrList(nil, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if a.LinkIndex != 1 { // lo keeps ::1 in S; nothing else may have IPv6
				t.Errorf("%s: IPv6 address %s on link %d", name, a.IPNet, a.LinkIndex)
			}
		}
	}
	inNS(t, gwNS, func() error {
		for _, k := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/" + GatewayLink + "/forwarding", "net/ipv6/conf/" + GatewayLink + "/disable_ipv6"} {
			v, err := readSysctl(k)
			if err != nil {
				return err
			}
			want := "0"
			if strings.Contains(k, "ipv6") {
				want = "1"
			}
			if v != want {
				t.Errorf("gateway %s = %s, want %s", k, v, want)
			}
		}
		return nil
	})

	inNS(t, sNS, func() error {
		if v, err := readSysctl("net/ipv6/conf/" + SandboxLink + "/disable_ipv6"); err != nil || v != "1" {
			t.Errorf("sandbox %s disable_ipv6 = %q (%v), want 1", SandboxLink, v, err)
		}
		return nil
	})

	// Something to reach in the host namespace, on every address.
	hostLn, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := hostLn.Accept(); err == nil {
			accepted <- c
		}
	}()
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	var targets []string
	hostAddrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range hostAddrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
			targets = append(targets, netip.AddrPortFrom(ip.Unmap(), uint16(hostPort)).String())
		}
	}
	t.Logf("host targets: %v", targets)

	attempt := func(phase string) {
		inNS(t, sNS, func() error {
			d := net.Dialer{Timeout: 300 * time.Millisecond}
			// Nothing listens in G.
			if c, err := d.Dial("tcp", "198.18.0.1:80"); err == nil {
				c.Close()
				t.Errorf("%s: connected to the gateway", phase)
			}
			u, err := d.Dial("udp", "198.18.0.1:53")
			if err != nil {
				return err
			}
			defer u.Close()
			if _, err := u.Write([]byte("ping")); err != nil {
				return err
			}
			_ = u.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if n, err := u.Read(make([]byte, 64)); err == nil {
				t.Errorf("%s: UDP to the gateway got %d bytes back", phase, n)
			}
			for _, addr := range targets {
				c, err := d.Dial("tcp", addr)
				if err == nil {
					c.Close()
					t.Errorf("%s: sandbox reached host address %s", phase, addr)
				} else {
					t.Logf("%s: %s: %v", phase, addr, err)
				}
			}
			return nil
		})
	}
	attempt("default route via the gateway, no egress listeners")
	select {
	case c := <-accepted:
		c.Close()
		t.Errorf("the host listener accepted a connection from %s", c.RemoteAddr())
	default:
	}
}

func TestSetupIdempotent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, sNS := e.setup(t)
	gw := e.m.gwPath(id)
	ino := nsInode(t, gw)
	if err := e.m.Setup(ctx, id, sNS); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	if got := nsInode(t, gw); got != ino {
		t.Errorf("second Setup replaced the gateway namespace")
	}
	ln := echoServer(t, sNS, "198.18.0.2:0")
	port := ln.Addr().(*net.TCPAddr).Port

	// A broken setup (the pair deleted behind our back) is redone, and the cached
	// gateway of the old one is not used.
	c, err := e.m.DialSandbox(ctx, id, port)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	hg := handle(t, gw)
	l, err := hg.LinkByName(GatewayLink)
	if err != nil {
		t.Fatal(err)
	}
	if err := hg.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Setup(ctx, id, sNS); err != nil {
		t.Fatalf("Setup after breakage: %v", err)
	}
	if got := nsInode(t, gw); got == ino {
		t.Errorf("broken setup was not redone")
	}
	c, err = e.m.DialSandbox(ctx, id, port)
	if err != nil {
		t.Fatalf("DialSandbox after redo: %v", err)
	}
	exchange(t, c, "again")
	c.Close()

	// Setup against another sandbox namespace moves the sandbox over to it.
	id2 := newID(t)
	sNS2 := e.sandboxNS(t, id2)
	if err := e.m.Setup(ctx, id, sNS2); err != nil {
		t.Fatalf("Setup with another namespace: %v", err)
	}
	if _, err := handle(t, sNS).LinkByName(SandboxLink); err == nil {
		t.Errorf("old sandbox namespace still has %s", SandboxLink)
	}
	if _, err := handle(t, sNS2).LinkByName(SandboxLink); err != nil {
		t.Errorf("new sandbox namespace: %v", err)
	}
}

func TestSetupRollback(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := newID(t)
	sNS := e.sandboxNS(t, id)

	// S already holds an eth0: the pair cannot be made, and G must go again.
	hs := handle(t, sNS)
	if err := hs.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: SandboxLink}, PeerName: "other"}); err != nil {
		t.Fatal(err)
	}
	err := e.m.Setup(ctx, id, sNS)
	if err == nil {
		t.Fatal("Setup succeeded with eth0 taken")
	}
	t.Logf("Setup: %v", err)
	if _, err := os.Lstat(e.m.gwPath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gateway namespace left after a failed Setup: %v", err)
	}
	if mps := mountsUnder(t, e.m.gwPath(id)); len(mps) > 0 {
		t.Errorf("mounts left after a failed Setup: %v", mps)
	}
	// The sandbox's own links are not ours to delete.
	if _, err := hs.LinkByName(SandboxLink); err != nil {
		t.Errorf("Setup's rollback deleted the sandbox's %s: %v", SandboxLink, err)
	}

	if err := e.m.Setup(ctx, newID(t), filepath.Join(e.runDir, "nope")); !errdefs.IsNotFound(err) {
		t.Errorf("Setup with a missing namespace = %v, want ErrNotFound", err)
	}
	plain := filepath.Join(e.runDir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Setup(ctx, newID(t), plain); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Setup with a plain file = %v, want ErrInvalidArgument", err)
	}
	if err := e.m.Setup(ctx, newID(t), "/proc/self/ns/user"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Setup with a user namespace = %v, want ErrInvalidArgument", err)
	}
	if err := e.m.Setup(ctx, newID(t), "/proc/self/ns/net"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Setup with the host's namespace = %v, want ErrInvalidArgument", err)
	}
}

func TestInvalidIDs(t *testing.T) {
	m := New(t.TempDir(), nil)
	ctx := context.Background()
	for _, id := range []string{"", ".", "..", "../x", "a/b", "/abs", "x\x00"} {
		if err := m.Setup(ctx, id, "/nonexistent"); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Setup(%q) = %v", id, err)
		}
		if err := m.Teardown(ctx, id); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Teardown(%q) = %v", id, err)
		}
		if _, err := m.DialSandbox(ctx, id, 80); !errdefs.IsInvalidArgument(err) {
			t.Errorf("DialSandbox(%q) = %v", id, err)
		}
	}
}

// TestTeardownAfterCrash tears down with a Manager that did not do the Setup (as after a
// daemon restart), while a connection made by the first still holds G open.
func TestTeardownAfterCrash(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, sNS := e.setup(t)
	ln := echoServer(t, sNS, "198.18.0.2:0")
	port := ln.Addr().(*net.TCPAddr).Port
	open, err := e.m.DialSandbox(ctx, id, port)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()

	restarted := New(e.runDir, nil)
	defer restarted.Close()
	c, err := restarted.DialSandbox(ctx, id, port)
	if err != nil {
		t.Fatalf("DialSandbox from a new Manager: %v", err)
	}
	exchange(t, c, "still there")
	c.Close()
	if err := restarted.Teardown(ctx, id); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	// The open socket keeps G alive, but the pair is gone.
	if _, err := handle(t, sNS).LinkByName(SandboxLink); err == nil {
		t.Errorf("%s survived Teardown", SandboxLink)
	}
	if _, err := os.Lstat(e.m.gwPath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gateway namespace file: %v", err)
	}
	// The first Manager's cached gateway still points at the dead G: it cannot reach
	// the sandbox. (In the daemon only one Manager exists.)
	open.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := io.WriteString(open, "x"); err == nil {
		if _, err := open.Read(make([]byte, 1)); err == nil {
			t.Errorf("old connection still works after Teardown")
		}
	}
	// An unmounted pin file left by a crash mid-Setup is removed too.
	gw := e.m.gwPath(id)
	if err := os.WriteFile(gw, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Teardown(ctx, id); err != nil {
		t.Fatalf("Teardown of a stale pin file: %v", err)
	}
	if _, err := os.Lstat(gw); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale pin file: %v", err)
	}
}

func TestDialErrors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.m.DialSandbox(ctx, newID(t), 80); !errdefs.IsNotFound(err) {
		t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
	}
	id, sNS := e.setup(t)
	for _, p := range []int{0, -1, 65536} {
		if _, err := e.m.DialSandbox(ctx, id, p); !errdefs.IsInvalidArgument(err) {
			t.Errorf("port %d: %v, want ErrInvalidArgument", p, err)
		}
	}
	_, err := e.m.DialSandbox(ctx, id, 1)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("closed port: %v, want ECONNREFUSED", err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("error %v is not a *net.OpError", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.m.DialSandbox(canceled, id, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}

	// With eth0 down, SYNs go nowhere: the dial waits until the context ends.
	ln := echoServer(t, sNS, "198.18.0.2:0")
	port := ln.Addr().(*net.TCPAddr).Port
	hs := handle(t, sNS)
	eth0, err := hs.LinkByName(SandboxLink)
	if err != nil {
		t.Fatal(err)
	}
	if err := hs.LinkSetDown(eth0); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = e.m.DialSandbox(tctx, id, port)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial to an unreachable sandbox: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("dial took %v after a 200ms deadline", d)
	}
	cctx, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel2)
	if _, err := e.m.DialSandbox(cctx, id, port); !errors.Is(err, context.Canceled) {
		t.Errorf("dial canceled midway: %v, want Canceled", err)
	}
}

// TestFirstDialFast: Setup returns only once the link passes traffic. Before that the
// first SYN is dropped and a dial takes the 1s SYN retransmission timeout.
func TestFirstDialFast(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for range 10 {
		id := newID(t)
		sNS := e.sandboxNS(t, id)
		ln := echoServer(t, sNS, "0.0.0.0:0") // listening before the link exists
		if err := e.m.Setup(ctx, id, sNS); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		c, err := e.m.DialSandbox(ctx, id, ln.Addr().(*net.TCPAddr).Port)
		if err != nil {
			t.Fatal(err)
		}
		exchange(t, c, "first")
		c.Close()
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("first dial and exchange took %v", d)
		}
		if err := e.m.Teardown(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDialDuringTeardown races dials with Teardown: every dial either works or fails
// cleanly, and none runs in another sandbox's namespace.
func TestDialDuringTeardown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, sNS := e.setup(t)
	ln := echoServer(t, sNS, "198.18.0.2:0")
	port := ln.Addr().(*net.TCPAddr).Port
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				c, err := e.m.DialSandbox(dctx, id, port)
				cancel()
				if err == nil {
					c.Close()
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := e.m.Teardown(ctx, id); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	if _, err := e.m.DialSandbox(ctx, id, port); !errdefs.IsNotFound(err) {
		t.Errorf("after Teardown: %v", err)
	}
}

func TestParallel(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const n = 20
	ids := make([]string, n)
	nss := make([]string, n)
	for i := range n {
		ids[i] = newID(t)
		nss[i] = e.sandboxNS(t, ids[i])
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			if err := e.m.Setup(ctx, ids[i], nss[i]); err != nil {
				errs[i] = fmt.Errorf("Setup: %w", err)
				return
			}
			var ln net.Listener
			f, err := linux.OpenNetNS(nss[i])
			if err != nil {
				errs[i] = err
				return
			}
			defer f.Close()
			if err := linux.RunInNetNS(f, func() (err error) {
				ln, err = net.Listen("tcp4", "198.18.0.2:7000")
				return err
			}); err != nil {
				errs[i] = err
				return
			}
			defer ln.Close()
			go func() {
				if c, err := ln.Accept(); err == nil {
					fmt.Fprint(c, ids[i])
					c.Close()
				}
			}()
			c, err := e.m.DialSandbox(ctx, ids[i], 7000)
			if err != nil {
				errs[i] = fmt.Errorf("DialSandbox: %w", err)
				return
			}
			got, err := io.ReadAll(c)
			c.Close()
			if err != nil || string(got) != ids[i] {
				errs[i] = fmt.Errorf("reached %q (%v), want sandbox %s", got, err, ids[i])
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("sandbox %d: %v", i, err)
		}
	}
	if leaks, err := e.m.Leaks(ids); err != nil || len(leaks) > 0 {
		t.Errorf("Leaks with all known = %v, %v", leaks, err)
	}
	for i := range n {
		wg.Go(func() {
			if err := e.m.Teardown(ctx, ids[i]); err != nil {
				t.Errorf("Teardown %s: %v", ids[i], err)
			}
		})
	}
	wg.Wait()
	if leaks, err := e.m.Leaks(nil); err != nil || len(leaks) > 0 {
		t.Errorf("Leaks after Teardown = %v, %v", leaks, err)
	}
	for i := range n {
		if _, err := os.Lstat(e.m.gwPath(ids[i])); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v", e.m.gwPath(ids[i]), err)
		}
		if mps := mountsUnder(t, e.m.gwPath(ids[i])); len(mps) > 0 {
			t.Errorf("still mounted: %v", mps)
		}
	}
}

func TestLeaks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id1, _ := e.setup(t)
	id2, s2 := e.setup(t)
	leaks, err := e.m.Leaks([]string{id1})
	if err != nil {
		t.Fatal(err)
	}
	if len(leaks) != 1 || !strings.Contains(leaks[0], id2) {
		t.Errorf("Leaks = %q, want one naming %s", leaks, id2)
	}

	// A link in the host namespace joined to a sandbox: the worst kind of leak.
	const name = "moatleaktest0"
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "leak0"}
	f, err := linux.OpenNetNS(s2)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	veth.PeerNamespace = netlink.NsFd(f.Fd())
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	}()
	leaks, err = e.m.Leaks([]string{id1, id2})
	if err != nil {
		t.Fatal(err)
	}
	if len(leaks) != 1 || !strings.Contains(leaks[0], name) {
		t.Errorf("Leaks = %q, want one naming %s", leaks, name)
	}
	if l, err := netlink.LinkByName(name); err == nil {
		_ = netlink.LinkDel(l)
	}
	for _, id := range []string{id1, id2} {
		if err := e.m.Teardown(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if leaks, err := e.m.Leaks(nil); err != nil || len(leaks) > 0 {
		t.Errorf("Leaks after Teardown = %q, %v", leaks, err)
	}
}

func BenchmarkDialSandbox(b *testing.B) {
	e := newEnv(b)
	id, sNS := e.setup(b)
	var ln net.Listener
	inNS(b, sNS, func() (err error) {
		ln, err = net.Listen("tcp4", "198.18.0.2:0")
		return err
	})
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	ctx := context.Background()
	dial := func() {
		c, err := e.m.DialSandbox(ctx, id, port)
		if err != nil {
			b.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT: keep the ephemeral ports free
		c.Close()
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			dial()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				dial()
			}
		})
	})
	b.Run("socketOnly", func(b *testing.B) {
		for b.Loop() {
			var s *os.File
			if err := e.m.inGateway(id, func() (err error) {
				s, err = linux.NewTCPSocket(false)
				return err
			}); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
}

// BenchmarkDialLoopback is the baseline: a plain net.Dial to a loopback listener.
func BenchmarkDialLoopback(b *testing.B) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for b.Loop() {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
}

func BenchmarkSetupTeardown(b *testing.B) {
	e := newEnv(b)
	id := newID(b)
	sNS := e.sandboxNS(b, id)
	ctx := context.Background()
	for b.Loop() {
		if err := e.m.Setup(ctx, id, sNS); err != nil {
			b.Fatal(err)
		}
		if err := e.m.Teardown(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}
