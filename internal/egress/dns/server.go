// Package dns is a sandbox's only DNS server. It answers a name only if the sandbox's
// current policy allows it, and then with a synthetic IPv4 address from a reserved prefix
// that the Table maps back to the name: the egress proxy later turns a connection's
// destination address back into the name it dials. Denied and invalid names get NXDOMAIN.
//
// Nothing is ever forwarded upstream, so a query's name cannot carry data out of the
// sandbox, and no answer depends on what real DNS says. The sandbox sees no IPv6 (AAAA
// answers are empty) and no other record data.
package dns

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Verdict is the policy's decision on a name, with the rule and reason for the audit log.
type Verdict struct {
	Allow bool
	// Ask: the policy would hold a connection to the name for a person's decision (ask
	// mode). The name is answered like an allowed one, so the connection is made and the
	// proxy can hold it; the log says ask (Allow stays false).
	Ask          bool
	Rule, Reason string
}

// Query is one decided question, for the audit log.
type Query struct {
	Name    string // normalised: lowercase, no trailing dot (as asked when invalid)
	Type    string // "A", "AAAA", "TXT", "TYPE65534", …
	Verdict Verdict
	Answer  netip.Addr // the synthetic address when an A record was answered, else zero
	User    string     // the sandbox user who asked (Config.User), "" if not told apart
}

// Config configures a Server.
type Config struct {
	// Table holds the sandbox's synthetic addresses. Without one, allowed A queries get
	// SERVFAIL.
	Table *Table
	// Decide is the current policy; it may change between calls. It is called with a
	// normalised name, for every question about a valid name outside the reverse zones.
	// Without it every name is denied.
	Decide func(name string) Verdict
	// Log, if set, is called once per decided question (the caller dedupes). It is called
	// on the serving goroutine, so it should not block.
	Log func(Query)
	// TTL of answers, in seconds; 0 means 5.
	TTL uint32
	// User names the sandbox user a query comes from by its source address ("" for root
	// and users not told apart); with DecideUser, that user's own rules narrow the answer.
	// Optional (issue 15: per-user egress).
	User       func(src netip.AddrPort) string
	DecideUser func(user, name string) Verdict
}

const defaultTTL = 5

// Server answers one sandbox's DNS queries over UDP and TCP.
type Server struct {
	cfg Config

	mu      sync.Mutex
	closed  bool
	running map[*running]struct{}
}

type running struct {
	srv           *dns.Server
	started, done chan struct{}
}

// NewServer returns a server for cfg.
func NewServer(cfg Config) *Server {
	if cfg.TTL == 0 {
		cfg.TTL = defaultTTL
	}
	return &Server{cfg: cfg, running: map[*running]struct{}{}}
}

// ServePacket answers DNS over UDP on pc until Close, then returns nil; it returns an
// error if serving fails otherwise. It takes ownership of pc and closes it.
func (s *Server) ServePacket(pc net.PacketConn) error {
	return s.serve(&dns.Server{PacketConn: pc, Net: "udp"}, pc, true)
}

// ServeListener answers DNS over TCP on l until Close, then returns nil; it returns an
// error if serving fails otherwise. It takes ownership of l and closes it.
func (s *Server) ServeListener(l net.Listener) error {
	return s.serve(&dns.Server{Listener: l, Net: "tcp"}, l, false)
}

func (s *Server) serve(srv *dns.Server, c io.Closer, datagram bool) error {
	r := &running{srv: srv, started: make(chan struct{}), done: make(chan struct{})}
	srv.Handler = dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		resp := s.AnswerFor(req, s.userOf(w.RemoteAddr()))
		resp.Compress = true
		if datagram {
			resp.Truncate(dns.MinMsgSize) // no EDNS: a UDP client takes 512 bytes
		}
		_ = w.WriteMsg(resp)
	})
	srv.NotifyStartedFunc = func() { close(r.started) }
	srv.ReadTimeout = 2 * time.Second
	srv.WriteTimeout = 2 * time.Second
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return nil
	}
	s.running[r] = struct{}{}
	s.mu.Unlock()

	err := srv.ActivateAndServe()
	c.Close() // miekg closes it too once started; not if it fails before
	close(r.done)
	s.mu.Lock()
	delete(s.running, r)
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil
	}
	return err
}

