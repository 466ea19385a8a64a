package dns

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// allowOnly is the test policy: allowed.example and its subdomains.
func allowOnly(name string) Verdict {
	if name == "allowed.example" || strings.HasSuffix(name, ".allowed.example") {
		return Verdict{Allow: true, Rule: "*.allowed.example", Reason: "allowed by rule"}
	}
	return Verdict{Reason: "default deny"}
}

// harness is a Server over a /16 with the test policy, recording what it decides and logs.
type harness struct {
	*Server
	table *Table

	mu      sync.Mutex
	decided []string
	logged  []Query
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	h := &harness{table: newTable(t, "198.19.0.0/16")}
	h.Server = NewServer(Config{
		Table: h.table,
		Decide: func(name string) Verdict {
			h.mu.Lock()
			h.decided = append(h.decided, name)
			h.mu.Unlock()
			return allowOnly(name)
		},
		Log: func(q Query) {
			h.mu.Lock()
			h.logged = append(h.logged, q)
			h.mu.Unlock()
		},
	})
	return h
}

// take returns and forgets what was decided and logged.
func (h *harness) take() (decided []string, logged []Query) {
	h.mu.Lock()
	defer h.mu.Unlock()
	decided, logged = h.decided, h.logged
	h.decided, h.logged = nil, nil
	return decided, logged
}

func question(name string, typ uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, typ)
	return m
}

