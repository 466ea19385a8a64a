// Package netns plumbs each sandbox's network: a gateway network namespace G per sandbox,
// pinned at <runDir>/sandboxes/<id>/gwns, joined to the sandbox's namespace S by a veth pair
// (eth0 = 198.18.0.2/30 in S, veth0 = 198.18.0.1/30 in G). S's default route points at G;
// G forwards nothing, has no other interface, and its nftables firewall (firewall.go)
// redirects every TCP connection to the egress proxy and every DNS query to moat's DNS
// server, dropping all else; IPv6 is off on both ends. The daemon serves those listeners
// (Listen) and reaches services in the sandbox by dialling from a socket created in G
// (DialSandbox).
//
// Every kernel object is found again from the sandbox ID alone, so Teardown is idempotent
// and works after a daemon crash. Code that must run inside G does so through
// Manager.inGateway, on a thread that never returns to the scheduler in the wrong namespace.
package netns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

var _ sandbox.Network = (*Manager)(nil)

// The link between a sandbox and its gateway. Every sandbox uses the same addresses: they
// live in namespaces of their own and are never routed.
var (
	// GatewayAddr is G's end of the link (veth0).
	GatewayAddr = netip.MustParseAddr("198.18.0.1")
	// SandboxAddr is S's end of the link (eth0).
	SandboxAddr = netip.MustParseAddr("198.18.0.2")
)

const (
	linkPrefixLen = 30
	linkMTU       = 65520
	// SandboxLink and GatewayLink are the names of the veth ends in S and G.
	SandboxLink = "eth0"
	GatewayLink = "veth0"
	// DefaultRunDir is where sandbox files live unless New is told otherwise.
	DefaultRunDir = "/run/moat"
)

