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
	"github.com/moatdev/moat/sdk"
)

// TestSecretScopeHeaders: a client with an API key granted a secret cannot choose the
// request header the value is written into, beyond the headers the secret's scope names
// (Authorization when it names none), nor a header template that puts the value inside
// other data (a URL the host may log or send back). Verdicts are read at the receiving
// upstream, which logs every header of every request: the value reaches it only in a header
// the scope names. Headers taken out of a scope while a sandbox runs apply to its next
// connection.
func TestSecretScopeHeaders(t *testing.T) {
	const (
		plain = "plain-secret-5d19a7c3"
		keyed = "keyed-secret-e2047b6f"
	)
	in := newInternet(t)
	port, caFile := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, vs := range r.Header {
			for _, v := range vs {
				in.log.add("hdr path=%s %s=%s", r.URL.Path, k, v)
			}
		}
		fmt.Fprintln(w, "ok")
	}), "api.test")
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		c.EgressHosts["api.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
		c.EgressCA = caFile
		c.Listen = addr
	})
	ctx := context.Background()
	apiHost := fmt.Sprintf("api.test:%d", port)
	// PLAIN may be written into Authorization only (its scope names no headers); KEYED into
	// X-Api-Key and X-Callback-Url (an operator's unwise choice: the template still keeps the
	// value the header's whole credential).
	if err := e.c.SetSecret(ctx, "PLAIN", plain, &v1.SecretScope{Hosts: []string{apiHost}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetSecret(ctx, "KEYED", keyed, &v1.SecretScope{Hosts: []string{apiHost}, Headers: []string{"x-api-key", "X-Callback-Url"}}); err != nil {
		t.Fatal(err)
	}
	key, err := e.c.CreateAPIKey(ctx, "PLAIN", "KEYED")
	if err != nil {
		t.Fatal(err)
	}
	remote := sdk.NewHTTP("http://"+addr, key.Key)
	policy := &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"api.test"}}}}
	create := func(c *sdk.Client, cred v1.Credential) (*v1.Sandbox, error) {
		cred.Hosts = []string{apiHost}
		return c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 512 << 20, DiskBytes: 256 << 20, Policy: policy, Credentials: []v1.Credential{cred}})
	}
	// send makes sandbox id send a request to api.test with the placeholder of name (if it
	// has one) in the headers a binding could have chosen.
	send := func(t *testing.T, e *env, id, name, tag string) {
		t.Helper()
		e.sh(id, "", fmt.Sprintf(`curl -sS --max-time 10 -A "$%[1]s" -H "Referer: $%[1]s" -H "Authorization: Bearer $%[1]s" -H "X-Api-Key: $%[1]s" -H "X-Callback-Url: $%[1]s" https://%[2]s/%[3]s`, name, apiHost, tag))
	}

	for _, tc := range []struct {
		name   string
		client *sdk.Client
		cred   v1.Credential
		want   []string // parts of the 403's message
	}{
		{"API key: placeholder in User-Agent", remote, v1.Credential{Secret: "PLAIN", PlaceholderHeader: "User-Agent"},
			[]string{"credential PLAIN", "header User-Agent is outside the secret's scope (the value may be written into Authorization only)", "moat secret scope PLAIN"}},
		{"API key: placeholder in Referer", remote, v1.Credential{Secret: "PLAIN", PlaceholderHeader: "referer"}, []string{"header referer is outside"}},
		{"API key: a header binding into a header outside the scope", remote, v1.Credential{Secret: "PLAIN", Header: "X-Callback-Url", Template: "https://evil.test/{{value}}"},
			[]string{"header X-Callback-Url is outside"}},
		{"API key: the value inside a URL in a header of the scope", remote, v1.Credential{Secret: "KEYED", Header: "X-Callback-Url", Template: "https://evil.test/{{value}}"},
			[]string{`header template "https://evil.test/{{value}}" is not allowed`, `"SCHEME {{value}}"`}},
		{"API key: the value after text in Authorization", remote, v1.Credential{Secret: "PLAIN", Header: "Authorization", Template: "Bearer x {{value}}"}, []string{"is not allowed"}},
		{"API key: Authorization, not among the scope's headers", remote, v1.Credential{Secret: "KEYED"}, []string{"header Authorization is outside the secret's scope (the value may be written into X-Api-Key, X-Callback-Url only)"}},
		{"operator: placeholder in User-Agent", e.c, v1.Credential{Secret: "PLAIN", PlaceholderHeader: "User-Agent"}, []string{"header User-Agent is outside"}},
	} {
		e.run(tc.name, func(t *testing.T, e *env) {
			sb, err := create(tc.client, tc.cred)
			if err == nil {
				// The binding was accepted: show where the value then goes.
				send(t, e, sb.ID, tc.cred.Secret, "accepted")
				t.Errorf("create was not refused; the upstream saw: %v", in.log.all())
				return
			}
			assertPermissionDenied(t, err, tc.want...)
		})
	}
	if list, _ := e.c.List(ctx); len(list) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", list)
	}

	e.run("within the scope's headers", func(t *testing.T, e *env) {
		sb, err := create(remote, v1.Credential{Secret: "KEYED", PlaceholderHeader: "x-api-key"})
		if err != nil {
			t.Fatal(err)
		}
		ph := strings.TrimSpace(e.mustSh(sb.ID, `echo "$KEYED"`))
		send(t, e, sb.ID, "KEYED", "bound")
		if !in.log.contains("hdr path=/bound X-Api-Key=" + keyed) {
			t.Errorf("the scope's header did not get the value: %v", in.log.all())
		}
		if !in.log.contains("hdr path=/bound User-Agent=" + ph) {
			t.Errorf("User-Agent did not keep the placeholder: %v", in.log.all())
		}
		// The operator takes X-Api-Key out of the scope: the running sandbox's binding is no
		// longer injected, from its next connection on.
		if err := e.c.SetSecretScope(ctx, "KEYED", v1.SecretScope{Hosts: []string{apiHost}, Headers: []string{"X-Callback-Url"}}); err != nil {
			t.Fatal(err)
		}
		send(t, e, sb.ID, "KEYED", "narrowed")
		if !in.log.contains("hdr path=/narrowed X-Api-Key=" + ph) {
			t.Errorf("after narrowing, X-Api-Key did not keep the placeholder: %v", in.log.all())
		}
		if err := e.c.Delete(ctx, sb.ID); err != nil {
			t.Error(err)
		}
		sb, err = create(remote, v1.Credential{Secret: "PLAIN", Header: "Authorization", Template: "Bearer {{value}}"})
		if err != nil {
			t.Fatal(err)
		}
		e.sh(sb.ID, "", fmt.Sprintf(`curl -sS --max-time 10 https://%s/header`, apiHost))
		if !in.log.contains("hdr path=/header Authorization=Bearer " + plain) {
			t.Errorf("the header binding did not set Authorization: %v", in.log.all())
		}
	})

	// At the receiver: each value reached it only in the header its scope and binding name.
	for _, line := range in.log.all() {
		switch {
		case strings.Contains(line, plain) && line != "hdr path=/header Authorization=Bearer "+plain,
			strings.Contains(line, keyed) && line != "hdr path=/bound X-Api-Key="+keyed:
			t.Errorf("a value reached the upstream outside the header its scope names: %s", line)
		}
	}
}
