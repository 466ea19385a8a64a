// Package proxy is the egress proxy of one sandbox: the only thing a sandbox's TCP
// connections ever reach. The gateway firewall redirects every connection to its listener;
// for each one the proxy
//
//  1. recovers the original destination (SO_ORIGINAL_DST) and maps a synthetic address
//     back to the name the sandbox resolved through moat's DNS;
//  2. peeks at the first bytes for a TLS SNI or an HTTP Host and refuses the connection
//     when they name another host than the address does;
//  3. decides with the sandbox's current policy (deny unless allowed);
//  4. resolves the *name* itself (pinned hosts first, then its own resolver) and checks
//     every address just before connecting: loopback, private, link-local, metadata and
//     the host's own addresses are refused unless pinned by the operator or named by a
//     CIDR rule of the policy;
//  5. splices bytes both ways under idle and total timeouts, and records the decision
//     and the bytes moved.
//
// TLS passes through untouched. Nothing here fails open: a connection the proxy cannot
// account for is closed, and when the proxy is not serving, the firewall's redirect meets
// a closed port.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/egress/sniff"
	"github.com/moatdev/moat/internal/linux"
)

// Event is one decision of the proxy, recorded when it is made. Allowed connections are
// finished later with their byte counts (Outcome).
type Event struct {
	Time    time.Time
	Phase   string
	Name    string     // the host name the connection was for ("" for a direct IP)
	Addr    netip.Addr // the destination the sandbox dialled (synthetic for names)
	Port    uint16
	Allowed bool
	// Ask: the policy held the connection for a person's decision (ask.go); Allowed,
	// Rule and Reason say what came of it.
	Ask    bool
	Rule   string
	Reason string
	User   string // the sandbox user who opened the connection ("": root or not told apart)
}

// Outcome is how an allowed connection ended.
type Outcome struct {
	Upstream netip.AddrPort // the address the proxy connected to (zero if it never did)
	Up, Down int64          // bytes sandbox → upstream and back
	Duration time.Duration
	Err      string // why it ended abnormally: dial failure, a refused address, idle timeout, policy change
}

// Resolved is one upstream address of a name.
type Resolved struct {
	Addr netip.Addr
	// Pinned addresses come from the operator's hosts file: trusted even when private.
	Pinned bool
}

// Config wires a Proxy to its sandbox. Every func field is required unless noted.
type Config struct {
	// Policy returns the current phase's name and compiled policy.
	Policy func() (phase string, p *policy.Policy)
	// Name maps a synthetic address back to the name it was handed out for.
	Name func(netip.Addr) (string, bool)
	// OriginalDst recovers where a redirected connection was going.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Resolve looks a name up upstream (never through the sandbox's DNS).
	Resolve func(ctx context.Context, name string) ([]Resolved, error)
	// Dial connects to an upstream address from the daemon's namespace.
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
	// HostAddrs lists the host's own addresses (refused as destinations). Optional.
	HostAddrs func() []netip.Addr
	// Intercept returns the interceptor for a host (canonical name) and port whose
	// requests moat must see, under the current policy: one with a credential binding (on
	// any of its ports) or covered by an HTTP rule. nil means pass through. Direct IP
	// connections that name such a host (SNI, Host) are refused. Optional.
	Intercept func(host string, port uint16) Interceptor
	// Record stores a decision; for allowed connections the returned func is called once
	// with the outcome. Optional.
	Record func(Event) func(Outcome)
	Log    *slog.Logger // optional
	// User names the sandbox user a connection comes from by its client address ("" for
	// root and users moat does not tell apart), or says why it is refused. Optional.
	User func(src netip.AddrPort) (user, refuse string)
	// UserPolicy returns a user's own rules, which narrow the sandbox's: deny wins. nil:
	// the user has the sandbox's. Optional.
	UserPolicy func(user string) *policy.Policy

	// Budget is the daemon's connection budget shared with the other sandboxes' proxies;
	// the proxy joins it with a cap of MaxConns. Optional: nil gives a budget of MaxConns
	// of its own.
	Budget      *Budget
	MaxConns    int           // concurrent connections of this sandbox (default 512)
	PeekTimeout time.Duration // wait for a client's first bytes (default 300ms)
	DialTimeout time.Duration // default 10s
	IdleTimeout time.Duration // no bytes either way (default 15min)
	MaxDuration time.Duration // total lifetime of a connection (default 12h)

	// Ask mode (ask.go): Ask holds a connection the policy asks about until a person
	// decides (nil: such connections are refused); AddRule adds an approved allow rule to
	// the sandbox's policy, live and stored (nil: an approval for the sandbox lets only
	// this connection through); AskWait is the longest hold (nil or 0: 2 min); MaxHeld
	// caps the connections held at once (default 16).
	Ask     func(ctx context.Context, q Question) (Answer, error)
	AddRule func(ctx context.Context, phase, rule string) error
	AskWait func() time.Duration
	MaxHeld int
}

