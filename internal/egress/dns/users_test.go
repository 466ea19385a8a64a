package dns

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// TestAnswerForUser: with DecideUser, the answer and the logged query are the user's.
func TestAnswerForUser(t *testing.T) {
	table, err := NewTable(netip.MustParsePrefix("198.19.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	var logged []Query
	s := NewServer(Config{
		Table:  table,
		Decide: func(string) Verdict { return Verdict{Allow: true} },
		DecideUser: func(user, name string) Verdict {
			return Verdict{Allow: user != "bob" || name == "api.test", Reason: user}
		},
		Log: func(q Query) { logged = append(logged, q) },
	})
	for _, c := range []struct {
		user, name string
		rcode      int
	}{
		{"", "allowed.test", dns.RcodeSuccess},
		{"alice", "allowed.test", dns.RcodeSuccess},
		{"bob", "allowed.test", dns.RcodeNameError},
		{"bob", "api.test", dns.RcodeSuccess},
	} {
		req := new(dns.Msg)
		req.SetQuestion(c.name+".", dns.TypeA)
		if got := s.AnswerFor(req, c.user).Rcode; got != c.rcode {
			t.Errorf("%s asks %s: rcode %d, want %d", c.user, c.name, got, c.rcode)
		}
		if q := logged[len(logged)-1]; q.User != c.user || q.Name != c.name {
			t.Errorf("logged %+v", q)
		}
	}
}
