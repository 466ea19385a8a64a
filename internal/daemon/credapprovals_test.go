package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
)

// TestCredentialApprovals: the operate tier with the daemon's own approvals service (no
// test Asker): a request a credential would be injected into is a pending credential
// approval naming the method, path and secret (never its value); approved through the
// API, the server gets the request with the value; denied, it never gets the request.
func TestCredentialApprovals(t *testing.T) {
	w := newTierWorld(t, func(c *daemon.Config) { c.CredentialAsker = nil })
	e := w.e
	ctx := context.Background()
	api := fmt.Sprintf("api.test:%d", w.port)
	base := "https://" + api
	e.run("runc", func(t *testing.T, e *env) {
		sb := w.create(t, "runc", "operate", v1.PolicyRules{Allow: []string{api}}, nil, v1.Credential{Secret: "API_TOKEN", Hosts: []string{api}})
		if _, err := e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Phase: "run"}); err != nil {
			t.Fatal(err)
		}
		post := func(path string) <-chan result {
			return shAsync(e, sb.ID, `curl -s --max-time 80 -o /dev/null -w '%{http_code}' -X POST -d x -H "Authorization: Bearer $API_TOKEN" `+base+path)
		}
		pending := func() v1.Approval { return pendingApproval(t, e, sb.ID, "credential") }

		done := post("/deploy/approved")
		ap := pending()
		var action struct{ Host, Method, Path, Secret string }
		if err := json.Unmarshal(ap.Action, &action); err != nil {
			t.Fatal(err)
		}
		if action.Host != "api.test" || action.Method != "POST" || action.Path != "/deploy/approved" || action.Secret != "API_TOKEN" {
			t.Fatalf("approval action = %s", ap.Action)
		}
		if body, _ := json.Marshal(ap); strings.Contains(string(body), w.apiSecret) {
			t.Fatalf("the approval carries the secret's value: %s", body)
		}
		if w.log.contains("/deploy/approved") {
			t.Fatal("the held request reached the server before a decision")
		}
		if _, err := e.c.ApproveApproval(ctx, ap.ID, v1.DecideApprovalRequest{Reason: "release"}); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, done); strings.TrimSpace(r.stdout) != "200" || !w.log.contains("POST /deploy/approved auth=Bearer "+w.apiSecret) {
			t.Fatalf("approved: %+v, server %v", r, w.log.all())
		}

		done = post("/deploy/denied")
		ap = pending()
		if _, err := e.c.DenyApproval(ctx, ap.ID, "not in a freeze"); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, done); strings.TrimSpace(r.stdout) != "403" || w.log.contains("/deploy/denied") {
			t.Fatalf("denied: %+v (the server saw it: %v)", r, w.log.contains("/deploy/denied"))
		}
	})
}
