package dns

import (
	"testing"

	"github.com/miekg/dns"
)

// A name the policy would hold for approval is answered like an allowed one (so the
// connection is made and the proxy can hold it), and its log entry says ask.
func TestAnswerAsk(t *testing.T) {
	table := newTable(t, "198.19.0.0/16")
	var logged []Query
	s := NewServer(Config{
		Table: table,
		Decide: func(name string) Verdict {
			switch name {
			case "asked.example":
				return Verdict{Ask: true, Rule: "ask-all", Reason: "held for approval"}
			case "allowed.example":
				return Verdict{Allow: true, Rule: "allow allowed.example"}
			}
			return Verdict{Reason: "no allow rule matches"}
		},
		Log: func(q Query) { logged = append(logged, q) },
	})
	m := s.Answer(question("asked.example.", dns.TypeA))
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("asked name: rcode %d, answer %v", m.Rcode, m.Answer)
	}
	want := mustAddr(t, table, "asked.example")
	if got := m.Answer[0].(*dns.A).A.String(); got != want.String() {
		t.Fatalf("asked name answered %s, want its synthetic address %s", got, want)
	}
	if len(logged) != 1 || !logged[0].Verdict.Ask || logged[0].Verdict.Allow || logged[0].Answer != want {
		t.Fatalf("logged %+v", logged)
	}
	if m := s.Answer(question("asked.example.", dns.TypeAAAA)); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 0 {
		t.Fatalf("AAAA of an asked name: rcode %d, answer %v", m.Rcode, m.Answer)
	}
	if m := s.Answer(question("denied.example.", dns.TypeA)); m.Rcode != dns.RcodeNameError {
		t.Fatalf("denied name: rcode %d", m.Rcode)
	}
}
