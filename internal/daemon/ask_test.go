package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/sdk"
)

// testAsker stands for the approvals service: each held connection's question comes to
// the test, which decides it.
type testAsker struct{ qs chan askRequest }

type askRequest struct {
	q     egress.Question
	reply chan egress.Answer
}

func (a *testAsker) Ask(ctx context.Context, q egress.Question) (egress.Answer, error) {
	r := askRequest{q: q, reply: make(chan egress.Answer, 1)}
	select {
	case a.qs <- r:
	case <-ctx.Done():
		return egress.Answer{}, ctx.Err()
	}
	select {
	case ans := <-r.reply:
		return ans, nil
	case <-ctx.Done():
		return egress.Answer{}, ctx.Err()
	}
}

func (a *testAsker) next(t *testing.T) askRequest {
	t.Helper()
	select {
	case r := <-a.qs:
		return r
	case <-time.After(60 * time.Second):
		t.Fatal("no connection was held for approval")
		return askRequest{}
	}
}

// shAsync runs a bash line in a sandbox without waiting for it.
func shAsync(e *env, id, line string) <-chan result {
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out, errb bytes.Buffer
		code, err := e.c.Exec(ctx, id, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-l", "-c", line}, Stdout: &out, Stderr: &errb})
		if err != nil {
			errb.WriteString("exec: " + err.Error())
			code = -1
		}
		done <- result{out.String(), errb.String(), code}
	}()
	return done
}

func waitResult(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(90 * time.Second):
		t.Fatal("command did not finish")
		return result{}
	}
}

// TestAskMode: a sandbox created with ask holds a connection no rule allows until the
// approvals service decides; approved, it reaches the server; denied, it never does;
// approved for the sandbox, an allow rule is stored and later connections pass unasked.
func TestAskMode(t *testing.T) {
	in := newInternet(t)
	asker := &testAsker{qs: make(chan askRequest, 8)}
	e := newEnvWith(t, func(c *daemon.Config) { in.configure(c); c.EgressAsker = asker })
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) { askMode(t, e, in, asker, rt) })
	}
}

func askMode(t *testing.T, e *env, in *internet, asker *testAsker, rt string) {
	sb := e.create(v1.CreateSandboxRequest{Runtime: rt, Ask: true, AskWaitSeconds: 90})
	if !sb.Policy.AskAll || sb.Policy.AskWait != "90s" {
		t.Fatalf("policy = %+v, want ask_all with ask_wait 90s", sb.Policy)
	}
	url := func(path string) string { return fmt.Sprintf("http://allowed.test:%d/%s-%s", in.httpPort, rt, path) }
	curl := func(path string) <-chan result {
		return shAsync(e, sb.ID, "curl -sS --max-time 60 "+url(path))
	}
	reached := func(path string) bool { return in.log.contains(fmt.Sprintf("path=/%s-%s", rt, path)) }

	// Approved for this connection only.
	done := curl("once")
	r := asker.next(t)
	if q := r.q; q.Kind != egress.AskNetwork || q.Sandbox != sb.ID || q.Name != "allowed.test" || int(q.Port) != in.httpPort || q.Rule != "" || q.Wait != 90*time.Second || q.Phase != "run" {
		t.Fatalf("question = %+v", q)
	}
	if reached("once") {
		t.Fatal("the held connection reached the server before a decision")
	}
	select {
	case res := <-done:
		t.Fatalf("curl finished while held: %+v", res)
	default:
	}
	r.reply <- egress.Answer{ApprovalID: "ap-once", Approved: true, Scope: egress.ScopeOnce, By: "tester"}
	if res := waitResult(t, done); res.code != 0 || !strings.Contains(res.stdout, "hello from allowed.test") {
		t.Fatalf("approved connection: %+v", res)
	}
	if !reached("once") {
		t.Fatal("the approved connection did not reach the server")
	}
	if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
		return x.Proto == "tcp" && x.Allowed && strings.Contains(x.Reason, "approved by tester (approval ap-once) for this connection")
	}); !ok {
		t.Error("no egress entry for the approved connection")
	}
	if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
		return x.Proto == "dns" && x.Name == "allowed.test" && x.Rule == "ask-all" && !x.Allowed && strings.Contains(x.Reason, "held for approval")
	}); !ok {
		t.Error("no DNS entry saying ask")
	}

	// Denied: the server never sees it.
	done = curl("denied")
	r = asker.next(t)
	r.reply <- egress.Answer{ApprovalID: "ap-no", Approved: false, By: "tester", Reason: "not now"}
	if res := waitResult(t, done); res.code == 0 {
		t.Fatalf("denied connection succeeded: %+v", res)
	}
	if reached("denied") {
		t.Fatal("the denied connection reached the server")
	}
	e.expectBlocked(sb.ID, "denied approval", func(x v1.EgressEntry) bool {
		return strings.Contains(x.Reason, "denied by tester (approval ap-no): not now")
	})

	// Approved for the sandbox: the rule is stored and applied, the next connection
	// passes without a question.
	done = curl("sandbox")
	r = asker.next(t)
	r.reply <- egress.Answer{ApprovalID: "ap-all", Approved: true, Scope: egress.ScopeSandbox, By: "tester"}
	if res := waitResult(t, done); res.code != 0 {
		t.Fatalf("approved-for-sandbox connection: %+v", res)
	}
	rule := fmt.Sprintf("allowed.test:%d", in.httpPort)
	got, err := e.c.Get(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Policy.Phases["run"].Allow, rule) || !got.Policy.AskAll {
		t.Fatalf("policy after the approval = %+v, want allow %s and ask_all kept", got.Policy, rule)
	}
	if res := waitResult(t, curl("after")); res.code != 0 || !reached("after") {
		t.Fatalf("connection after the rule was added: %+v", res)
	}
	select {
	case r := <-asker.qs:
		t.Fatalf("asked again after an approval for the sandbox: %+v", r.q)
	default:
	}
	// A shorter wait set live (PUT …/policy): unanswered, the connection is refused when
	// it passes, and the server never sees it.
	pol := got.Policy
	pol.AskWait = "1s"
	if _, err := e.c.SetPolicy(context.Background(), sb.ID, v1.SetPolicyRequest{Policy: &pol}); err != nil {
		t.Fatal(err)
	}
	done = shAsync(e, sb.ID, fmt.Sprintf("curl -sS --max-time 60 http://denied.test:%d/", in.deniedPort))
	r = asker.next(t) // never answered
	if r.q.Name != "denied.test" || r.q.Wait != time.Second {
		t.Fatalf("question = %+v", r.q)
	}
	if res := waitResult(t, done); res.code == 0 {
		t.Fatalf("unanswered connection succeeded: %+v", res)
	}
	e.expectBlocked(sb.ID, "no decision", func(x v1.EgressEntry) bool {
		return x.Name == "denied.test" && x.Proto == "tcp" && x.Reason == "held for approval: no decision within 1s"
	})
	if in.log.contains("REACHED") {
		t.Errorf("upstream log: %v", in.log.all())
	}
}
