package proxy

import (
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/egress/policy"
)

func TestNarrow(t *testing.T) {
	bobRules, err := policy.Compile(policy.Rules{Allow: []string{"api.test"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := New(Config{UserPolicy: func(user string) *policy.Policy {
		if user == "bob" {
			return bobRules
		}
		return nil
	}})
	defer p.Close()
	allowed := Event{Allowed: true, Rule: "allow allowed.test", Reason: "matches"}
	for _, c := range []struct {
		name         string
		ev           Event
		user, refuse string
		host         string
		allow        bool
		reason       string
	}{
		{"root keeps the sandbox's decision", allowed, "", "", "allowed.test", true, "matches"},
		{"a user without rules keeps it", allowed, "alice", "", "allowed.test", true, "matches"},
		{"bob's rules deny", allowed, "bob", "", "allowed.test", false, "user bob's own rules"},
		{"bob's rules allow", allowed, "bob", "", "api.test", true, "matches"},
		{"a refused identity", allowed, "", "source port 40000 lies in no user's range", "allowed.test", false, "no user's range"},
		{"a deny stays a deny", Event{Reason: "no allow rule matches"}, "bob", "", "api.test", false, "no allow rule"},
	} {
		ev := c.ev
		p.narrow(&ev, policy.Request{Name: c.host, Port: 443}, c.user, c.refuse)
		if ev.Allowed != c.allow || !strings.Contains(ev.Reason, c.reason) || ev.User != c.user {
			t.Errorf("%s: %+v", c.name, ev)
		}
		if got := p.allowsFor(mustAllowAll(t), c.user, policy.Request{Name: c.host, Port: 443}, false); c.refuse == "" && c.ev.Allowed && got != c.allow {
			t.Errorf("%s: allowsFor = %v", c.name, got)
		}
	}
}

func mustAllowAll(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Compile(policy.Rules{Net: policy.NetAllowAll}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