func TestAnswer(t *testing.T) {
	h := newHarness(t)
	synthetic := mustAddr(t, h.table, "allowed.example")
	unnamed := netip.MustParseAddr("198.19.255.254")
	if _, ok := h.table.Name(unnamed); ok {
		t.Fatal("test expects 198.19.255.254 to be free")
	}

	type want struct {
		rcode   int
		answer  string // the A address or PTR name answered; "" for none
		decided string // the name Decide was called with; "" for not called
		log     *Query // the one Query logged; nil for none
	}
	deny := func(name, typ string) *Query {
		return &Query{Name: name, Type: typ, Verdict: Verdict{Reason: "default deny"}}
	}
	allow := func(name, typ string, a netip.Addr) *Query {
		return &Query{Name: name, Type: typ, Answer: a, Verdict: allowOnly("allowed.example")}
	}
	multi := question("allowed.example.", dns.TypeA)
	multi.Question = append(multi.Question, dns.Question{Name: "denied.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	none := question("allowed.example.", dns.TypeA)
	none.Question = nil
	update := question("allowed.example.", dns.TypeSOA)
	update.Opcode = dns.OpcodeUpdate
	notify := question("allowed.example.", dns.TypeSOA)
	notify.Opcode = dns.OpcodeNotify
	chaos := question("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	response := question("allowed.example.", dns.TypeA)
	response.Response = true

	for _, tc := range []struct {
		name string
		req  *dns.Msg
		want want
	}{
		{"allowed A", question("allowed.example.", dns.TypeA),
			want{dns.RcodeSuccess, synthetic.String(), "allowed.example", allow("allowed.example", "A", synthetic)}},
		{"uppercase, no trailing dot", question("ALLOWED.Example", dns.TypeA),
			want{dns.RcodeSuccess, synthetic.String(), "allowed.example", allow("allowed.example", "A", synthetic)}},
		{"denied A", question("denied.example.", dns.TypeA),
			want{dns.RcodeNameError, "", "denied.example", deny("denied.example", "A")}},
		{"allowed AAAA", question("allowed.example.", dns.TypeAAAA),
			want{dns.RcodeSuccess, "", "allowed.example", allow("allowed.example", "AAAA", netip.Addr{})}},
		{"denied AAAA", question("denied.example.", dns.TypeAAAA),
			want{dns.RcodeNameError, "", "denied.example", deny("denied.example", "AAAA")}},
		{"allowed TXT", question("x.allowed.example.", dns.TypeTXT),
			want{dns.RcodeSuccess, "", "x.allowed.example", allow("x.allowed.example", "TXT", netip.Addr{})}},
		{"denied TXT", question("c2VjcmV0.attacker.example.", dns.TypeTXT),
			want{dns.RcodeNameError, "", "c2vjcmv0.attacker.example", deny("c2vjcmv0.attacker.example", "TXT")}},
		{"allowed MX", question("allowed.example.", dns.TypeMX),
			want{dns.RcodeSuccess, "", "allowed.example", allow("allowed.example", "MX", netip.Addr{})}},
		{"denied MX", question("denied.example.", dns.TypeMX),
			want{dns.RcodeNameError, "", "denied.example", deny("denied.example", "MX")}},
		{"allowed HTTPS", question("allowed.example.", dns.TypeHTTPS),
			want{dns.RcodeSuccess, "", "allowed.example", allow("allowed.example", "HTTPS", netip.Addr{})}},
		{"unknown type", question("allowed.example.", 65280),
			want{dns.RcodeSuccess, "", "allowed.example", allow("allowed.example", "TYPE65280", netip.Addr{})}},
		{"escaped byte", question(`a\000b.allowed.example.`, dns.TypeA),
			want{dns.RcodeNameError, "", "", &Query{Name: `a\000b.allowed.example.`, Type: "A", Verdict: Verdict{Reason: "invalid name"}}}},
		{"escaped dot", question(`a\.allowed.example.`, dns.TypeA),
			want{dns.RcodeNameError, "", "", &Query{Name: `a\.allowed.example.`, Type: "A", Verdict: Verdict{Reason: "invalid name"}}}},
		{"root", question(".", dns.TypeNS),
			want{dns.RcodeNameError, "", "", &Query{Name: ".", Type: "NS", Verdict: Verdict{Reason: "invalid name"}}}},
		{"IPv4 literal", question("192.0.2.1.", dns.TypeA),
			want{dns.RcodeNameError, "", "", &Query{Name: "192.0.2.1.", Type: "A", Verdict: Verdict{Reason: "IP literal"}}}},
		{"octal address", question("0177.0.0.1.", dns.TypeA),
			want{dns.RcodeNameError, "", "", &Query{Name: "0177.0.0.1.", Type: "A", Verdict: Verdict{Reason: "invalid name"}}}},
		{"PTR of a synthetic address", question(reverseName(synthetic), dns.TypePTR),
			want{dns.RcodeSuccess, "allowed.example.", "", &Query{Name: strings.TrimSuffix(reverseName(synthetic), "."), Type: "PTR",
				Verdict: Verdict{Allow: true, Reason: "reverse lookup of a synthetic address"}}}},
		{"PTR of a free synthetic address", question(reverseName(unnamed), dns.TypePTR),
			want{dns.RcodeNameError, "", "", &Query{Name: strings.TrimSuffix(reverseName(unnamed), "."), Type: "PTR",
				Verdict: Verdict{Reason: "reverse lookup of an address with no name"}}}},
		{"PTR of another address", question("1.0.0.127.in-addr.arpa.", dns.TypePTR),
			want{dns.RcodeNameError, "", "", &Query{Name: "1.0.0.127.in-addr.arpa", Type: "PTR",
				Verdict: Verdict{Reason: "reverse lookup of an address with no name"}}}},
		{"PTR of IPv6", question("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa.", dns.TypePTR),
			want{dns.RcodeNameError, "", "", &Query{Name: "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.ip6.arpa", Type: "PTR",
				Verdict: Verdict{Reason: "reverse lookup of an address with no name"}}}},
		{"A of a reverse name", question(reverseName(synthetic), dns.TypeA),
			want{dns.RcodeSuccess, "", "", &Query{Name: strings.TrimSuffix(reverseName(synthetic), "."), Type: "A",
				Verdict: Verdict{Allow: true, Reason: "reverse lookup of a synthetic address"}}}},
		{"two questions", multi, want{rcode: dns.RcodeFormatError}},
		{"no question", none, want{rcode: dns.RcodeFormatError}},
		{"UPDATE", update, want{rcode: dns.RcodeNotImplemented}},
		{"NOTIFY", notify, want{rcode: dns.RcodeNotImplemented}},
		{"class CHAOS", chaos, want{rcode: dns.RcodeRefused}},
		{"a response", response, want{rcode: dns.RcodeFormatError}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.take()
			resp := h.Answer(tc.req)
			if resp.Id != tc.req.Id || !resp.Response || !resp.Authoritative || !resp.RecursionAvailable {
				t.Errorf("header: %+v", resp.MsgHdr)
			}
			var q dns.Question
			if len(tc.req.Question) > 0 {
				q = tc.req.Question[0]
				q.Name = dns.Fqdn(q.Name)
				if len(resp.Question) != 1 || resp.Question[0] != q {
					t.Errorf("question %v; want %v", resp.Question, q)
				}
			}
			if resp.Rcode != tc.want.rcode {
				t.Errorf("rcode %s; want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tc.want.rcode])
			}
			var answer string
			switch {
			case len(resp.Answer) > 1:
				t.Errorf("answers: %v", resp.Answer)
			case len(resp.Answer) == 1:
				rr := resp.Answer[0]
				if rr.Header().Name != q.Name || rr.Header().Ttl != defaultTTL {
					t.Errorf("answer header: %v", rr.Header())
				}
				switch rr := rr.(type) {
				case *dns.A:
					answer = rr.A.String()
				case *dns.PTR:
					answer = rr.Ptr
				}
			}
			if answer != tc.want.answer {
				t.Errorf("answer %q; want %q", answer, tc.want.answer)
			}
			if len(resp.Ns)+len(resp.Extra) != 0 {
				t.Errorf("authority/additional: %v %v", resp.Ns, resp.Extra)
			}
			decided, logged := h.take()
			if (tc.want.decided == "" && len(decided) != 0) || (tc.want.decided != "" && (len(decided) != 1 || decided[0] != tc.want.decided)) {
				t.Errorf("decided %q; want %q", decided, tc.want.decided)
			}
			if (tc.want.log == nil && len(logged) != 0) || (tc.want.log != nil && (len(logged) != 1 || logged[0] != *tc.want.log)) {
				t.Errorf("logged %+v; want %+v", logged, tc.want.log)
			}
			if _, err := resp.Pack(); err != nil {
				t.Errorf("reply does not pack: %v", err)
			}
		})
	}

	if resp := h.Answer(nil); resp.Rcode != dns.RcodeFormatError {
		t.Errorf("nil request: %v", resp)
	}
}

func TestAnswerConfig(t *testing.T) {
	// No policy denies everything; no table cannot answer A; TTL is configurable.
	tab := newTable(t, "198.19.0.0/24")
	for _, tc := range []struct {
		cfg   Config
		rcode int
		ttl   uint32
	}{
		{Config{Table: tab}, dns.RcodeNameError, 0},
		{Config{Decide: allowOnly}, dns.RcodeServerFailure, 0},
		{Config{Table: tab, Decide: allowOnly, TTL: 60}, dns.RcodeSuccess, 60},
	} {
		resp := NewServer(tc.cfg).Answer(question("allowed.example.", dns.TypeA))
		if resp.Rcode != tc.rcode || (tc.ttl != 0 && (len(resp.Answer) != 1 || resp.Answer[0].Header().Ttl != tc.ttl)) {
			t.Errorf("%+v: %v", tc.cfg, resp)
		}
	}
}

// reverseName returns a's in-addr.arpa name.
func reverseName(a netip.Addr) string {
	name, err := dns.ReverseAddr(a.String())
	if err != nil {
		panic(err)
	}
	return name
}

// countingServer is a stand-in for a real upstream resolver: it answers every query and
// counts them.
func countingServer(t *testing.T) (addr string, count *atomic.Int64) {
	t.Helper()
	count = new(atomic.Int64)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, NotifyStartedFunc: func() { close(started) },
		Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
			count.Add(1)
			m := new(dns.Msg)
			m.SetReply(r)
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A: net.IPv4(192, 0, 2, 99)}}
			w.WriteMsg(m)
		})}
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String(), count
}

