package egress

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/egress/proxy"
)

type recordingAsker struct {
	got Question
	ans Answer
	err error
}

func (r *recordingAsker) Ask(_ context.Context, q Question) (Answer, error) {
	r.got = q
	return r.ans, r.err
}

// The proxy's question becomes a network Question about the sandbox, and the scope of
// the answer decides whether a rule is added.
func TestAskWiring(t *testing.T) {
	m := &Manager{}
	ask := m.askFor("sb-1")
	q := proxy.Question{Phase: "run", Name: "api.test", Addr: netip.MustParseAddr("198.19.0.9"), Port: 443, Rule: "api.test", Wait: time.Minute}
	if _, err := ask(context.Background(), q); !errors.Is(err, errNoAsker) {
		t.Fatalf("without an asker: %v", err)
	}
	r := &recordingAsker{ans: Answer{ApprovalID: "ap-1", Approved: true, Scope: ScopeSandbox, By: "alice", Reason: "ok"}}
	m.SetAsker(r)
	ans, err := ask(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	want := Question{Kind: AskNetwork, Sandbox: "sb-1", Phase: "run", Name: "api.test", Addr: q.Addr, Port: 443, Rule: "api.test", Wait: time.Minute}
	if r.got != want {
		t.Fatalf("asked %+v, want %+v", r.got, want)
	}
	if ans != (proxy.Answer{ID: "ap-1", Approved: true, ForSandbox: true, By: "alice", Reason: "ok"}) {
		t.Fatalf("answer = %+v", ans)
	}
	for scope, forSandbox := range map[string]bool{ScopeOnce: false, "": false, "weird": false, ScopeSandbox: true} {
		r.ans.Scope = scope
		if ans, _ := ask(context.Background(), q); ans.ForSandbox != forSandbox {
			t.Errorf("scope %q: ForSandbox = %v", scope, ans.ForSandbox)
		}
	}
	r.err = context.DeadlineExceeded
	if _, err := ask(context.Background(), q); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("asker error not passed on: %v", err)
	}

	add := m.addRuleFor("sb-1")
	if err := add(context.Background(), "run", "api.test:443"); err == nil {
		t.Fatal("no error without a rule adder")
	}
	var got [3]string
	m.SetRuleAdder(func(_ context.Context, sandbox, phase, rule string) error {
		got = [3]string{sandbox, phase, rule}
		return nil
	})
	if err := add(context.Background(), "run", "api.test:443"); err != nil || got != [3]string{"sb-1", "run", "api.test:443"} {
		t.Fatalf("rule adder got %v, %v", got, err)
	}
}

// The interceptor's per-request check refuses what the policy only asks about, unless the
// connection was approved.
func TestInterceptorCheckApproved(t *testing.T) {
	s := policy.Single(policy.Rules{Ask: []string{"api.test"}})
	comp, pol, err := compile(s)
	if err != nil {
		t.Fatal(err)
	}
	ic := interceptor{b: &boundary{spec: s, comp: comp, phase: "run", pol: pol}, host: "api.test", port: 443}
	if ok, why := ic.check("GET", "/"); ok || !strings.Contains(why, "held for approval") {
		t.Fatalf("unapproved check = %v, %q", ok, why)
	}
	if ok, why := ic.checkRequest("GET", "/", true); !ok {
		t.Fatalf("approved check refused: %q", why)
	}
	denied := policy.Single(policy.Rules{Deny: []string{"api.test"}, Allow: []string{"x.test"}})
	comp, pol, _ = compile(denied)
	ic.b = &boundary{spec: denied, comp: comp, phase: "run", pol: pol}
	if ok, _ := ic.checkRequest("GET", "/", true); ok {
		t.Fatal("an approval let a denied host through")
	}
}
