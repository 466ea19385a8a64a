package daemon

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/egress/proxy"
)

// Descriptor budget. The daemon's descriptors are one table shared by every sandbox's
// proxied connections, the API listeners, the store, liveness checks (a connection to
// each sandbox's moat-init) and sandbox starts. Proxied connections get what is left after
// a reserve for the rest; each sandbox is guaranteed a floor of them (proxy.Budget).
const (
	minReserveFDs   = 1024 // kept out of the egress budget even on a small RLIMIT_NOFILE
	maxFloorConns   = 32   // connections guaranteed to each sandbox while the budget allows
	defaultAPIConns = 256  // concurrent TCP API connections (--listen)
	// defaultAPIConnsPerAddr: of them, from one remote address.
	defaultAPIConnsPerAddr = 64
)

// egressBudget returns the budget of proxied connections (all sandboxes) and the floor
// guaranteed to each sandbox, for a process whose RLIMIT_NOFILE is nofile, or for a
// configured budget of conns connections (> 0). Pure.
//
// The reserve is a quarter of the limit, at least minReserveFDs: the unix-socket API and
// up to defaultAPIConns TCP API connections (each may hold a second descriptor to a
// sandbox's moat-init), the store, and each running sandbox's own descriptors (its
// listeners in the gateway namespace, its log) fit in it for hundreds of sandboxes. The
// floor is a sixteenth of the budget, between 1 and maxFloorConns: sixteen sandboxes at
// their floor hold at most the budget, so one sandbox at its cap never starves another
// (proxy.Budget shrinks the floor further when more sandboxes run than it can guarantee).
func egressBudget(nofile uint64, conns int) (budget, floor int) {
	if conns <= 0 {
		reserve := max(uint64(minReserveFDs), nofile/4)
		if nofile <= reserve {
			conns = 1
		} else {
			conns = int(min((nofile-reserve)/proxy.FDsPerConn, 1<<20))
		}
	}
	return conns, min(max(conns/16, 1), maxFloorConns)
}

// nofile returns this process' RLIMIT_NOFILE soft limit (Go raises it to the hard limit
// at start).
func nofile() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return rl.Cur
}

// limitListener accepts at most n connections at once, and at most perAddr of them from
// one remote address. A connection beyond either is closed at once (the client sees the
// end, not a hang), so slow or idle clients on the TCP API cannot take the descriptors the
// unix socket, the sandboxes and the store need, and one host cannot take every place.
type limitListener struct {
	net.Listener
	sem     chan struct{}
	perAddr int
	refused func()

	mu     sync.Mutex
	byAddr map[netip.Addr]int
}

func newLimitListener(l net.Listener, n, perAddr int, refused func()) net.Listener {
	if perAddr <= 0 || perAddr > n {
		perAddr = n
	}
	return &limitListener{Listener: l, sem: make(chan struct{}, n), perAddr: perAddr, refused: refused, byAddr: map[netip.Addr]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := remoteAddr(c)
		l.mu.Lock()
		ok := l.byAddr[addr] < l.perAddr
		if ok {
			select {
			case l.sem <- struct{}{}:
				l.byAddr[addr]++
			default:
				ok = false
			}
		}
		l.mu.Unlock()
		if ok {
			return &limitedConn{Conn: c, release: func() { l.release(addr) }}, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
		if l.refused != nil {
			l.refused()
		}
	}
}

func (l *limitListener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
	<-l.sem
}

// remoteAddr is c's remote IP address (IPv4-mapped IPv6 unmapped), or the zero Addr.
func remoteAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