func TestServeUDPAndTCP(t *testing.T) {
	// The upstream a forwarding server would use. Ours has none: nothing in Config names
	// one, and this test shows no query reaches it.
	upstream, upstreamQueries := countingServer(t)

	h := newHarness(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 2)
	go func() { served <- h.ServePacket(pc) }()
	go func() { served <- h.ServeListener(l) }()

	synthetic := mustAddr(t, h.table, "allowed.example")
	for _, tc := range []struct{ net, addr string }{{"udp", pc.LocalAddr().String()}, {"tcp", l.Addr().String()}} {
		c := &dns.Client{Net: tc.net, Timeout: 2 * time.Second}
		exchange := func(name string, typ uint16) *dns.Msg {
			t.Helper()
			var resp *dns.Msg
			var err error
			for range 50 { // the server may not be reading yet
				if resp, _, err = c.Exchange(question(name, typ), tc.addr); err == nil {
					return resp
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Fatalf("%s %s: %v", tc.net, name, err)
			return nil
		}
		resp := exchange("allowed.example.", dns.TypeA)
		if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 || resp.Answer[0].(*dns.A).A.String() != synthetic.String() {
			t.Errorf("%s allowed: %v", tc.net, resp)
		}
		for _, typ := range []uint16{dns.TypeA, dns.TypeTXT, dns.TypeAAAA} {
			resp = exchange("c2VjcmV0.attacker.example.", typ)
			if resp.Rcode != dns.RcodeNameError || len(resp.Answer) != 0 {
				t.Errorf("%s denied %s: %v", tc.net, dns.TypeToString[typ], resp)
			}
		}
		// A long allowed name still fits a 512-byte UDP reply.
		long := strings.Repeat(strings.Repeat("a", 60)+".", 3) + "allowed.example."
		if resp = exchange(long, dns.TypeA); resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 || resp.Truncated {
			t.Errorf("%s long name: %v", tc.net, resp)
		}
	}
	// Garbage does not stop the UDP server.
	conn, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("\x00\x01garbage that is not DNS"))
	conn.Close()
	c := &dns.Client{Timeout: 2 * time.Second}
	if resp, _, err := c.Exchange(question("allowed.example.", dns.TypeA), pc.LocalAddr().String()); err != nil || resp.Rcode != dns.RcodeSuccess {
		t.Errorf("after garbage: %v, %v", resp, err)
	}

	if n := upstreamQueries.Load(); n != 0 {
		t.Errorf("upstream got %d queries", n)
	}
	// The counter counts: a query sent to the upstream directly arrives.
	if _, _, err := c.Exchange(question("allowed.example.", dns.TypeA), upstream); err != nil || upstreamQueries.Load() != 1 {
		t.Errorf("upstream check: %v, %d queries", err, upstreamQueries.Load())
	}

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve returned %v after Close", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("serve did not return after Close")
		}
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// Serving after Close returns at once and releases the socket.
	pc2, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ServePacket(pc2); err != nil {
		t.Errorf("ServePacket after Close: %v", err)
	}
	if _, err := pc2.WriteTo([]byte{0}, pc2.LocalAddr()); err == nil {
		t.Error("socket still open after ServePacket on a closed Server")
	}
}

func TestCloseRacesServe(t *testing.T) {
	// Close right after Serve starts (before or after miekg has started) still stops it.
	for range 20 {
		s := NewServer(Config{})
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.ServePacket(pc) }()
		s.Close()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("ServePacket did not return")
		}
	}
}
