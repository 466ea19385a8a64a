package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestAskApprovals: ask mode with the daemon's own approvals service (no test Asker): a
// held connection becomes a pending network approval that names its destination;
// approved through the API (what `moat approvals approve` calls), the connection reaches
// the server; denied, it never does, and its egress-log entry names the approval.
func TestAskApprovals(t *testing.T) {
	in := newInternet(t)
	e := newEnvWith(t, in.configure)
	e.run("runc", func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.create(v1.CreateSandboxRequest{Runtime: "runc", Ask: true, AskWaitSeconds: 90})
		reached := func(path string) bool { return in.log.contains("path=/" + path) }
		curl := func(path string) <-chan result {
			return shAsync(e, sb.ID, fmt.Sprintf("curl -sS --max-time 80 http://allowed.test:%d/%s", in.httpPort, path))
		}
		pending := func() v1.Approval { return pendingApproval(t, e, sb.ID, "network") }

		done := curl("ask-approved")
		ap := pending()
		var action struct {
			Host  string `json:"host"`
			Port  int    `json:"port"`
			Phase string `json:"phase"`
		}
		if err := json.Unmarshal(ap.Action, &action); err != nil {
			t.Fatal(err)
		}
		if action.Host != "allowed.test" || action.Port != in.httpPort || action.Phase != "run" || ap.Sandbox != sb.ID {
			t.Fatalf("approval = %+v (action %s)", ap, ap.Action)
		}
		if reached("ask-approved") {
			t.Fatal("the held connection reached the server before a decision")
		}
		t0 := time.Now()
		if _, err := e.c.ApproveApproval(ctx, ap.ID, v1.DecideApprovalRequest{Reason: "looks fine", Scope: "once"}); err != nil {
			t.Fatal(err)
		}
		res := waitResult(t, done)
		t.Logf("decision → curl done (through the sandbox, the proxy and the server): %s", time.Since(t0))
		if res.code != 0 || !strings.Contains(res.stdout, "hello from allowed.test") || !reached("ask-approved") {
			t.Fatalf("approved connection: %+v", res)
		}
		if got, err := e.c.Approval(ctx, ap.ID, 0); err != nil || got.State != "approved" || got.DecidedBy != "operator" {
			t.Fatalf("approval after the decision = %+v, %v", got, err)
		}

		done = curl("ask-denied")
		ap = pending()
		if _, err := e.c.DenyApproval(ctx, ap.ID, "not today"); err != nil {
			t.Fatal(err)
		}
		if res := waitResult(t, done); res.code == 0 {
			t.Fatalf("denied connection succeeded: %+v", res)
		}
		if reached("ask-denied") {
			t.Fatal("the denied connection reached the server")
		}
		e.expectBlocked(sb.ID, "denied approval", func(x v1.EgressEntry) bool {
			return x.Proto == "tcp" && strings.Contains(x.Reason, "(approval "+ap.ID+")") && strings.Contains(x.Reason, "not today")
		})
	})
}

// pendingApproval waits (up to a minute) for sandbox id's one pending approval of kind.
func pendingApproval(t *testing.T, e *env, id, kind string) v1.Approval {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		list, err := e.c.Approvals(context.Background(), "pending", id, kind)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 {
			return list[0]
		}
		if len(list) > 1 {
			t.Fatalf("%d pending %s approvals, want 1: %+v", len(list), kind, list)
		}
	}
	t.Fatalf("no pending %s approval", kind)
	return v1.Approval{}
}