// Proxy serves one sandbox's egress listener. Safe for concurrent use.
type Proxy struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // cancelled by Close: ends handlers still resolving or dialling
	stop   context.CancelFunc
	mu     sync.Mutex
	conns  map[*conn]struct{}
	held   map[*held]struct{} // connections waiting for a decision (ask.go)
	closed bool
	ls     []net.Listener
	active atomic.Int64
	share  *Share
	wg     sync.WaitGroup
	bufs   sync.Pool // *[]byte of smallBuf bytes, for copy's first reads
}

// New returns a Proxy with cfg's defaults filled in.
func New(cfg Config) *Proxy {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 512
	}
	if cfg.PeekTimeout <= 0 {
		cfg.PeekTimeout = 300 * time.Millisecond
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 15 * time.Minute
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = 12 * time.Hour
	}
	if cfg.MaxHeld <= 0 {
		cfg.MaxHeld = DefaultMaxHeld
	}
	if cfg.HostAddrs == nil {
		cfg.HostAddrs = func() []netip.Addr { return nil }
	}
	if cfg.Record == nil {
		cfg.Record = func(Event) func(Outcome) { return func(Outcome) {} }
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Budget == nil {
		cfg.Budget = NewBudget(cfg.MaxConns, 0)
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &Proxy{cfg: cfg, log: log, ctx: ctx, stop: stop, conns: map[*conn]struct{}{}, held: map[*held]struct{}{}, share: cfg.Budget.Join(cfg.MaxConns)}
	p.bufs.New = func() any { b := make([]byte, smallBuf); return &b }
	return p
}

// conn is one sandbox connection the proxy holds.
type conn struct {
	client      net.Conn
	target      policy.Request
	cancel      context.CancelCauseFunc
	intercepted bool
	approved    bool   // let through by a person's approval: the policy's ask counts as allow
	user        string // the sandbox user who opened it (users.go)
}

// errPolicyChanged ends connections the new policy no longer allows.
var errPolicyChanged = errors.New("the policy changed and no longer allows this connection")

// errNowInspected ends passed-through connections to a host the new policy inspects.
var errNowInspected = errors.New("the policy changed: requests to this host are now inspected")

// Serve accepts connections on l until Close. It returns nil after Close. A failed accept
// that may pass (the daemon out of descriptors, a connection aborted) is retried after a
// pause, as net/http does: the proxy keeps serving once descriptors are free again.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return nil
	}
	p.ls = append(p.ls, l)
	p.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if retryAccept(err) {
				p.log.Warn("egress: accepting a connection", "err", err)
				select {
				case <-p.ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			return fmt.Errorf("egress proxy: %w", err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c)
		}()
	}
}

// Close stops serving and closes every connection. It waits for the handlers to end.
func (p *Proxy) Close() error {
	p.stop()
	p.mu.Lock()
	p.closed = true
	for _, l := range p.ls {
		l.Close()
	}
	for c := range p.conns {
		c.cancel(errors.New("the sandbox's egress was closed"))
	}
	p.mu.Unlock()
	p.wg.Wait()
	p.share.Leave()
	return nil
}

// retryAccept says whether a failed accept may succeed later: out of descriptors (the
// process' or the system's), out of memory, or a connection that went away first.
func retryAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// Recheck decides every open connection again with the current policy and cuts those it
// no longer allows. It returns how many it cut. Call it after a policy or phase change.
func (p *Proxy) Recheck() int {
	_, pol := p.cfg.Policy()
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	p.recheckHeld(pol)
	for c := range p.conns {
		// c.target is guarded by p.mu: it gains the dialled address and a late claim.
		switch {
		case !p.allowsFor(pol, c.user, c.target, c.approved):
			c.cancel(errPolicyChanged)
			n++
		case !c.intercepted && c.target.Name != "" && p.cfg.Intercept != nil && p.cfg.Intercept(c.target.Name, c.target.Port) != nil,
			p.inspectedClaim(c.target) != "":
			c.cancel(errNowInspected)
			n++
		}
	}
	return n
}

