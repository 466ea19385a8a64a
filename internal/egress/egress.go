// Package egress runs the network boundary of every sandbox: per sandbox, moat's DNS
// server and egress proxy on listeners inside its gateway namespace, the sandbox's compiled
// policy and phase, and the egress log of every decision. The firewall that sends the
// sandbox's traffic to those listeners is set up with the gateway namespace
// (internal/netns); this package only serves what arrives.
package egress

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/egress/dns"
	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/egress/proxy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/netns"
	"github.com/moatdev/moat/internal/sandbox"
)

// SyntheticPrefix is where moat's DNS takes the addresses it hands out for allowed names.
// Each sandbox has its own table (the addresses only mean something inside its gateway).
var SyntheticPrefix = netip.MustParsePrefix("198.19.0.0/16")

// Listener opens a sandbox's egress listeners in its gateway namespace. Implemented by
// *netns.Manager.
type Listener interface {
	Listen(id string) (*netns.Listeners, error)
}

// Journal stores egress log entries. Implemented by *store.Store.
type Journal interface {
	// WriteEgress inserts adds (setting their Seq) and then updates finished entries
	// (matched by Seq), in one transaction.
	WriteEgress(ctx context.Context, adds []*Entry, finished []Entry) error
}

// Entry is one decision in a sandbox's egress log.
type Entry struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	Phase   string    `json:"phase"`
	// Proto is "tcp", "dns", "http" (a request inspected by an HTTP rule) or "git" (a
	// push, or a git request refused, decided by the git gate).
	Proto    string        `json:"proto"`
	Name     string        `json:"name,omitempty"`
	Addr     string        `json:"addr,omitempty"` // the destination the sandbox used
	Port     int           `json:"port,omitempty"`
	Allowed  bool          `json:"allowed"`
	Rule     string        `json:"rule,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	Upstream string        `json:"upstream,omitempty"` // where the proxy connected
	Up       int64         `json:"bytes_up"`
	Down     int64         `json:"bytes_down"`
	Duration time.Duration `json:"duration_ns"`
	Open     bool          `json:"open,omitempty"` // an allowed connection still open
	Error    string        `json:"error,omitempty"`
	// User is the sandbox user who made the connection or request (users.go); "" for
	// root and users moat does not tell apart.
	User string `json:"user,omitempty"`
}

// Config configures the Manager. Listener and Journal are required.
type Config struct {
	Listener Listener
	Journal  Journal
	Resolver *Resolver
	Log      *slog.Logger
	// Credential brokering: the secret store, where sandboxes' interception CAs are kept
	// (root-only), the roots upstream TLS is verified against (nil: the system's), and
	// where each credential use is recorded (never the value).
	Secrets SecretSource
	CADir   string
	RootCAs *x509.CertPool
	// GitDir, if set, is where the git gate keeps each sandbox's quarantine repositories
	// and push spool (root-only); with it, pushes are decided on their objects
	// (fast-forward, protected paths). GitProtected matches the touched paths (nil: the
	// default globs, case folded).
	GitDir       string
	GitProtected *gitgate.PathMatcher
	// GitHoldFor is how long a push held for approval waits for a decision (0: 24 h).
	GitHoldFor time.Duration
	// Audit kinds: "credential" (a use, a token minted or revoked), "git" (a git gate
	// decision).
	Audit func(sandbox, kind, detail string)
	// Budget is the daemon's budget of proxied connections, shared by every sandbox
	// (nil: none beyond each sandbox's MaxConns).
	Budget *proxy.Budget
	// Proxy limits (zero: the proxy's defaults).
	MaxConns    int
	IdleTimeout time.Duration
	MaxDuration time.Duration
	// Ask mode (askwire.go): Asker decides the connections a sandbox's policy asks about
	// (nil: none is set yet, see SetAsker; such connections are refused); AskWait is the
	// longest a connection is held when its policy names no ask_wait (0: 2 min); MaxHeld
	// caps a sandbox's held connections (0: 16).
	Asker   Asker
	AskWait time.Duration
	MaxHeld int
	// CredentialAsker is asked before a credential bound with Approve is injected
	// (approve.go): the request waits for its answer, at most CredentialWait (0: 5 min).
	// nil: such requests are refused.
	CredentialAsker Asker
	CredentialWait  time.Duration
	// Observer counts decisions and injections for /metrics (observe.go; nil: none).
	Observer Observer
}

// Manager runs the boundaries of all running sandboxes. Safe for concurrent use.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	journal *journal

	mu       sync.Mutex
	bs       map[string]*boundary
	cas      cas
	provs    providers
	revoking sync.WaitGroup
	audits   sync.WaitGroup // egress summaries being recorded (summary.go)

	gitMu   sync.Mutex     // creating quarantines
	changes *changes.Store // change records of git pushes (nil without GitDir)
	hooks   ChangeHooks    // told of held pushes and their decisions (changehooks.go)

	hostMu    sync.Mutex
	hostAddrs []netip.Addr
	hostAt    time.Time

	ask askWiring // the Asker and the rule adder of ask mode (askwire.go)
}

// New returns a Manager; Close stops it.
func New(cfg Config) *Manager {
	if cfg.Resolver == nil {
		cfg.Resolver = NewResolver(nil, "")
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, log: log, journal: newJournal(cfg.Journal, log), bs: map[string]*boundary{}}
	m.journal.obs = cfg.Observer
	m.ask.asker = cfg.Asker
	if cfg.GitDir != "" {
		m.changes = changes.NewStore(cfg.GitDir, changes.Options{HoldFor: cfg.GitHoldFor, Log: log})
		m.changes.Recover()
	}
	return m
}

// boundary is one sandbox's running DNS server and proxy.
type boundary struct {
	id    string
	table *dns.Table
	proxy *proxy.Proxy
	dns   *dns.Server
	ls    *netns.Listeners
	wg    sync.WaitGroup

	mu     sync.RWMutex
	spec   policy.Spec
	comp   *policy.Compiled
	phase  string
	pol    *policy.Policy
	dnsLog map[string]bool // DNS decisions already logged in this phase

	defaultWait time.Duration // the daemon's ask wait, for a spec without ask_wait

	// upstreams keeps the interceptor's upstream connections open across the sandbox's
	// connections (never shared between sandboxes); reset when the policy changes.
	upstreams *intercept.Upstreams
	// git is the sandbox's git gate policy: pushes to every intercepted host are decided
	// with it (refs under refs/heads/agent/<id>/ only); gitHold holds pushes that touch
	// protected paths for approval instead of refusing them.
	git     *gitgate.Policy
	gitHold bool
	// creds are the sandbox's credential bindings (an approved push is sent with them).
	creds []sandbox.Credential
	// users are the sandbox's users and their own rules (users.go); nil: none.
	users atomic.Pointer[userSet]
	// userUps are the upstream pools of the sandbox's named users (users.go), one each.
	userUps sync.Map
	// tally counts connection verdicts for the audit log's summaries (summary.go).
	tally *tally
}

func (b *boundary) current() (string, *policy.Policy) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.phase, b.pol
}

// Attach starts serving sandbox id's boundary with spec and the credential bindings
// creds; with bindings it returns the PEM certificate of the sandbox's interception CA.
// Attaching a sandbox that is attached replaces its policy (as SetPolicy). git.Prefix is
// the ref prefix the git gate lets the sandbox push under ("": refs/heads/agent/<id>/);
// git.Hold holds pushes that touch protected paths for approval instead of refusing them;
// git.NoPush refuses every push.
func (m *Manager) Attach(id string, spec policy.Spec, creds []sandbox.Credential, git sandbox.GitSettings) (string, error) {
	comp, pol, err := compile(spec)
	if err != nil {
		return "", err
	}
	gitPrefix := git.Prefix
	if gitPrefix == "" {
		gitPrefix = gitgate.DefaultPrefix(id)
	}
	gitPol, err := gitgate.Compile(gitgate.PolicySpec{Prefix: gitPrefix, NoPush: git.NoPush})
	if err != nil {
		return "", fmt.Errorf("git gate of sandbox %s: %w", id, err)
	}
	caPEM, err := m.credentials(id, spec, creds)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	if _, ok := m.bs[id]; ok {
		m.mu.Unlock()
		_, err := m.SetPolicy(id, spec)
		return caPEM, err
	}
	m.mu.Unlock()
	ls, err := m.cfg.Listener.Listen(id)
	if err != nil {
		return "", err
	}
	table, err := dns.NewTable(SyntheticPrefix)
	if err != nil {
		ls.Close()
		return "", err
	}
	b := &boundary{id: id, table: table, ls: ls, spec: spec, comp: comp, phase: spec.Phase, pol: pol, defaultWait: m.cfg.AskWait, dnsLog: map[string]bool{}, upstreams: intercept.NewUpstreams(m.cfg.RootCAs), git: gitPol, gitHold: git.Hold, creds: creds, tally: newTally(time.Now())}
	b.proxy = proxy.New(proxy.Config{
		Policy: b.current,
		Name: func(a netip.Addr) (string, bool) {
			if !SyntheticPrefix.Contains(a) {
				return "", false
			}
			return table.Name(a)
		},
		OriginalDst: func(c net.Conn) (netip.AddrPort, error) {
			sc, ok := c.(syscall.Conn)
			if !ok {
				return netip.AddrPort{}, fmt.Errorf("%T has no socket", c)
			}
			return linux.OriginalDst(sc)
		},
		Resolve:   m.cfg.Resolver.Resolve,
		Dial:      dial,
		HostAddrs: m.hostAddresses,
		Record: func(ev proxy.Event) func(proxy.Outcome) {
			m.summarizeConn(b, ev) // summary.go
			return m.recordConn(id, ev)
		},
		Intercept:   func(host string, port uint16) proxy.Interceptor { return m.interceptorFor(b, b.creds, host, port) },
		User:        func(src netip.AddrPort) (string, string) { return b.users.Load().userOf(src) },
		UserPolicy:  func(user string) *policy.Policy { return b.users.Load().policyOf(user) },
		Log:         m.log.With("sandbox", id),
		Budget:      m.cfg.Budget,
		MaxConns:    m.cfg.MaxConns,
		IdleTimeout: m.cfg.IdleTimeout,
		MaxDuration: m.cfg.MaxDuration,
		Ask:         m.askFor(id),
		AddRule:     m.addRuleFor(id),
		AskWait:     b.askWait,
		MaxHeld:     m.cfg.MaxHeld,
	})
	b.dns = dns.NewServer(dns.Config{
		Table:      table,
		User:       func(src netip.AddrPort) string { u, _ := b.users.Load().userOf(src); return u },
		DecideUser: func(user, name string) dns.Verdict { return b.decideName(user, name) },
		Log:        func(q dns.Query) { m.recordDNS(b, q) },
	})
	m.mu.Lock()
	if _, ok := m.bs[id]; ok {
		m.mu.Unlock()
		b.proxy.Close() // leaves the budget
		ls.Close()
		return "", fmt.Errorf("egress of sandbox %s attached twice at once: %w", id, errdefs.ErrConflict)
	}
	m.bs[id] = b
	m.mu.Unlock()
	serve := func(name string, fn func() error) {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			if err := fn(); err != nil {
				m.log.Error("egress listener failed", "sandbox", id, "listener", name, "err", err)
			}
		}()
	}
	serve("proxy", func() error { return b.proxy.Serve(ls.Proxy) })
	serve("dns/udp", func() error { return b.dns.ServePacket(ls.DNSUDP) })
	serve("dns/tcp", func() error { return b.dns.ServeListener(ls.DNSTCP) })
	m.log.Debug("egress attached", "sandbox", id, "phase", spec.Phase, "policy", pol.String())
	return caPEM, nil
}

// SetPolicy replaces sandbox id's policy (and phase) at once and cuts the open connections
// it no longer allows; it returns how many. A sandbox that is not attached (not running)
// is not an error: its new policy applies when it starts.
func (m *Manager) SetPolicy(id string, spec policy.Spec) (int, error) {
	comp, pol, err := compile(spec)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	b := m.bs[id]
	m.mu.Unlock()
	if b == nil {
		return 0, nil
	}
	b.mu.Lock()
	if b.phase != spec.Phase {
		b.dnsLog = map[string]bool{}
	}
	b.spec, b.comp, b.phase, b.pol = spec, comp, spec.Phase, pol
	b.mu.Unlock()
	m.recompileUsers(b, spec)
	// Upstream connections dialled under the old policy are not reused.
	b.resetUpstreams()
	cut := b.proxy.Recheck()
	m.log.Info("egress policy set", "sandbox", id, "phase", spec.Phase, "policy", pol.String(), "connections_cut", cut)
	return cut, nil
}

// Detach stops sandbox id's boundary: its listeners close, its connections are cut.
// Idempotent.
func (m *Manager) Detach(id string) {
	m.mu.Lock()
	b := m.bs[id]
	delete(m.bs, id)
	m.mu.Unlock()
	if b == nil {
		return
	}
	b.proxy.Close()
	b.dns.Close()
	b.ls.Close()
	b.wg.Wait()
	b.resetUpstreams()
	m.flushSummary(b)
	// The sandbox stopped: its tokens are revoked; a start mints new ones.
	m.revoke(id, m.provs.set(id, nil))
	m.log.Debug("egress detached", "sandbox", id)
}

// Close detaches every sandbox and flushes the journal.
func (m *Manager) Close() error {
	m.mu.Lock()
	ids := make([]string, 0, len(m.bs))
	for id := range m.bs {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	for _, id := range ids {
		m.Detach(id)
	}
	m.revoking.Wait()
	m.audits.Wait()
	return m.journal.close()
}

// Flush waits until every entry recorded so far is in the journal.
func (m *Manager) Flush() { m.journal.flush() }

func compile(spec policy.Spec) (*policy.Compiled, *policy.Policy, error) {
	comp, err := policy.CompileSpec(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	pol, ok := comp.Phase(spec.Phase)
	if !ok {
		return nil, nil, fmt.Errorf("policy has no phase %q: %w", spec.Phase, errdefs.ErrInvalidArgument)
	}
	return comp, pol, nil
}

// dial connects to an upstream address the proxy checked. No TCP keepalive (the proxy's
// idle timeout ends idle connections) and no address string to parse: four setsockopt
// calls and a resolver pass fewer per connection.
func dial(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{KeepAlive: -1}
	c, err := d.DialTCP(ctx, "tcp", netip.AddrPort{}, a)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// hostAddresses lists the host's own addresses, refreshed every 30 s.
func (m *Manager) hostAddresses() []netip.Addr {
	m.hostMu.Lock()
	defer m.hostMu.Unlock()
	if time.Since(m.hostAt) < 30*time.Second && m.hostAddrs != nil {
		return m.hostAddrs
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		m.log.Warn("listing host addresses", "err", err)
		return m.hostAddrs
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	m.hostAddrs, m.hostAt = out, time.Now()
	return out
}

func (m *Manager) recordConn(id string, ev proxy.Event) func(proxy.Outcome) {
	e := &Entry{
		Time: ev.Time, Sandbox: id, Phase: ev.Phase, Proto: "tcp", Name: ev.Name,
		Port: int(ev.Port), Allowed: ev.Allowed, Rule: ev.Rule, Reason: ev.Reason, Open: ev.Allowed, User: ev.User,
	}
	if ev.Addr.IsValid() {
		e.Addr = ev.Addr.String()
	}
	if !ev.Allowed {
		m.log.Info("egress denied", "sandbox", id, "user", e.User, "name", e.Name, "addr", e.Addr, "port", e.Port, "reason", e.Reason)
	}
	base := *e // e belongs to the journal from now on
	m.journal.add(e)
	return func(o proxy.Outcome) {
		f := base
		f.Open = false
		f.Up, f.Down, f.Duration, f.Error = o.Up, o.Down, o.Duration, o.Err
		if o.Upstream.IsValid() {
			f.Upstream = o.Upstream.String()
		}
		m.journal.finish(e, f)
	}
}

// recordDNS logs a DNS decision the first time it is made in a phase: a sandbox asking for
// the same name again does not grow the log.
func (m *Manager) recordDNS(b *boundary, q dns.Query) {
	if m.cfg.Observer != nil {
		m.cfg.Observer.DNSQuery(q.Verdict.Allow)
	}
	key := fmt.Sprintf("%t %t %s %s", q.Verdict.Allow, q.Verdict.Ask, q.User, q.Name)
	b.mu.Lock()
	seen := b.dnsLog[key]
	if !seen {
		if len(b.dnsLog) > 10000 {
			b.dnsLog = map[string]bool{}
		}
		b.dnsLog[key] = true
	}
	phase := b.phase
	b.mu.Unlock()
	if seen {
		return
	}
	e := &Entry{Time: time.Now(), Sandbox: b.id, Phase: phase, Proto: "dns", Name: q.Name,
		Allowed: q.Verdict.Allow, Rule: q.Verdict.Rule, Reason: q.Verdict.Reason, User: q.User}
	if q.Answer.IsValid() {
		e.Addr = q.Answer.String()
	}
	m.journal.add(e)
}
