package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

func compileSpecPhase(t *testing.T, s Spec) *Policy {
	t.Helper()
	c, err := CompileSpec(s)
	if err != nil {
		t.Fatalf("CompileSpec(%+v): %v", s, err)
	}
	p, _ := c.Phase(s.Phase)
	return p
}

func TestDecideAsk(t *testing.T) {
	type verdict uint8
	const (
		deny verdict = iota
		allow
		ask
	)
	tests := []struct {
		name   string
		rules  Rules
		askAll bool
		req    Request
		want   verdict
		rule   string
	}{
		{name: "ask rule name", rules: Rules{Ask: []string{"example.com:443"}}, req: named("example.com", 443), want: ask, rule: "ask example.com:443"},
		{name: "ask rule other port", rules: Rules{Ask: []string{"example.com:443"}}, req: named("example.com", 80), want: deny},
		{name: "ask rule wildcard", rules: Rules{Ask: []string{"*.example.com"}}, req: named("a.b.example.com", 443), want: ask, rule: "ask *.example.com"},
		{name: "ask rule wildcard not parent", rules: Rules{Ask: []string{"*.example.com"}}, req: named("example.com", 443), want: deny},
		{name: "allow beats ask", rules: Rules{Allow: []string{"example.com"}, Ask: []string{"example.com"}}, req: named("example.com", 443), want: allow, rule: "allow example.com"},
		{name: "deny beats ask", rules: Rules{Deny: []string{"example.com"}, Ask: []string{"example.com"}}, req: named("example.com", 443), want: deny, rule: "deny example.com"},
		{name: "deny beats ask-all", rules: Rules{Deny: []string{"*.evil.test"}}, askAll: true, req: named("x.evil.test", 443), want: deny, rule: "deny *.evil.test"},
		{name: "CIDR deny beats ask-all", rules: Rules{Deny: []string{"10.0.0.0/8"}}, askAll: true, req: Request{Name: "db.test", Addr: netip.MustParseAddr("10.1.2.3"), Port: 5432}, want: deny, rule: "deny 10.0.0.0/8"},
		{name: "allow beats ask-all", rules: Rules{Allow: []string{"example.com:443"}}, askAll: true, req: named("example.com", 443), want: allow, rule: "allow example.com:443"},
		{name: "ask-all asks the rest", rules: Rules{Allow: []string{"example.com:443"}}, askAll: true, req: named("other.test", 443), want: ask, rule: "ask-all"},
		{name: "ask-all other port", rules: Rules{Allow: []string{"example.com:443"}}, askAll: true, req: named("example.com", 22), want: ask, rule: "ask-all"},
		{name: "ask rule before ask-all", rules: Rules{Ask: []string{"example.com"}}, askAll: true, req: named("example.com", 443), want: ask, rule: "ask example.com"},
		{name: "ask-all direct IP", rules: Rules{}, askAll: true, req: direct("192.0.2.1", 443), want: ask, rule: "ask-all"},
		{name: "ask CIDR direct", rules: Rules{Ask: []string{"192.0.2.0/24:443"}}, req: direct("192.0.2.1", 443), want: ask, rule: "ask 192.0.2.0/24:443"},
		{name: "ask CIDR never a name", rules: Rules{Ask: []string{"192.0.2.0/24"}}, req: Request{Name: "x.test", Addr: netip.MustParseAddr("192.0.2.1"), Port: 443}, want: deny},
		{name: "claimed name denied beats ask-all", rules: Rules{Deny: []string{"evil.test"}}, askAll: true, req: Request{Addr: netip.MustParseAddr("192.0.2.1"), Port: 443, Claimed: "evil.test"}, want: deny, rule: "deny evil.test"},
		{name: "allow-all never asks", rules: Rules{Net: NetAllowAll, Ask: []string{"example.com"}}, askAll: true, req: named("example.com", 443), want: allow, rule: "net allow-all"},
		{name: "deny-all never asks", rules: Rules{Net: NetDenyAll}, askAll: true, req: named("example.com", 443), want: deny, rule: "net deny-all"},
		{name: "invalid name not asked", rules: Rules{}, askAll: true, req: named("exa mple", 443), want: deny},
		{name: "DNS question: ask rule on a port", rules: Rules{Ask: []string{"example.com:443"}}, req: named("example.com", 0), want: ask},
		{name: "ask set", rules: Rules{Ask: []string{"mine"}}, req: named("b.test", 443), want: ask, rule: "ask mine"},
	}
	sets := map[string][]string{"mine": {"a.test", "b.test:443"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Single(tt.rules)
			s.Sets = sets
			s.AskAll = tt.askAll
			p := compileSpecPhase(t, s)
			d := p.Decide(tt.req)
			got := deny
			switch {
			case d.Allow && d.Ask:
				t.Fatalf("Decide(%+v) = %+v: both allow and ask", tt.req, d)
			case d.Allow:
				got = allow
			case d.Ask:
				got = ask
			}
			if got != tt.want {
				t.Fatalf("Decide(%+v) = %+v, want verdict %d", tt.req, d, tt.want)
			}
			if tt.rule != "" && d.Rule != tt.rule {
				t.Fatalf("Decide(%+v).Rule = %q, want %q", tt.req, d.Rule, tt.rule)
			}
			if d.Ask && !strings.Contains(d.Reason, "held for approval") {
				t.Fatalf("ask reason %q does not say it is held", d.Reason)
			}
		})
	}
}

