package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
)

// TestHTTPRules: an HTTP rule lets through only the requests it names, each checked
// inside TLS (moat terminates it with the sandbox's CA), on new and kept-alive
// connections; a refused request never reaches the upstream (asserted in its log); the
// egress log records each request; a policy change applies to the next request.
func TestHTTPRules(t *testing.T) {
	in := newInternet(t)
	port, caFile := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("l7 %s %s", r.Method, r.URL.RawPath+r.URL.Path)
		fmt.Fprintf(w, "served %s %s\n", r.Method, r.URL.Path)
	}), "api.test")
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		c.EgressHosts["api.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
		c.EgressCA = caFile
	})
	ctx := context.Background()
	const plainSecret = "plain-secret-value-5521"
	if err := e.c.SetSecret(ctx, "PLAIN_TOKEN", plainSecret, &v1.SecretScope{Hosts: []string{fmt.Sprintf("allowed.test:%d", in.httpPort)}, PlainHTTP: true}); err != nil {
		t.Fatal(err)
	}
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{
				Runtime:     rt,
				Policy:      &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {HTTP: []string{"api.test GET,HEAD /allowed/", "allowed.test GET /ok/"}}}},
				Credentials: []v1.Credential{{Secret: "PLAIN_TOKEN", Hosts: []string{fmt.Sprintf("allowed.test:%d", in.httpPort)}, PlainHTTP: true}},
			})
			base := fmt.Sprintf("https://api.test:%d", port)
			code := func(args string) string {
				return strings.TrimSpace(e.mustSh(sb.ID, `curl -s --path-as-is --max-time 10 -o /dev/null -w '%{http_code}' `+args+`; true`))
			}
			if out := e.mustSh(sb.ID, `curl -sS --max-time 10 `+base+`/allowed/one-`+rt); !strings.Contains(out, "served GET /allowed/one-"+rt) {
				t.Errorf("allowed GET: %q", out)
			}
			for _, c := range []struct{ args, marker string }{
				{"-X POST -d x " + base + "/allowed/post-" + rt, "post-" + rt},
				{base + "/secret-" + rt, "secret-" + rt},
				{base + "/allowed/../dotdot-" + rt, "dotdot-" + rt},
				{base + "/allowed/%2e%2e/enc-" + rt, "enc-" + rt},
			} {
				if got := code(c.args); got != "403" {
					t.Errorf("curl %s: status %s, want 403", c.args, got)
				}
				if in.log.contains(c.marker) {
					t.Errorf("the upstream received the refused request %s", c.args)
				}
			}
			// On one kept-alive connection: the first request passes, the second is
			// checked too (the limit of sniffing only the first request is gone here).
			out := e.mustSh(sb.ID, fmt.Sprintf(`python3 -c '
import http.client, ssl
c = http.client.HTTPSConnection("api.test", %d, timeout=10, context=ssl.create_default_context())
for p in ("/allowed/ka-%s", "/keepalive-secret-%s"):
    c.request("GET", p); r = c.getresponse(); r.read(); print(p, r.status)
'`, port, rt, rt))
			if !strings.Contains(out, "/allowed/ka-"+rt+" 200") || !strings.Contains(out, "/keepalive-secret-"+rt+" 403") || in.log.contains("keepalive-secret-"+rt) {
				t.Errorf("keep-alive: %q", out)
			}
			// Plain HTTP to a host with HTTP rules is read and checked the same way, on
			// every request; a binding that allows plain HTTP is injected there.
			plainBase := fmt.Sprintf("http://allowed.test:%d", in.httpPort)
			if out := e.mustSh(sb.ID, `curl -sS --max-time 10 -H "Authorization: Bearer $PLAIN_TOKEN" `+plainBase+`/ok/p-`+rt); !strings.Contains(out, "hello from allowed.test") ||
				!in.log.contains("path=/ok/p-"+rt+" auth=Bearer "+plainSecret) {
				t.Errorf("plain GET with a plain-HTTP binding: %q; log %v", out, in.log.all())
			}
			if got := code(plainBase + "/nope-" + rt); got != "403" || in.log.contains("nope-"+rt) {
				t.Errorf("plain request outside the rules: %s", got)
			}
			out = e.mustSh(sb.ID, fmt.Sprintf(`python3 -c '
import http.client
c = http.client.HTTPConnection("allowed.test", %d, timeout=10)
for p in ("/ok/pka-%s", "/plain-ka-secret-%s"):
    c.request("GET", p); r = c.getresponse(); r.read(); print(p, r.status)
'`, in.httpPort, rt, rt))
			if !strings.Contains(out, "/ok/pka-"+rt+" 200") || !strings.Contains(out, "/plain-ka-secret-"+rt+" 403") || in.log.contains("plain-ka-secret-"+rt) {
				t.Errorf("plain keep-alive: %q", out)
			}

			// The egress log names each request and why it was refused.
			e.d.Egress.Flush()
			list, err := e.c.Egress(ctx, sb.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			var okGET, refusedPOST bool
			for _, x := range list {
				if x.Proto != "http" || x.Name != "api.test" {
					continue
				}
				okGET = okGET || x.Allowed && strings.HasPrefix(x.Reason, "GET /allowed/one-"+rt) && x.Rule == "http api.test GET,HEAD /allowed/"
				refusedPOST = refusedPOST || !x.Allowed && strings.Contains(x.Reason, "POST /allowed/post-"+rt+": no HTTP rule for api.test allows POST")
			}
			if !okGET || !refusedPOST {
				t.Errorf("egress log lacks the requests (GET logged %v, POST refused %v): %+v", okGET, refusedPOST, list)
			}

			// A live policy change applies to the next request on a connection that stays open.
			e.mustSh(sb.ID, fmt.Sprintf(`python3 -c '
import http.client, ssl, sys, time
c = http.client.HTTPSConnection("api.test", %d, timeout=10, context=ssl.create_default_context())
c.request("GET", "/allowed/before-%s"); r = c.getresponse(); r.read(); print("before", r.status)
open("/tmp/ready", "w").close()
while not __import__("os").path.exists("/tmp/go"): time.sleep(0.02)
c.request("GET", "/allowed/after-%s"); r = c.getresponse(); r.read(); print("after", r.status)
' > /tmp/live.out 2>&1 &
for i in $(seq 200); do [ -e /tmp/ready ] && break; sleep 0.05; done; echo waited`, port, rt, rt))
			if _, err := e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {HTTP: []string{"api.test POST /allowed/"}}}}}); err != nil {
				t.Fatal(err)
			}
			out = e.mustSh(sb.ID, `touch /tmp/go; for i in $(seq 200); do grep -q after /tmp/live.out && break; sleep 0.05; done; cat /tmp/live.out`)
			if !strings.Contains(out, "before 200") || !strings.Contains(out, "after 403") || in.log.contains("after-"+rt) {
				t.Errorf("live change: %q", out)
			}
			if got := code("-X POST -d x " + base + "/allowed/now-" + rt); got != "200" || !in.log.contains("l7 POST /allowed/now-"+rt) {
				t.Errorf("POST after the change: %s", got)
			}
		})
	}
}
