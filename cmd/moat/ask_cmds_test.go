package main

import (
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

func TestPolicyFlagsAsk(t *testing.T) {
	p := policyFlags{ask: true}
	s, err := p.spec(policy.StartCreate)
	if err != nil {
		t.Fatal(err)
	}
	if s == nil || !s.AskAll || s.Phase != "run" || s.Phases["run"].Net != "" {
		t.Fatalf("--ask alone = %+v, want ask_all over a policy without rules", s)
	}
	p = policyFlags{ask: true, allow: []string{"a.test"}, askFor: []string{"b.test:443"}, askWait: 90 * time.Second}
	if s, err = p.spec(policy.StartCreate); err != nil {
		t.Fatal(err)
	}
	if !s.AskAll || s.AskWait != "1m30s" || len(s.Phases["run"].Ask) != 1 || len(s.Phases["run"].Allow) != 1 {
		t.Fatalf("spec = %+v", s)
	}
	if got := describeAsk(*s); !strings.Contains(got, "every connection no rule allows or denies") || !strings.Contains(got, "1m30s") {
		t.Fatalf("describeAsk = %q", got)
	}
	if got := describeRules(s.Phases["run"]); got != "allow a.test; ask b.test:443" {
		t.Fatalf("describeRules = %q", got)
	}
	for _, tt := range []struct {
		p    policyFlags
		want string
	}{
		{policyFlags{askWait: time.Minute}, "--ask-wait needs --ask"},
		{policyFlags{ask: true, askWait: time.Millisecond}, "must be between"},
		{policyFlags{askFor: []string{"http://x"}}, "ask rule"},
		{policyFlags{net: "deny-all", askFor: []string{"x.test"}}, "net deny-all takes no ask rules"},
	} {
		if _, err := tt.p.spec(policy.StartCreate); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.p, err, tt.want)
		}
	}
	// Setup: the run phase asks, the setup phase gets registries.
	p = policyFlags{ask: true}
	if s, err = p.spec(policy.StartSetup); err != nil || s.Phase != "setup" || !s.AskAll || len(s.Phases["setup"].Allow) != 1 {
		t.Fatalf("--setup --ask = %+v, %v", s, err)
	}
}