// Active is the number of connections being handled.
func (p *Proxy) Active() int { return int(p.active.Load()) }

func (p *Proxy) handle(client net.Conn) {
	start := time.Now()
	if why := p.share.Acquire(); why != "" {
		// Refused at once with a reset: the sandbox's client sees the refusal, not a hang.
		phase, _ := p.cfg.Policy()
		ev := Event{Time: start, Phase: phase, Reason: why}
		ev.User, _ = p.userOf(client)
		if dst, err := p.cfg.OriginalDst(client); err == nil {
			ev.Addr, ev.Port = dst.Addr(), dst.Port()
			ev.Name, _ = p.cfg.Name(dst.Addr())
		}
		p.cfg.Record(ev)
		reset(client)
		client.Close()
		return
	}
	// Deferred in this order, the budget gets the connection back once its descriptors
	// are closed (the upstream's and the pipes' before handle returns, the client's here).
	defer p.share.Release()
	defer client.Close()
	p.active.Add(1)
	defer p.active.Add(-1)

	dst, err := p.cfg.OriginalDst(client)
	if err != nil {
		p.log.Warn("egress: no original destination", "err", err)
		phase, _ := p.cfg.Policy()
		p.cfg.Record(Event{Time: start, Phase: phase, Reason: "original destination unknown: " + err.Error()})
		return
	}
	ctx, cancel := context.WithCancelCause(p.ctx)
	defer cancel(nil)
	ctx, cancelTotal := context.WithTimeoutCause(ctx, p.cfg.MaxDuration, fmt.Errorf("connection open longer than %s", p.cfg.MaxDuration))
	defer cancelTotal()

	user, refuse := p.userOf(client)
	ctx = WithUser(ctx, user)
	head, proto, ev, req := p.decide(client, dst)
	ev.Time = start
	// The user's own rules first: what they deny is refused, never asked about.
	p.narrow(&ev, req, user, refuse)
	approved := false
	if ev.Ask && !ev.Allowed {
		approved = p.hold(ctx, &ev, req)
	}
	var targets []netip.AddrPort
	var ic Interceptor
	if ev.Allowed && req.Name != "" && p.cfg.Intercept != nil {
		// A host whose requests moat inspects (a credential binding or an HTTP rule) is
		// reached through TLS that moat terminates, or through plain HTTP that moat reads
		// when the interceptor takes it (an HTTP rule, or a binding that says so): a
		// secret is never put on a plain connection unless its binding allows it. A
		// client whose first bytes had not come within the peek window (seen under
		// gVisor) gets a longer wait.
		if ic = p.cfg.Intercept(req.Name, req.Port); ic != nil && len(head) == 0 {
			var r sniff.Result
			var err error
			if head, r, err = p.peekFor(client, p.cfg.DialTimeout); err == nil {
				proto = r.Proto
				if why := checkClaim(&req, r); why != "" {
					ev.Allowed, ev.Reason = false, why
				}
			}
		}
		if ic != nil && ev.Allowed && proto != sniff.TLS && (proto != sniff.HTTP || !ic.PlainHTTP()) {
			what := "only TLS connections to it are allowed"
			if ic.PlainHTTP() {
				what = "only TLS and HTTP connections to it are allowed"
			}
			ev.Allowed, ev.Reason = false, "moat inspects the requests to "+req.Name+" (a credential binding, on any port, or an HTTP rule): "+what
		}
	}
	if ev.Allowed {
		// A direct IP connection must not reach an inspected host around its interception.
		if why := p.inspectedClaim(req); why != "" {
			ev.Allowed, ev.Reason = false, why
		}
	}
	if ev.Allowed {
		// An allowed name whose addresses are all refused is a blocked attempt, logged as one.
		var why string
		if targets, why = p.resolve(ctx, req, approved); why != "" {
			ev.Allowed, ev.Reason = false, why
		}
	}
	if !ev.Allowed {
		p.cfg.Record(ev)
		reset(client)
		return
	}
	c := &conn{client: client, target: req, cancel: cancel, intercepted: ic != nil, approved: approved, user: user}
	if !p.track(c) {
		return
	}
	defer p.untrack(c)
	finish := p.cfg.Record(ev)
	// A policy change between the decision and the tracking is caught here.
	if _, pol := p.cfg.Policy(); !p.allowsFor(pol, user, req, approved) {
		finish(Outcome{Duration: time.Since(start), Err: errPolicyChanged.Error()})
		return
	}
	var out Outcome
	if ic != nil {
		if approved {
			ctx = withApproved(ctx) // the interceptor's checks count the policy's ask as allow
		}
		out = p.intercept(ctx, c, ic, head, req, targets)
	} else {
		out = p.relay(ctx, c, head, len(head) > 0, targets)
	}
	out.Duration = time.Since(start)
	finish(out)
}