// Manager implements sandbox.Network. It is safe for concurrent use; operations on
// different sandboxes run in parallel, those on one sandbox are serialised.
type Manager struct {
	runDir string
	log    *slog.Logger

	locksMu sync.Mutex
	locks   map[string]*idLock

	gwMu sync.RWMutex
	gw   map[string]*os.File // open gateway namespaces, by sandbox ID
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

// New returns a Manager keeping its files under runDir (DefaultRunDir if empty). A nil log
// discards messages.
func New(runDir string, log *slog.Logger) *Manager {
	if runDir == "" {
		runDir = DefaultRunDir
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{runDir: runDir, log: log, locks: map[string]*idLock{}, gw: map[string]*os.File{}}
}

// Close releases the cached namespace descriptors. The namespaces stay.
func (m *Manager) Close() error {
	m.gwMu.Lock()
	defer m.gwMu.Unlock()
	for id, f := range m.gw {
		f.Close()
		delete(m.gw, id)
	}
	return nil
}

// gwPath is where G of sandbox id is pinned.
func (m *Manager) gwPath(id string) string {
	return filepath.Join(m.runDir, "sandboxes", id, "gwns")
}

// checkID rejects IDs that are not a single path element: they name files.
func checkID(id string) error {
	if id == "" || id == "." || strings.ContainsAny(id, "/\x00") || !filepath.IsLocal(id) {
		return fmt.Errorf("sandbox id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// lock serialises Setup, Teardown and gateway lookups of one sandbox.
func (m *Manager) lock(id string) (unlock func()) {
	m.locksMu.Lock()
	l := m.locks[id]
	if l == nil {
		l = &idLock{}
		m.locks[id] = l
	}
	l.refs++
	m.locksMu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		m.locksMu.Lock()
		if l.refs--; l.refs == 0 {
			delete(m.locks, id)
		}
		m.locksMu.Unlock()
	}
}

// Setup creates G for sandbox id, pinned at <runDir>/sandboxes/<id>/gwns, and the veth pair
// between G and the network namespace pinned at sandboxNS (which must exist; the caller
// owns it). It is idempotent: a complete setup joined to the same sandboxNS is left alone,
// and a partial one (from a crash or an earlier failure) is removed and made again. On
// error nothing of what Setup makes remains.
func (m *Manager) Setup(ctx context.Context, id string, sandboxNS string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock := m.lock(id)
	defer unlock()
	s, err := linux.OpenNetNS(sandboxNS)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sandbox network namespace %s: %w", sandboxNS, errdefs.ErrNotFound)
	} else if errors.Is(err, linux.ErrNotNetNS) {
		return fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	} else if err != nil {
		return err
	}
	defer s.Close()
	if host, err := isHostNetNS(s); err != nil {
		return err
	} else if host {
		return fmt.Errorf("%s is the host's network namespace: %w", sandboxNS, errdefs.ErrInvalidArgument)
	}
	if err := m.check(id, s); err == nil {
		m.log.Debug("network already set up", "sandbox", id)
		return nil
	} else if !errors.Is(err, errNotSetUp) {
		m.log.Info("redoing incomplete network setup", "sandbox", id, "reason", err)
	}
	if err := m.teardown(id); err != nil {
		return fmt.Errorf("setting up network of sandbox %s: clearing a previous setup: %w", id, err)
	}
	if err := m.setup(ctx, id, s); err != nil {
		if terr := m.teardown(id); terr != nil {
			m.log.Error("rolling back network setup", "sandbox", id, "err", terr)
			err = errors.Join(err, fmt.Errorf("rolling back: %w", terr))
		}
		return fmt.Errorf("setting up network of sandbox %s: %w", id, err)
	}
	m.log.Debug("network set up", "sandbox", id)
	return nil
}

// setup makes G and the veth pair; the caller rolls back on error.
func (m *Manager) setup(ctx context.Context, id string, s *os.File) error {
	path := m.gwPath(id)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	var hg *netlink.Handle
	err := linux.CreateNetNS(path, func() error {
		// A new namespace inherits the IPv4 settings of the initial one
		// (net.core.devconf_inherit_init_net=0), so forwarding may start on: set it.
		if err := writeSysctl("net/ipv4/ip_forward", "0"); err != nil {
			return err
		}
		if v, err := readSysctl("net/ipv4/ip_forward"); err != nil || v != "0" {
			return fmt.Errorf("ip_forward in the gateway namespace is %q (%v), want 0", v, err)
		}
		// Links created from now on (veth0) are born without IPv6.
		for _, name := range []string{"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"} {
			if err := writeIPv6Sysctl(name, "1"); err != nil {
				return err
			}
		}
		var err error
		if hg, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
			return fmt.Errorf("netlink: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("creating gateway namespace: %w", err)
	}
	defer hg.Close()
	if err := linkUp(hg, "lo"); err != nil {
		return fmt.Errorf("gateway namespace: %w", err)
	}
	// Both ends are created directly in their namespaces: nothing ever appears in the host
	// namespace, so a crash at any point leaves nothing that G's removal does not remove.
	// The link never leaves the host: a loopback-sized MTU lets bulk transfers through
	// the proxy move 64 KiB segments instead of 1500-byte ones.
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: GatewayLink, MTU: linkMTU},
		PeerName:      SandboxLink,
		PeerNamespace: netlink.NsFd(s.Fd()),
		PeerMTU:       linkMTU,
	}
	if err := hg.LinkAdd(veth); err != nil {
		return fmt.Errorf("creating veth pair: %w", err)
	}
	var hs *netlink.Handle
	err = linux.RunInNetNS(s, func() error {
		// eth0 is down and so has no IPv6 address yet; keep it so.
		if err := writeIPv6Sysctl("net/ipv6/conf/"+SandboxLink+"/disable_ipv6", "1"); err != nil {
			return err
		}
		var err error
		hs, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		return fmt.Errorf("sandbox namespace: %w", err)
	}
	defer hs.Close()
	if err := configureLink(hs, SandboxLink, SandboxAddr); err != nil {
		return fmt.Errorf("sandbox namespace: %w", err)
	}
	if err := linkUp(hs, "lo"); err != nil {
		return fmt.Errorf("sandbox namespace: %w", err)
	}
	// Every destination is "via the gateway": G's firewall hands each connection to the
	// egress proxy or DNS server and drops the rest, so the route leads nowhere else.
	if err := addDefaultRoute(hs); err != nil {
		return fmt.Errorf("sandbox namespace: %w", err)
	}
	if err := configureLink(hg, GatewayLink, GatewayAddr); err != nil {
		return fmt.Errorf("gateway namespace: %w", err)
	}
	g, err := linux.OpenNetNS(path)
	if err != nil {
		return fmt.Errorf("gateway namespace: %w", err)
	}
	defer g.Close()
	if err := installFirewall(g); err != nil {
		return fmt.Errorf("gateway namespace: %w", err)
	}
	// Until the kernel's link watcher has seen the carrier, both ends drop every packet
	// (their qdisc is noop): a dial right now would lose its SYN and wait a second for
	// the retransmission. Return only when both ends pass traffic.
	for _, end := range []struct {
		h    *netlink.Handle
		name string
	}{{hs, SandboxLink}, {hg, GatewayLink}} {
		if err := waitRunning(ctx, end.h, end.name); err != nil {
			return err
		}
	}
	return nil
}

// linkTimeout bounds the wait for a new link to pass traffic.
const linkTimeout = 5 * time.Second

// waitRunning waits until link name is operationally up with its qdisc attached, for at
// most linkTimeout.
func waitRunning(ctx context.Context, h *netlink.Handle, name string) error {
	ctx, cancel := context.WithTimeout(ctx, linkTimeout)
	defer cancel()
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 10*time.Millisecond) {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			// The noop qdisc of an inactive link is not listed; noqueue (veth) is.
			qs, err := h.QdiscList(l)
			if err != nil {
				return fmt.Errorf("%s: listing qdiscs: %w", name, err)
			}
			if len(qs) > 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to run (operstate %s): %w", name, l.Attrs().OperState, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// configureLink gives link name its /30 address and brings it up.
func configureLink(h *netlink.Handle, name string, addr netip.Addr) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(linkPrefixLen, 32)}}
	if err := h.AddrAdd(l, a); err != nil {
		return fmt.Errorf("adding %s to %s: %w", a.IPNet, name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("bringing %s up: %w", name, err)
	}
	return nil
}

func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("bringing %s up: %w", name, err)
	}
	return nil
}

func addDefaultRoute(h *netlink.Handle) error {
	l, err := h.LinkByName(SandboxLink)
	if err != nil {
		return fmt.Errorf("%s: %w", SandboxLink, err)
	}
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: GatewayAddr.AsSlice(), Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}
	if err := h.RouteAdd(r); err != nil {
		return fmt.Errorf("adding the default route via %s: %w", GatewayAddr, err)
	}
	return nil
}