func TestAskCompileErrors(t *testing.T) {
	for _, tt := range []struct {
		spec Spec
		want string
	}{
		{Single(Rules{Net: NetDenyAll, Ask: []string{"a.test"}}), "net deny-all takes no ask rules"},
		{Single(Rules{Ask: []string{"registries"}}), "the set has HTTP rules"},
		{Single(Rules{Ask: []string{"http://a.test"}}), `ask rule "http://a.test"`},
		{Spec{Phases: map[string]Rules{"run": {}}, Phase: "run", AskAll: true, AskWait: "soon"}, "not a duration"},
		{Spec{Phases: map[string]Rules{"run": {}}, Phase: "run", AskAll: true, AskWait: "10ms"}, "between 1s and 24h"},
		{Spec{Phases: map[string]Rules{"run": {}}, Phase: "run", AskAll: true, AskWait: "25h"}, "between 1s and 24h"},
	} {
		_, err := CompileSpec(tt.spec)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CompileSpec(%+v) = %v, want an invalid-argument error containing %q", tt.spec, err, tt.want)
		}
	}
}

func TestAskWaitAndSummary(t *testing.T) {
	s := Spec{Phases: map[string]Rules{"run": {Allow: []string{"a.test"}, Ask: []string{"B.test:443"}}}, Phase: "run", AskAll: true, AskWait: "90s"}
	c, err := CompileSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	if c.AskWait() != 90*time.Second {
		t.Fatalf("AskWait = %v", c.AskWait())
	}
	p, _ := c.Phase("run")
	if got, want := p.String(), "ask-all; allow a.test; ask b.test:443"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if !s.HasAsk() || Single(Rules{Allow: []string{"a.test"}}).HasAsk() {
		t.Fatal("HasAsk wrong")
	}
}

func TestDecideAskNoAlloc(t *testing.T) {
	s := Single(Rules{Allow: []string{"a.test"}, Ask: []string{"*.example.com"}})
	s.AskAll = true
	p := compileSpecPhase(t, s)
	for _, req := range []Request{named("x.example.com", 443), named("other.test", 443), direct("192.0.2.1", 443)} {
		if n := testing.AllocsPerRun(100, func() { p.Decide(req) }); n != 0 {
			t.Errorf("Decide(%+v) allocates %v times", req, n)
		}
	}
}

func TestAskRuleAndWithAllowRule(t *testing.T) {
	for _, tt := range []struct {
		req  Request
		want string
		ok   bool
	}{
		{named("API.Example.com", 443), "api.example.com:443", true},
		{direct("192.0.2.1", 8080), "192.0.2.1:8080", true},
		{Request{Addr: netip.MustParseAddr("::ffff:192.0.2.1"), Port: 80}, "192.0.2.1:80", true},
		{direct("2001:db8::1", 443), "", false},
		{named("a.test", 0), "", false},
	} {
		got, ok := AskRule(tt.req)
		if got != tt.want || ok != tt.ok {
			t.Errorf("AskRule(%+v) = %q, %v; want %q, %v", tt.req, got, ok, tt.want, tt.ok)
		}
	}
	base := Spec{Phases: map[string]Rules{"run": {Allow: []string{"a.test"}}, "setup": {Allow: []string{"registries"}}}, Phase: "run", AskAll: true}
	s, err := base.WithAllowRule("run", "b.test:443")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Phases["run"].Allow; len(got) != 2 || got[1] != "b.test:443" {
		t.Fatalf("allow = %v", got)
	}
	if len(base.Phases["run"].Allow) != 1 {
		t.Fatalf("WithAllowRule changed its receiver: %v", base.Phases["run"].Allow)
	}
	if !s.AskAll {
		t.Fatal("ask_all lost")
	}
	again, err := s.WithAllowRule("run", "b.test:443")
	if err != nil || len(again.Phases["run"].Allow) != 2 {
		t.Fatalf("added twice: %v, %v", again.Phases["run"].Allow, err)
	}
	p := compileSpecPhase(t, s)
	if d := p.Decide(named("b.test", 443)); !d.Allow {
		t.Fatalf("added rule does not allow: %+v", d)
	}
	if _, err := base.WithAllowRule("nope", "b.test:443"); err == nil {
		t.Fatal("no error for a missing phase")
	}
	if _, err := base.WithAllowRule("run", "b.test:0"); err == nil {
		t.Fatal("no error for a bad rule")
	}
}

func TestParseFileAsk(t *testing.T) {
	s, err := ParseFile([]byte("ask_all: true\nask_wait: 90s\nallow: [a.test]\nask: [b.test]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.AskAll || s.AskWait != "90s" || len(s.Phases["run"].Ask) != 1 {
		t.Fatalf("spec = %+v", s)
	}
	if _, err := ParseFile([]byte("ask: [b.test]\nphases: {run: {}}\n")); err == nil {
		t.Fatal("top-level ask with phases accepted")
	}
	s, err = ParseFile([]byte("phases:\n  run: {ask: [b.test]}\n"))
	if err != nil || len(s.Phases["run"].Ask) != 1 {
		t.Fatalf("phase ask: %+v, %v", s, err)
	}
}