// Interceptor terminates TLS for a host with a credential binding, injects the credential
// into requests and scrubs it from responses (internal/egress/intercept). dial connects
// to the upstream address the proxy already checked.
type Interceptor interface {
	Serve(ctx context.Context, client net.Conn, head []byte, host string, port int, dial func(context.Context) (net.Conn, error)) (up, down int64, err error)
	// PlainHTTP says whether Serve also takes plain HTTP connections (else TLS only).
	PlainHTTP() bool
}

// inspectedClaim says why a direct IP connection (no name) that names a host in its TLS
// SNI or HTTP Host is refused when moat inspects that host on its port, or "": it would
// reach the host without the interception (and the scrubbing) a named connection gets.
func (p *Proxy) inspectedClaim(req policy.Request) string {
	if req.Name != "" || req.Claimed == "" || p.cfg.Intercept == nil {
		return ""
	}
	name, err := policy.NormalizeName(req.Claimed)
	if err != nil || p.cfg.Intercept(name, req.Port) == nil {
		return ""
	}
	return "the connection names " + name + ", whose requests moat inspects (a credential binding or an HTTP rule): reach it by name, not by address"
}

// intercept serves a connection to a bound host through ic.
func (p *Proxy) intercept(ctx context.Context, c *conn, ic Interceptor, head []byte, req policy.Request, targets []netip.AddrPort) Outcome {
	var out Outcome
	dial := func(ctx context.Context) (net.Conn, error) {
		up, addr, err := p.dial(ctx, targets)
		if err == nil {
			out.Upstream = addr
			p.mu.Lock()
			c.target.Addr = addr.Addr()
			p.mu.Unlock()
		}
		return up, err
	}
	stop := context.AfterFunc(ctx, func() { c.client.Close() })
	defer stop()
	var err error
	out.Up, out.Down, err = ic.Serve(ctx, c.client, head, req.Name, int(req.Port), dial)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		out.Err = cause.Error()
	} else if err != nil {
		out.Err = err.Error()
	}
	return out
}

// decide reads the client's first bytes and decides. head holds the bytes read; sniffed
// says whether they were classified (false for a client that had sent nothing yet: relay
// checks its first bytes when they come).
func (p *Proxy) decide(client net.Conn, dst netip.AddrPort) (head []byte, proto sniff.Proto, ev Event, req policy.Request) {
	phase, pol := p.cfg.Policy()
	ev = Event{Phase: phase, Addr: dst.Addr(), Port: dst.Port()}
	req = policy.Request{Addr: dst.Addr(), Port: dst.Port()}
	name, synthetic := p.cfg.Name(dst.Addr())
	if synthetic {
		req.Name, ev.Name = name, name
	}
	head, r, err := p.peek(client)
	if err != nil {
		ev.Reason = err.Error()
		return head, r.Proto, ev, req
	}
	if len(head) > 0 {
		if why := checkClaim(&req, r); why != "" {
			ev.Reason = why
			if !synthetic {
				ev.Name = r.Name
			}
			return head, r.Proto, ev, req
		}
		if !synthetic && r.Name != "" {
			ev.Name = r.Name // for the log: a direct connection that named a host
		}
	}
	d := pol.Decide(req)
	ev.Allowed, ev.Ask, ev.Rule, ev.Reason = d.Allow, d.Ask, d.Rule, d.Reason
	return head, r.Proto, ev, req
}