// errNotSetUp: check found no gateway namespace at all.
var errNotSetUp = errors.New("not set up")

// check reports whether sandbox id's network is completely set up and joined to s.
func (m *Manager) check(id string, s *os.File) error {
	g, err := linux.OpenNetNS(m.gwPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return errNotSetUp
	} else if err != nil {
		return err
	}
	defer g.Close()
	hg, err := handleIn(g)
	if err != nil {
		return err
	}
	defer hg.Close()
	hs, err := handleIn(s)
	if err != nil {
		return err
	}
	defer hs.Close()
	gl, err := checkLink(hg, GatewayLink, GatewayAddr)
	if err != nil {
		return fmt.Errorf("gateway namespace: %w", err)
	}
	sl, err := checkLink(hs, SandboxLink, SandboxAddr)
	if err != nil {
		return fmt.Errorf("sandbox namespace: %w", err)
	}
	// Interface indexes are per namespace: also check that veth0's peer lives in s.
	nsid, err := hg.GetNetNsIdByFd(int(s.Fd()))
	if err != nil {
		return fmt.Errorf("namespace id of the sandbox namespace: %w", err)
	}
	if ga, sa := gl.Attrs(), sl.Attrs(); ga.ParentIndex != sa.Index || sa.ParentIndex != ga.Index || ga.NetNsID != nsid || nsid < 0 {
		return fmt.Errorf("%s and %s are not peers", GatewayLink, SandboxLink)
	}
	if err := checkFirewall(g); err != nil {
		return fmt.Errorf("gateway namespace: %w", err)
	}
	return nil
}

