package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestEgressSummaryAudit: when a sandbox stops, the audit log (its events) gets the
// summary of its connection verdicts by destination: the allowed and the blocked ones.
func TestEgressSummaryAudit(t *testing.T) {
	in := newInternet(t)
	e := newEnvWith(t, in.configure)
	e.run("runc", func(t *testing.T, e *env) {
		ctx := context.Background()
		sb := e.create(v1.CreateSandboxRequest{Runtime: "runc",
			Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"allowed.test"}}}}})
		for _, line := range []string{
			fmt.Sprintf("curl -sS --max-time 20 http://allowed.test:%d/summary-1", in.httpPort),
			fmt.Sprintf("curl -sS --max-time 20 http://allowed.test:%d/summary-2", in.httpPort),
			// A direct address no rule allows: G redirects it to the proxy, which refuses it
			// (nothing leaves the host).
			"curl -sS --max-time 5 http://192.0.2.7:9/ || true",
		} {
			e.sh(sb.ID, "", line)
		}
		if _, err := e.c.Stop(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		evs, err := e.c.Events(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range evs {
			if ev.Kind == "egress_summary" {
				got = append(got, ev.Detail)
			}
		}
		want := fmt.Sprintf("allowed 2 (allowed.test:%d 2)", in.httpPort)
		if len(got) != 1 || !strings.Contains(got[0], want) || !strings.Contains(got[0], "blocked 1 (192.0.2.7:9 1)") {
			list, _ := e.c.Egress(ctx, sb.ID, 0)
			for _, x := range list {
				t.Logf("egress: %+v", x)
			}
			t.Fatalf("egress_summary events %q, want one with %q and the blocked 192.0.2.7:9 (redirected to the proxy, which refuses it: nothing leaves)", got, want)
		}
	})
}