// checkClaim holds what the client's first bytes claim (TLS SNI, HTTP Host) against the
// connection: a named connection must claim its own name; a direct one carries its claim
// into the request, where deny rules on that name apply. It returns why the claim is
// refused, or "".
func checkClaim(req *policy.Request, r sniff.Result) string {
	switch {
	case r.Name == "":
		return ""
	case req.Name != "" && r.Name != req.Name:
		return fmt.Sprintf("%s names %s but the connection was to %s", r.Proto, r.Name, req.Name)
	case req.Name == "":
		req.Claimed = r.Name
	}
	return ""
}

// peek reads the client's first bytes until sniff can classify them, for at most
// PeekTimeout. A client that sends nothing (a server-speaks-first protocol) gets an empty
// head; one that stops half-way through a TLS hello or HTTP header is refused.
func (p *Proxy) peek(client net.Conn) ([]byte, sniff.Result, error) {
	return p.peekFor(client, p.cfg.PeekTimeout)
}

// peekFor is peek with its own wait for the first bytes.
func (p *Proxy) peekFor(client net.Conn, wait time.Duration) ([]byte, sniff.Result, error) {
	buf := make([]byte, sniff.MaxPeek)
	n := 0
	client.SetReadDeadline(time.Now().Add(wait))
	defer client.SetReadDeadline(time.Time{})
	for {
		m, err := client.Read(buf[n:])
		n += m
		if n > 0 && m > 0 {
			r, serr := sniff.Sniff(buf[:n])
			if serr == nil {
				// A copy of what was read: the connection keeps its first bytes for as long
				// as it lives, not the whole peek buffer.
				return bytes.Clone(buf[:n]), r, nil
			}
			if !errors.Is(serr, sniff.ErrNeedMore) {
				return buf[:n], r, fmt.Errorf("unreadable first bytes: %w", serr)
			}
			if n == len(buf) {
				return buf[:n], r, fmt.Errorf("the first %d bytes are an unfinished TLS hello or HTTP header", n)
			}
		}
		if err != nil {
			var ne net.Error
			if n == 0 && (errors.As(err, &ne) && ne.Timeout() || errors.Is(err, io.EOF)) {
				return nil, sniff.Result{}, nil // the server speaks first, or nothing to send
			}
			return buf[:n], sniff.Result{}, fmt.Errorf("the client stopped in the middle of its TLS hello or HTTP header: %w", err)
		}
	}
}

func (p *Proxy) track(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// relay connects to the first target that answers and copies bytes both ways until
// both sides are done, the connection idles out, or ctx ends (policy change, total
// timeout, Close).
func (p *Proxy) relay(ctx context.Context, c *conn, head []byte, sniffed bool, targets []netip.AddrPort) Outcome {
	up, addr, err := p.dial(ctx, targets)
	if err != nil {
		return Outcome{Err: err.Error()}
	}
	p.mu.Lock()
	c.target.Addr = addr.Addr() // Recheck decides on the address actually dialled
	p.mu.Unlock()
	defer up.Close()
	out := Outcome{Upstream: addr}
	// Closing both ends unblocks the copy loops when ctx ends.
	stop := context.AfterFunc(ctx, func() {
		c.client.Close()
		up.Close()
	})
	defer stop()
	if len(head) > 0 {
		if _, err := up.Write(head); err != nil {
			out.Err = "writing to upstream: " + err.Error()
			return out
		}
		out.Up = int64(len(head))
	}
	// Upstream → client runs here; client → upstream in a second goroutine.
	var idleErr atomic.Value
	act := newActivity()
	upDone := make(chan int64, 1)
	go func() {
		var n int64
		if !sniffed {
			// The client spoke after the peek window (a slow client, or one that waits for
			// a server banner): its first bytes get the same checks before any is sent.
			first, why := p.lateClaim(c)
			if why != "" {
				idleErr.CompareAndSwap(nil, why)
				c.cancel(errors.New(why))
				upDone <- 0
				return
			}
			if _, err := up.Write(first); err != nil {
				upDone <- 0
				return
			}
			n = int64(len(first))
		}
		m, err := p.copy(up, c.client, act)
		if err != nil {
			idleErr.CompareAndSwap(nil, err.Error())
		}
		upDone <- n + m
	}()
	n, err := p.copy(c.client, up, act)
	out.Down = n
	if err != nil {
		idleErr.CompareAndSwap(nil, err.Error())
	}
	out.Up += <-upDone
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		out.Err = cause.Error()
	} else if v := idleErr.Load(); v != nil {
		out.Err = v.(string)
	}
	return out
}