// checkLink verifies that name is an up veth carrying exactly addr/30.
func checkLink(h *netlink.Handle, name string, addr netip.Addr) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if _, ok := l.(*netlink.Veth); !ok {
		return nil, fmt.Errorf("%s is a %s, not a veth", name, l.Type())
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		return nil, fmt.Errorf("%s is down", name)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	want := netip.PrefixFrom(addr, linkPrefixLen)
	if len(addrs) != 1 || addrs[0].IPNet.String() != want.String() {
		return nil, fmt.Errorf("%s has addresses %v, want %s", name, addrs, want)
	}
	return l, nil
}

// Teardown deletes the veth pair of sandbox id and unpins its gateway namespace. It needs
// nothing but the ID, is idempotent and is not cut short by ctx. The sandbox namespace
// itself is left to its owner.
func (m *Manager) Teardown(_ context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	unlock := m.lock(id)
	defer unlock()
	if err := m.teardown(id); err != nil {
		return fmt.Errorf("tearing down network of sandbox %s: %w", id, err)
	}
	m.log.Debug("network torn down", "sandbox", id)
	return nil
}

// teardown is Teardown with the sandbox's lock held.
func (m *Manager) teardown(id string) error {
	m.forget(id)
	path := m.gwPath(id)
	g, err := linux.OpenNetNS(path)
	switch {
	case err == nil:
		// Sockets made in G (open connections) keep it alive after the unmount, and the
		// veth with it: delete the links explicitly. Deleting one end deletes the pair.
		derr := deleteLinks(g)
		g.Close()
		if derr != nil {
			return derr
		}
	case errors.Is(err, os.ErrNotExist):
		return nil
	case errors.Is(err, linux.ErrNotNetNS):
		// A pin file whose mount never happened (crash during Setup): just remove it.
	default:
		return err
	}
	return linux.UnmountFile(path)
}

// deleteLinks deletes every link of the namespace g but loopback.
func deleteLinks(g *os.File) error {
	h, err := handleIn(g)
	if err != nil {
		return err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("listing links of the gateway namespace: %w", err)
	}
	var errs []error
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", l.Attrs().Name, err))
		}
	}
	return errors.Join(errs...)
}

// DialSandbox connects to port on the sandbox's address, from a socket created in the
// sandbox's gateway namespace. It fails with errdefs.ErrNotFound when the sandbox has no
// network set up. It is on the path of every API call: past the first call it costs one
// trip of a locked thread into G (for socket(2)) and a connect.
func (m *Manager) DialSandbox(ctx context.Context, id string, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("port %d: %w", port, errdefs.ErrInvalidArgument)
	}
	var sock *os.File
	err := m.inGateway(id, func() (err error) {
		sock, err = linux.NewTCPSocket(false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dialling sandbox %s: %w", id, err)
	}
	c, err := linux.ConnectTCP(ctx, sock, netip.AddrPortFrom(SandboxAddr, uint16(port)))
	if err != nil {
		return nil, fmt.Errorf("dialling sandbox %s: %w", id, err)
	}
	return c, nil
}

// inGateway runs fn on a thread inside sandbox id's gateway namespace (see
// linux.RunInNetNS: sockets fn creates belong to G and may be used from anywhere). It fails
// with errdefs.ErrNotFound when the sandbox has no gateway namespace, including when
// Teardown runs concurrently.
func (m *Manager) inGateway(id string, fn func() error) error {
	g, err := m.gateway(id)
	if err != nil {
		return err
	}
	err = linux.RunInNetNS(g, fn)
	if errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("gateway namespace of sandbox %s was removed: %w", id, errdefs.ErrNotFound)
	}
	return err
}