// Close stops every ServePacket and ServeListener, waiting up to 5 s for answers in
// flight. It is idempotent; Serve calls after Close return at once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	rs := make([]*running, 0, len(s.running))
	for r := range s.running {
		rs = append(rs, r)
	}
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, r := range rs {
		select {
		case <-r.started:
		case <-r.done: // failed before it started
			continue
		}
		if err := r.srv.ShutdownContext(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Answer returns the reply to req; it is the whole of the server's logic, exported for
// tests and fuzzing. It copes with any message, including nil and ones without questions:
//
//   - a response, or not exactly one question: FORMERR; an opcode other than QUERY:
//     NOTIMP; a class other than IN: REFUSED;
//   - an invalid name or an IPv4 literal: NXDOMAIN (logged as denied);
//   - a name under in-addr.arpa naming an address of the table that holds a name: the name
//     for PTR, no records for other types; any other reverse name: NXDOMAIN. The policy is
//     not asked.
//   - otherwise the policy decides: denied is NXDOMAIN; allowed (or asked: the proxy
//     holds the connection for a decision) is one A record with the name's synthetic
//     address for A and no records (NOERROR) for any other type.
//
// Replies are authoritative, say recursion is available, and carry req's ID and question.
func (s *Server) Answer(req *dns.Msg) *dns.Msg { return s.AnswerFor(req, "") }

// AnswerFor is Answer for a query of sandbox user user: a name the policy allows is
// answered only when Config.DecideUser allows it for user too.
func (s *Server) AnswerFor(req *dns.Msg, user string) *dns.Msg {
	m := new(dns.Msg)
	m.Authoritative = true
	m.RecursionAvailable = true
	if req == nil {
		m.Response = true
		m.Rcode = dns.RcodeFormatError
		return m
	}
	m.SetReply(req)
	if len(m.Question) == 1 { // only a hand-made request has a relative name; keep the reply packable
		m.Question[0].Name = dns.Fqdn(m.Question[0].Name)
	}
	switch {
	case req.Response:
		m.Rcode = dns.RcodeFormatError
	case req.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
	case len(req.Question) != 1:
		m.Rcode = dns.RcodeFormatError
	case req.Question[0].Qclass != dns.ClassINET:
		m.Rcode = dns.RcodeRefused
	default:
		s.answer(m, m.Question[0], user)
	}
	return m
}

// userOf names the user of a query from a (Config.User).
func (s *Server) userOf(a net.Addr) string {
	if s.cfg.User == nil || a == nil {
		return ""
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return ""
	}
	return s.cfg.User(ap)
}

func (s *Server) answer(m *dns.Msg, q dns.Question, user string) {
	name, reason := normalize(q.Name)
	query := Query{Name: name, Type: dns.Type(q.Qtype).String(), User: user}
	defer func() {
		if s.cfg.Log != nil {
			s.cfg.Log(query)
		}
	}()
	if reason != "" {
		query.Name = q.Name
		query.Verdict = Verdict{Reason: reason}
		m.Rcode = dns.RcodeNameError
		return
	}

	if isReverse(name) {
		target, ok := s.reverse(name)
		if !ok {
			query.Verdict = Verdict{Reason: "reverse lookup of an address with no name"}
			m.Rcode = dns.RcodeNameError
			return
		}
		query.Verdict = Verdict{Allow: true, Reason: "reverse lookup of a synthetic address"}
		if q.Qtype == dns.TypePTR {
			m.Answer = []dns.RR{&dns.PTR{Hdr: s.hdr(q, dns.TypePTR), Ptr: dns.Fqdn(target)}}
		}
		return
	}

	if s.cfg.DecideUser != nil {
		query.Verdict = s.cfg.DecideUser(user, name)
	} else if s.cfg.Decide != nil {
		query.Verdict = s.cfg.Decide(name)
	} else {
		query.Verdict = Verdict{Reason: "no policy"}
	}
	if !query.Verdict.Allow && !query.Verdict.Ask {
		m.Rcode = dns.RcodeNameError
		return
	}
	if q.Qtype != dns.TypeA {
		return // NOERROR, no records: the name exists, with nothing of that type
	}
	if s.cfg.Table == nil {
		m.Rcode = dns.RcodeServerFailure
		return
	}
	a, err := s.cfg.Table.Addr(name)
	if err != nil {
		m.Rcode = dns.RcodeServerFailure
		return
	}
	query.Answer = a
	m.Answer = []dns.RR{&dns.A{Hdr: s.hdr(q, dns.TypeA), A: a.AsSlice()}}
}

func (s *Server) hdr(q dns.Question, typ uint16) dns.RR_Header {
	return dns.RR_Header{Name: q.Name, Rrtype: typ, Class: dns.ClassINET, Ttl: s.cfg.TTL}
}

const (
	reverse4 = ".in-addr.arpa"
	reverse6 = ".ip6.arpa"
)

func isReverse(name string) bool {
	return name == reverse4[1:] || name == reverse6[1:] ||
		strings.HasSuffix(name, reverse4) || strings.HasSuffix(name, reverse6)
}

// reverse returns the name held by the address a reverse name names.
func (s *Server) reverse(name string) (string, bool) {
	if s.cfg.Table == nil {
		return "", false
	}
	labels, ok := strings.CutSuffix(name, reverse4)
	if !ok {
		return "", false
	}
	parts := strings.Split(labels, ".")
	if len(parts) != 4 {
		return "", false
	}
	var b [4]byte
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil || strconv.FormatUint(n, 10) != p { // no leading zeros or signs
			return "", false
		}
		b[3-i] = byte(n)
	}
	return s.cfg.Table.Name(netip.AddrFrom4(b))
}

// normalize returns q lowercased without its trailing dot, and a reason when it is not a
// name the server answers: names are labels of letters, digits, '-' and '_', 1–63 bytes
// each and 253 in all, the last of which is not a number; an IPv4 literal is refused too.
// Names arrive in miekg's presentation format, so any escaped byte ("\000", "\.") is
// invalid.
func normalize(q string) (string, string) {
	const invalid = "invalid name"
	name := strings.TrimSuffix(q, ".")
	if len(name) == 0 || len(name) > 253 {
		return "", invalid
	}
	if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
		return "", "IP literal"
	}
	var b strings.Builder
	b.Grow(len(name))
	label, last := 0, 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case c == '.':
			if label == 0 {
				return "", invalid
			}
			label, last = 0, i+1
			b.WriteByte(c)
			continue
		default:
			return "", invalid
		}
		b.WriteByte(c)
		if label++; label > 63 {
			return "", invalid
		}
	}
	if label == 0 || numeric(name[last:]) {
		return "", invalid
	}
	return b.String(), ""
}

// numeric reports whether a label is a decimal or 0x-hex number, which some resolvers read
// as part of an address (inet_aton).
func numeric(label string) bool {
	if len(label) >= 2 && label[0] == '0' && (label[1] == 'x' || label[1] == 'X') {
		for _, c := range []byte(label[2:]) {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		return true
	}
	for _, c := range []byte(label) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