// lateClaim reads a connection's first client bytes when they come after the peek window,
// and checks what they claim like decide does. It returns the bytes read, or why the
// connection must end.
func (p *Proxy) lateClaim(c *conn) ([]byte, string) {
	head, r, err := p.peekFor(c.client, p.cfg.IdleTimeout)
	switch {
	case len(head) == 0:
		return nil, "" // closed or idle without a word: copy sees it
	case err != nil:
		return nil, err.Error()
	}
	p.mu.Lock()
	req := c.target
	why := checkClaim(&req, r)
	c.target = req
	approved := c.approved
	p.mu.Unlock()
	if why == "" && req.Claimed != "" {
		if _, pol := p.cfg.Policy(); !p.allowsFor(pol, c.user, req, approved) {
			why = "the connection names " + req.Claimed + ", which the policy denies"
		} else {
			why = p.inspectedClaim(req)
		}
	}
	return head, why
}

// resolve finds where req may go: the resolved addresses of req.Name (or req.Addr for an
// allowed direct connection) that pass the address check. why says why none does.
// approved: a person let the connection through, so the policy's ask counts as allow.
func (p *Proxy) resolve(ctx context.Context, req policy.Request, approved bool) (targets []netip.AddrPort, why string) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var addrs []Resolved
	if req.Name == "" {
		addrs = []Resolved{{Addr: req.Addr}}
	} else {
		var err error
		if addrs, err = p.cfg.Resolve(ctx, req.Name); err != nil {
			return nil, fmt.Sprintf("resolving %s: %v", req.Name, err)
		}
	}
	_, pol := p.cfg.Policy()
	var refused []string
	hint := ""
	for _, a := range addrs {
		if d := pol.Decide(policy.Request{Name: req.Name, Addr: a.Addr, Port: req.Port, Claimed: req.Claimed}); !permits(d, approved) {
			refused = append(refused, a.Addr.String()+", which "+d.Reason)
			continue
		}
		if !a.Pinned && !pol.NamesAddr(a.Addr, req.Port) {
			if why := CheckAddr(a.Addr, p.cfg.HostAddrs()); why != "" {
				refused = append(refused, a.Addr.String()+", "+why)
				hint = " (add a CIDR rule or pin it with --egress-hosts to allow)"
				if a.Addr.Unmap().Is6() {
					hint = " (pin it with --egress-hosts to allow; CIDR rules are IPv4 only)"
				}
				continue
			}
		}
		targets = append(targets, netip.AddrPortFrom(a.Addr.Unmap(), req.Port))
	}
	switch {
	case len(targets) > 0:
		return targets, ""
	case len(refused) > 0:
		return nil, fmt.Sprintf("%s resolves to %s%s", hostOf(req), refused[0], hint)
	default:
		return nil, hostOf(req) + " has no address"
	}
}

// dial connects to the first target that answers.
func (p *Proxy) dial(ctx context.Context, targets []netip.AddrPort) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var errs []error
	for _, t := range targets {
		c, err := p.cfg.Dial(ctx, t)
		if err == nil {
			return c, t, nil
		}
		errs = append(errs, err)
	}
	return nil, netip.AddrPort{}, fmt.Errorf("connecting upstream: %w", errors.Join(errs...))
}

func hostOf(req policy.Request) string {
	if req.Name != "" {
		return net.JoinHostPort(req.Name, strconv.Itoa(int(req.Port)))
	}
	return netip.AddrPortFrom(req.Addr, req.Port).String()
}

// activity is the time of the last byte moved in either direction, shared by the two
// copy loops of a connection so that a long download does not idle out its upload side.
type activity struct{ ns atomic.Int64 }

func newActivity() *activity {
	a := &activity{}
	a.touch()
	return a
}

