package linux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Network namespaces are per thread. Go multiplexes goroutines over threads, so code that
// must run inside another network namespace does so on a thread locked to one goroutine
// that is discarded if it cannot get back. Everything here keeps one invariant: a thread
// the Go scheduler may hand to any other goroutine is always in its original namespace.

// OpenNetNS opens the network namespace file at path (a bind mount of nsfs, or
// /proc/PID/ns/net) and checks that it is one. The error wraps os.ErrNotExist when path
// does not exist, and ErrNotNetNS when path exists but is something else (for example a pin
// file left unmounted by a crash).
func OpenNetNS(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var typ int
	cerr := controlFile(f, func(fd int) error {
		var err error
		typ, err = unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
		return err
	})
	if cerr != nil || typ != unix.CLONE_NEWNET {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, ErrNotNetNS)
	}
	return f, nil
}

// ErrNotNetNS: a path that should name a network namespace names something else.
var ErrNotNetNS = errors.New("not a network namespace")

// RunInNetNS runs fn on a dedicated OS thread that has joined the network namespace ns and
// returns fn's error. It may be called from any goroutine, including from inside another
// RunInNetNS's fn. Sockets (and netlink handles) created by fn belong to ns for their whole
// life and may be used afterwards from any goroutine. fn runs on another goroutine than the
// caller's; goroutines it starts do not run in ns.
//
// The thread then returns to the process's network namespace (/proc/self/ns/net). If it
// cannot, the goroutine exits still locked to it and the Go runtime destroys the thread. ns
// is referenced for the duration of the call: closing it concurrently is safe, and a call
// that starts after the close fails with an error wrapping os.ErrClosed without running fn.
func RunInNetNS(ns *os.File, fn func() error) error {
	home, err := processNetNS()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back := false
		defer func() {
			if back {
				runtime.UnlockOSThread()
			}
		}()
		var fnErr error
		err := controlFile(ns, func(fd int) error {
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				back = true
				return fmt.Errorf("setns: %w", err)
			}
			fnErr = fn()
			if err := unix.Setns(home, unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("returning to the process's network namespace (thread discarded): %w", err)
			}
			back = true
			return nil
		})
		if err != nil {
			done <- err
			return
		}
		done <- fnErr
	}()
	return <-done
}

// processNetNS is a descriptor of the process's network namespace, where every thread not
// locked by RunInNetNS or CreateNetNS is. Opening it costs more than the two setns(2) of a
// trip, so it is opened once and kept for the life of the process.
var processNetNS = sync.OnceValues(func() (int, error) {
	fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the process's network namespace: %w", err)
	}
	return fd, nil
})

// CreateNetNS creates a new network namespace, runs init inside it and pins it at path with
// a bind mount. path must not exist; its directory is created if needed. init runs on the
// creating thread, like fn of RunInNetNS. On error nothing is mounted at path and path does
// not exist.
func CreateNetNS(path string, init func() error) error {
	home, err := processNetNS()
	if err != nil {
		return err
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("creating network namespace at %s: %w", path, os.ErrExist)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back := false
		defer func() {
			if back {
				runtime.UnlockOSThread()
			}
		}()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			back = true // a failed unshare changes nothing
			done <- fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
			return
		}
		err := init()
		if err == nil {
			if err = BindNamespace(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path); err != nil {
				_ = UnmountFile(path) // the pin file BindNamespace created
			}
		}
		if serr := unix.Setns(home, unix.CLONE_NEWNET); serr != nil {
			if err == nil {
				_ = UnmountFile(path)
			}
			done <- errors.Join(err, fmt.Errorf("returning to the process's network namespace (thread discarded): %w", serr))
			return
		}
		back = true
		done <- err
	}()
	return <-done
}

// NewTCPSocket creates a non-blocking TCP socket (IPv6 if v6) in the network namespace of
// the calling thread (call it from RunInNetNS's fn to make one in another namespace). The
// socket is registered with the Go netpoller; hand it to ConnectTCP.
func NewTCPSocket(v6 bool) (*os.File, error) {
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	// A non-blocking descriptor handed to os.NewFile is registered with the netpoller.
	return os.NewFile(uintptr(fd), "tcp"), nil
}

// ConnectTCP connects sock (from NewTCPSocket) to addr from the calling goroutine, waiting
// in the netpoller and honouring ctx's deadline and cancellation, and returns the
// connection. It always consumes sock. Errors are *net.OpError values, like net.Dial's. The
// connection has TCP_NODELAY and 15s keep-alives set, as net.Dialer would.
func ConnectTCP(ctx context.Context, sock *os.File, addr netip.AddrPort) (*net.TCPConn, error) {
	defer sock.Close()
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(addr), Err: err}
	}
	var sa unix.Sockaddr
	if ip := addr.Addr(); ip.Is4() {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: ip.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: ip.As16()}
	}
	if err := connect(ctx, sock, sa); err != nil {
		return nil, opErr(err)
	}
	c, err := net.FileConn(sock) // dups the descriptor; sock itself is closed on return
	if err != nil {
		return nil, opErr(err)
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, opErr(fmt.Errorf("unexpected connection type %T", c))
	}
	_ = tc.SetNoDelay(true)
	_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9})
	return tc, nil
}

// connect runs a non-blocking connect(2) on f and waits for its outcome in the netpoller.
func connect(ctx context.Context, f *os.File, sa unix.Sockaddr) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		if err := f.SetWriteDeadline(d); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	started := false
	var cerr error
	werr := rc.Write(func(s uintptr) bool {
		fd := int(s)
		if !started {
			started = true
			cerr = unix.Connect(fd, sa)
			switch cerr {
			case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
				return false
			case unix.EISCONN:
				cerr = nil
			}
			return true
		}
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			cerr = os.NewSyscallError("getsockopt", err)
			return true
		}
		switch e := unix.Errno(v); e {
		case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
			return false
		case 0, unix.EISCONN:
			if _, err := unix.Getpeername(fd); err != nil {
				return false // woken before the handshake finished
			}
			cerr = nil
			return true
		default:
			cerr = e
			return true
		}
	})
	if werr != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The poller's deadline may fire just before ctx's own timer does.
		if d, ok := ctx.Deadline(); ok && errors.Is(werr, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
			return context.DeadlineExceeded
		}
		return werr
	}
	return os.NewSyscallError("connect", cerr)
}

// controlFile runs fn with f's descriptor, holding a reference so that a concurrent Close
// cannot release (and the kernel reuse) the descriptor number while fn runs.
func controlFile(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var fnErr error
	if err := rc.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		// Control fails only when f is closed (or closing).
		return fmt.Errorf("%w: %v", os.ErrClosed, err)
	}
	return fnErr
}

// OriginalDst returns the destination a redirected TCP connection was addressed to before
// nftables rewrote it (SO_ORIGINAL_DST, IPv4), read from the conntrack entry of the
// connection's network namespace.
func OriginalDst(c syscall.Conn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		// The kernel fills a struct sockaddr_in; IPv6Mreq is a 20-byte buffer that holds it.
		m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = os.NewSyscallError("getsockopt SO_ORIGINAL_DST", err)
			return
		}
		b := m.Multiaddr
		ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3]))
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return ap, serr
}
