package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/sdk"
)

// TestSecretScopeAndGrants: a client with an API key, over the TCP listener, cannot make
// the proxy send a secret anywhere its scope does not name, nor bind a secret its key is not
// granted, nor bind a secret without a scope; the operator cannot bind outside a scope
// either. A scope narrowed while a sandbox runs applies to its next connection. Verdicts are
// read at the receiving upstream: the value never reaches a host outside the scope.
func TestSecretScopeAndGrants(t *testing.T) {
	const (
		scoped = "scoped-secret-4a7c19e2"
		other  = "other-secret-b83d50f1"
		legacy = "legacy-secret-0e6a2c77"
	)
	in := newInternet(t)
	port, caFile := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("scope host=%s path=%s auth=%s", r.Host, r.URL.Path, r.Header.Get("Authorization"))
		fmt.Fprintln(w, "ok")
	}), "api.test", "evil.test")
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		for _, h := range []string{"api.test", "evil.test"} {
			c.EgressHosts[h] = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
		}
		c.EgressCA = caFile
		c.Listen = addr
	})
	ctx := context.Background()
	apiHost, evilHost := fmt.Sprintf("api.test:%d", port), fmt.Sprintf("evil.test:%d", port)
	// SCOPED may go to api.test only; OTHER to evil.test (but the key is not granted it);
	// LEGACY has no scope, as a secret stored before scopes existed.
	if err := e.c.SetSecret(ctx, "SCOPED", scoped, &v1.SecretScope{Hosts: []string{apiHost}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetSecret(ctx, "OTHER", other, &v1.SecretScope{Hosts: []string{evilHost}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetSecret(ctx, "LEGACY", legacy, nil); err != nil {
		t.Fatal(err)
	}
	key, err := e.c.CreateAPIKey(ctx, "SCOPED", "LEGACY")
	if err != nil {
		t.Fatal(err)
	}
	remote := sdk.NewHTTP("http://"+addr, key.Key)
	policy := &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"api.test", "evil.test"}}}}
	bind := func(name string, hosts ...string) v1.CreateSandboxRequest {
		return v1.CreateSandboxRequest{MemoryBytes: 512 << 20, DiskBytes: 256 << 20, Policy: policy,
			Credentials: []v1.Credential{{Secret: name, Hosts: hosts}}}
	}
	// send makes sandbox id send its placeholder for name to host, tagged (-k: a host the
	// proxy does not intercept shows the test CA's certificate, which the sandbox does not
	// trust).
	send := func(t *testing.T, e *env, id, name, host, tag string) {
		t.Helper()
		e.sh(id, "", fmt.Sprintf(`curl -sSk --max-time 10 -H "Authorization: Bearer $%s" https://%s/%s`, name, host, tag))
	}

	for _, tc := range []struct {
		name   string
		client *sdk.Client
		req    v1.CreateSandboxRequest
		want   []string // parts of the 403's message
	}{
		{"API key: a granted secret outside its scope", remote, bind("SCOPED", evilHost),
			[]string{"credential SCOPED", "host evil.test (port " + fmt.Sprint(port) + ") is outside the secret's scope (" + apiHost + ")", "moat secret scope SCOPED"}},
		{"API key: a granted secret, one host of two outside", remote, bind("SCOPED", apiHost, evilHost), []string{"host evil.test"}},
		{"API key: another port of the scope's host", remote, bind("SCOPED", "api.test"), []string{"host api.test (port 443)"}},
		{"API key: a secret not granted", remote, bind("OTHER", evilHost),
			[]string{"API key " + key.ID + " is not granted secret OTHER", "moat apikey grant " + key.ID + " OTHER"}},
		{"API key: a secret without a scope", remote, bind("LEGACY", apiHost), []string{"moat secret scope LEGACY --hosts"}},
		{"operator: outside the scope", e.c, bind("SCOPED", evilHost), []string{"host evil.test"}},
	} {
		e.run(tc.name, func(t *testing.T, e *env) {
			sb, err := tc.client.Create(ctx, tc.req)
			if err == nil {
				// The binding was accepted: show where the value then goes.
				c := tc.req.Credentials[0]
				for _, h := range c.Hosts {
					send(t, e, sb.ID, c.Secret, h, "accepted")
				}
				t.Errorf("create was not refused; the upstream saw: %v", in.log.all())
				return
			}
			assertPermissionDenied(t, err, tc.want...)
		})
	}
	if list, _ := e.c.List(ctx); len(list) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", list)
	}

	e.run("within scope, then narrowed", func(t *testing.T, e *env) {
		sb, err := remote.Create(ctx, bind("SCOPED", apiHost))
		if err != nil {
			t.Fatal(err)
		}
		ph := strings.TrimSpace(e.mustSh(sb.ID, `echo "$SCOPED"`))
		send(t, e, sb.ID, "SCOPED", apiHost, "bound")
		send(t, e, sb.ID, "SCOPED", evilHost, "unbound")
		if !in.log.contains("host=" + apiHost + " path=/bound auth=Bearer " + scoped) {
			t.Errorf("the scope's host did not get the value: %v", in.log.all())
		}
		if !in.log.contains("host=" + evilHost + " path=/unbound auth=Bearer " + ph) {
			t.Errorf("the other host did not get the placeholder: %v", in.log.all())
		}
		// The operator narrows the scope to another host: the running sandbox's binding is
		// no longer injected, from its next connection on.
		if err := e.c.SetSecretScope(ctx, "SCOPED", v1.SecretScope{Hosts: []string{"elsewhere.test"}}); err != nil {
			t.Fatal(err)
		}
		send(t, e, sb.ID, "SCOPED", apiHost, "narrowed")
		if !in.log.contains("host=" + apiHost + " path=/narrowed auth=Bearer " + ph) {
			t.Errorf("after narrowing, api.test did not get the placeholder: %v", in.log.all())
		}
		if _, err := remote.Create(ctx, bind("SCOPED", apiHost)); !errors.Is(err, sdk.ErrPermissionDenied) {
			t.Errorf("create after narrowing: %v", err)
		}
	})

	// At the receiver: the value of a secret reached only the host and time its scope allowed.
	for _, line := range in.log.all() {
		switch {
		case strings.Contains(line, other), strings.Contains(line, legacy):
			t.Errorf("an unbindable secret was sent: %s", line)
		case strings.Contains(line, scoped) && !strings.Contains(line, "host="+apiHost+" path=/bound "):
			t.Errorf("the value went outside its scope: %s", line)
		}
	}
}