func (a *activity) touch()               { a.ns.Store(time.Now().UnixNano()) }
func (a *activity) since() time.Duration { return time.Duration(time.Now().UnixNano() - a.ns.Load()) }

// copy moves bytes from src to dst until EOF or an error, then half-closes dst. It starts
// with reads into a pooled buffer: most connections are a few small messages each way, for
// which two syscalls per message beat the pipe a splice needs (a pipe2 and two closes per
// direction). Once one read fills the buffer the traffic is bulk, and copy splices in the
// kernel (no copy through user space) through a pipe of its own, closed when copy
// returns, moving at most copyChunk bytes per call so that the read deadline (the idle
// timeout) is renewed as long as bytes flow. A connection idles out after IdleTimeout to
// 2×IdleTimeout without a byte in either direction.
func (p *Proxy) copy(dst, src net.Conn, act *activity) (int64, error) {
	small := p.smallMover(dst, src)
	move, release := small, func() {}
	defer func() { release() }()
	var total int64
	idle := p.cfg.IdleTimeout
	for {
		src.SetReadDeadline(time.Now().Add(idle))
		n, err := move(copyChunk)
		total += n
		if n > 0 {
			act.touch()
			if small != nil && err == nil && n == smallBuf {
				// Bulk: from here on, splice.
				small = nil
				move, release = mover(dst, src)
			}
		}
		if err == nil {
			continue
		}
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			if n > 0 || act.since() < idle {
				continue // bytes moved in this chunk or the other direction is busy
			}
			closeBoth(dst, src)
			return total, fmt.Errorf("idle for %s", idle)
		case errors.Is(err, io.EOF):
			closeWrite(dst)
			return total, nil
		default:
			closeBoth(dst, src)
			return total, nil
		}
	}
}

// smallMover returns how copy moves one read's worth (up to smallBuf bytes) from src to
// dst through a buffer of the proxy's pool, taken only once src has bytes to read (an
// idle connection holds none).
func (p *Proxy) smallMover(dst, src net.Conn) func(int64) (int64, error) {
	get := func() []byte { return *p.bufs.Get().(*[]byte) }
	put := func(b []byte) { p.bufs.Put(&b) }
	read := func() ([]byte, int, error) {
		b := get()
		n, err := src.Read(b)
		if n == 0 {
			put(b)
			return nil, 0, err
		}
		return b, n, err
	}
	if sc, ok := src.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			read = func() ([]byte, int, error) { return linux.ReadReady(raw, get, put) }
		}
	}
	return func(int64) (int64, error) {
		b, n, err := read()
		if n == 0 {
			return 0, err
		}
		defer put(b)
		if _, werr := dst.Write(b[:n]); werr != nil {
			return 0, werr
		}
		return int64(n), err
	}
}

// smallBuf is the size of copy's first reads: a read that fills it makes copy splice.
const smallBuf = 16 << 10

const copyChunk = 1 << 20

// mover returns how copy moves up to n bytes from src to dst, and what releases its
// resources. Between two sockets: linux.Splice through its own pipe (two descriptors,
// closed by release: never the Go runtime's pipe pool, whose pipes outlive their
// connections until the garbage collector finds them). Otherwise, or when no pipe can be
// made (the daemon is out of descriptors), through a user-space buffer.
func mover(dst, src net.Conn) (move func(n int64) (int64, error), release func()) {
	buffered := func(n int64) (int64, error) {
		// The bare Writer keeps io.CopyN from splicing through the runtime's pool.
		return io.CopyN(struct{ io.Writer }{dst}, src, n)
	}
	dc, dok := dst.(syscall.Conn)
	sc, sok := src.(syscall.Conn)
	if !dok || !sok {
		return buffered, func() {}
	}
	draw, derr := dc.SyscallConn()
	sraw, serr := sc.SyscallConn()
	if derr != nil || serr != nil {
		return buffered, func() {}
	}
	pipe, err := linux.NewPipe()
	if err != nil {
		return buffered, func() {}
	}
	return func(n int64) (int64, error) { return linux.Splice(draw, sraw, pipe, n) }, func() { pipe.Close() }
}

// reset makes the coming Close send a TCP reset: the sandbox's client sees "connection
// reset" at once instead of an orderly end of a conversation that never happened.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

func closeBoth(a, b net.Conn) {
	a.Close()
	b.Close()
}