// gateway returns the open gateway namespace of sandbox id, opening and caching it on
// first use. Teardown closes it; a caller still holding it then gets os.ErrClosed from
// linux.RunInNetNS, never another namespace.
func (m *Manager) gateway(id string) (*os.File, error) {
	m.gwMu.RLock()
	g := m.gw[id]
	m.gwMu.RUnlock()
	if g != nil {
		return g, nil
	}
	if err := checkID(id); err != nil {
		return nil, err
	}
	// Open under the sandbox's lock, so that a namespace being torn down is never cached.
	unlock := m.lock(id)
	defer unlock()
	m.gwMu.RLock()
	g = m.gw[id]
	m.gwMu.RUnlock()
	if g != nil {
		return g, nil
	}
	g, err := linux.OpenNetNS(m.gwPath(id))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, linux.ErrNotNetNS) {
		return nil, fmt.Errorf("network of sandbox %s: %w", id, errdefs.ErrNotFound)
	} else if err != nil {
		return nil, err
	}
	m.gwMu.Lock()
	m.gw[id] = g
	m.gwMu.Unlock()
	return g, nil
}

// forget closes and drops the cached gateway namespace of id.
func (m *Manager) forget(id string) {
	m.gwMu.Lock()
	g := m.gw[id]
	delete(m.gw, id)
	m.gwMu.Unlock()
	if g != nil {
		g.Close()
	}
}

// isHostNetNS reports whether ns is the network namespace of the calling thread (which,
// outside RunInNetNS, is the daemon's).
func isHostNetNS(ns *os.File) (bool, error) {
	a, err := ns.Stat()
	if err != nil {
		return false, err
	}
	b, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil {
		return false, err
	}
	return os.SameFile(a, b), nil
}

// handleIn opens a netlink handle bound to the network namespace ns.
func handleIn(ns *os.File) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := linux.RunInNetNS(ns, func() (err error) {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return h, nil
}

// writeSysctl sets /proc/sys/<name> of the calling thread's network namespace.
func writeSysctl(name, value string) error {
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0); err != nil {
		return fmt.Errorf("sysctl %s: %w", name, err)
	}
	return nil
}

func readSysctl(name string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + name)
	return strings.TrimSpace(string(b)), err
}

// writeIPv6Sysctl is writeSysctl where a kernel without IPv6 is not an error.
func writeIPv6Sysctl(name, value string) error {
	if _, err := os.Stat("/proc/sys/net/ipv6"); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return writeSysctl(name, value)
}

// Listeners are the egress sockets of one sandbox, created in its gateway namespace on
// GatewayAddr: where the firewall sends the sandbox's TCP connections and DNS queries.
type Listeners struct {
	Proxy  net.Listener   // TCP, ProxyPort
	DNSTCP net.Listener   // TCP, DNSPort
	DNSUDP net.PacketConn // UDP, DNSPort
}

// Close closes those that are open.
func (l *Listeners) Close() error {
	var errs []error
	if l.Proxy != nil {
		errs = append(errs, l.Proxy.Close())
	}
	if l.DNSTCP != nil {
		errs = append(errs, l.DNSTCP.Close())
	}
	if l.DNSUDP != nil {
		errs = append(errs, l.DNSUDP.Close())
	}
	return errors.Join(errs...)
}

// Listen creates the egress listeners of sandbox id inside its gateway namespace. The
// caller serves them from any goroutine and closes them.
func (m *Manager) Listen(id string) (*Listeners, error) {
	var l Listeners
	err := m.inGateway(id, func() error {
		// net.Listen makes its socket on the calling thread, which is in G. Accepted
		// connections get no TCP keepalive (the proxy and DNS servers end idle ones on
		// their own): four setsockopt calls fewer per connection.
		var err error
		gw := GatewayAddr.String()
		lc := net.ListenConfig{KeepAlive: -1}
		if l.Proxy, err = lc.Listen(context.Background(), "tcp4", net.JoinHostPort(gw, strconv.Itoa(ProxyPort))); err != nil {
			return err
		}
		if l.DNSTCP, err = lc.Listen(context.Background(), "tcp4", net.JoinHostPort(gw, strconv.Itoa(DNSPort))); err != nil {
			return err
		}
		l.DNSUDP, err = net.ListenPacket("udp4", net.JoinHostPort(gw, strconv.Itoa(DNSPort)))
		return err
	})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("egress listeners of sandbox %s: %w", id, err)
	}
	return &l, nil
}
