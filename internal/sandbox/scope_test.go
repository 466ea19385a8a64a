package sandbox

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/testutil"
)

func TestWithinScope(t *testing.T) {
	scope := func(hosts ...string) *secrets.Scope { return &secrets.Scope{Hosts: hosts} }
	for _, tc := range []struct {
		name  string
		cred  Credential
		scope *secrets.Scope
		// want is "" for a binding within the scope, else a part of the error.
		want string
		// methods and prefix are the binding's limits afterwards (within scope only).
		methods, prefix string
	}{
		{"no scope", Credential{Hosts: []string{"api.test"}}, nil, "moat secret scope TOKEN --hosts", "", ""},
		{"exact host", Credential{Hosts: []string{"api.test"}}, scope("api.test"), "", "", ""},
		{"default port is 443", Credential{Hosts: []string{"api.test:443"}}, scope("api.test"), "", "", ""},
		{"443 is the default port", Credential{Hosts: []string{"api.test"}}, scope("api.test:443"), "", "", ""},
		{"another port", Credential{Hosts: []string{"api.test:8443"}}, scope("api.test"), "host api.test (port 8443) is outside the secret's scope (api.test)", "", ""},
		{"port named in both", Credential{Hosts: []string{"api.test:8443"}}, scope("api.test:8443"), "", "", ""},
		{"a scope port is not 443", Credential{Hosts: []string{"api.test"}}, scope("api.test:8443"), "port 443", "", ""},
		{"another host", Credential{Hosts: []string{"evil.test"}}, scope("api.test"), "host evil.test (port 443) is outside", "", ""},
		{"one host of two outside", Credential{Hosts: []string{"api.test", "evil.test"}}, scope("api.test", "other.test"), "host evil.test", "", ""},
		{"subdomain of a wildcard", Credential{Hosts: []string{"a.example.org"}}, scope("*.example.org"), "", "", ""},
		{"deep subdomain of a wildcard", Credential{Hosts: []string{"a.b.example.org"}}, scope("*.example.org"), "", "", ""},
		{"the wildcard's own domain", Credential{Hosts: []string{"example.org"}}, scope("*.example.org"), "host example.org", "", ""},
		{"a suffix that is not a subdomain", Credential{Hosts: []string{"evilexample.org"}}, scope("*.example.org"), "host evilexample.org", "", ""},
		{"the same wildcard", Credential{Hosts: []string{"*.example.org"}}, scope("*.example.org"), "", "", ""},
		{"a narrower wildcard", Credential{Hosts: []string{"*.a.example.org"}}, scope("*.example.org"), "", "", ""},
		{"a wider wildcard", Credential{Hosts: []string{"*.org"}}, scope("*.example.org"), "host *.org", "", ""},
		{"a wildcard within an exact host", Credential{Hosts: []string{"*.example.org"}}, scope("example.org", "a.example.org"), "host *.example.org", "", ""},
		{"a wildcard of a sibling", Credential{Hosts: []string{"*.xample.org"}}, scope("*.example.org"), "host *.xample.org", "", ""},
		{"a wildcard of a suffix that is not a subdomain", Credential{Hosts: []string{"*.evilexample.org"}}, scope("*.example.org"), "host *.evilexample.org", "", ""},
		{"wildcard port", Credential{Hosts: []string{"*.example.org:8443"}}, scope("*.example.org"), "port 8443", "", ""},
		{"plain HTTP not in scope", Credential{Hosts: []string{"api.test"}, PlainHTTP: true}, scope("api.test"), "plain HTTP is outside the secret's scope", "", ""},
		{"plain HTTP in scope", Credential{Hosts: []string{"api.test"}, PlainHTTP: true}, &secrets.Scope{Hosts: []string{"api.test"}, PlainHTTP: true}, "", "", ""},
		{"plain HTTP needs port 80 too", Credential{Hosts: []string{"api.test"}, PlainHTTP: true}, &secrets.Scope{Hosts: []string{"api.test:443"}, PlainHTTP: true}, "port 80", "", ""},
		{"plain HTTP on a named port", Credential{Hosts: []string{"api.test:8080"}, PlainHTTP: true}, &secrets.Scope{Hosts: []string{"api.test:8080"}, PlainHTTP: true}, "", "", ""},
		{"port 80 from two entries", Credential{Hosts: []string{"api.test"}, PlainHTTP: true}, &secrets.Scope{Hosts: []string{"api.test:443", "api.test:80"}, PlainHTTP: true}, "", "", ""},
		{"methods taken from the scope", Credential{Hosts: []string{"api.test"}}, &secrets.Scope{Hosts: []string{"api.test"}, Methods: []string{"GET", "POST"}}, "", "GET,POST", ""},
		{"methods within", Credential{Hosts: []string{"api.test"}, Methods: []string{"GET"}}, &secrets.Scope{Hosts: []string{"api.test"}, Methods: []string{"GET", "POST"}}, "", "GET", ""},
		{"a method outside", Credential{Hosts: []string{"api.test"}, Methods: []string{"GET", "DELETE"}}, &secrets.Scope{Hosts: []string{"api.test"}, Methods: []string{"GET", "POST"}}, "method DELETE is outside the secret's scope (GET, POST)", "", ""},
		{"methods of a scope without", Credential{Hosts: []string{"api.test"}, Methods: []string{"DELETE"}}, scope("api.test"), "", "DELETE", ""},
		{"prefix taken from the scope", Credential{Hosts: []string{"api.test"}}, &secrets.Scope{Hosts: []string{"api.test"}, PathPrefix: "/v1/"}, "", "", "/v1/"},
		{"prefix within", Credential{Hosts: []string{"api.test"}, PathPrefix: "/v1/users/"}, &secrets.Scope{Hosts: []string{"api.test"}, PathPrefix: "/v1/"}, "", "", "/v1/users/"},
		{"prefix outside", Credential{Hosts: []string{"api.test"}, PathPrefix: "/admin/"}, &secrets.Scope{Hosts: []string{"api.test"}, PathPrefix: "/v1/"}, "path prefix /admin/ is outside the secret's scope (/v1/)", "", ""},
		{"prefix wider than the scope's", Credential{Hosts: []string{"api.test"}, PathPrefix: "/v"}, &secrets.Scope{Hosts: []string{"api.test"}, PathPrefix: "/v1/"}, "path prefix /v is outside", "", ""},
		{"repositories within (case-insensitive)", Credential{Hosts: []string{"github.com"}, GitHub: &GitHubScope{Repositories: []string{"Widget"}}}, &secrets.Scope{Hosts: []string{"github.com"}, Repositories: []string{"widget", "gadget"}}, "", "", ""},
		{"a repository outside", Credential{Hosts: []string{"github.com"}, GitHub: &GitHubScope{Repositories: []string{"widget", "secrets"}}}, &secrets.Scope{Hosts: []string{"github.com"}, Repositories: []string{"widget"}}, "repository secrets is outside the GitHub App key's scope (widget)", "", ""},
		{"any repository", Credential{Hosts: []string{"github.com"}, GitHub: &GitHubScope{Repositories: []string{"anything"}}}, scope("github.com"), "", "", ""},
		{"an App key's host", Credential{Hosts: []string{"evil.test"}, GitHub: &GitHubScope{Repositories: []string{"widget"}}}, &secrets.Scope{Hosts: []string{"github.com"}, Repositories: []string{"widget"}}, "host evil.test", "", ""},
		// The header the value is written into, and the form of a header binding's template.
		{"Authorization by default", Credential{Hosts: []string{"api.test"}, PlaceholderHeader: "authorization"}, scope("api.test"), "", "", ""},
		{"a placeholder header outside the default", Credential{Hosts: []string{"api.test"}, PlaceholderHeader: "User-Agent"}, scope("api.test"), "header User-Agent is outside the secret's scope (the value may be written into Authorization only)", "", ""},
		{"Referer outside the default", Credential{Hosts: []string{"api.test"}, PlaceholderHeader: "Referer"}, scope("api.test"), "header Referer is outside", "", ""},
		{"a placeholder header in scope (case-insensitive)", Credential{Hosts: []string{"api.test"}, PlaceholderHeader: "x-api-key"}, &secrets.Scope{Hosts: []string{"api.test"}, Headers: []string{"X-Api-Key"}}, "", "", ""},
		{"Authorization not among the scope's headers", Credential{Hosts: []string{"api.test"}}, &secrets.Scope{Hosts: []string{"api.test"}, Headers: []string{"X-Api-Key"}}, "header Authorization is outside the secret's scope (the value may be written into X-Api-Key only)", "", ""},
		{"a placeholder header not among several", Credential{Hosts: []string{"api.test"}, PlaceholderHeader: "X-Api-Key-2"}, &secrets.Scope{Hosts: []string{"api.test"}, Headers: []string{"X-Api-Key", "Authorization"}}, "header X-Api-Key-2", "", ""},
		{"an App key's header", Credential{Hosts: []string{"github.com"}, PlaceholderHeader: "Cookie", GitHub: &GitHubScope{Repositories: []string{"widget"}}}, scope("github.com"), "header Cookie", "", ""},
		{"a header binding of Authorization", Credential{Hosts: []string{"api.test"}, Header: "Authorization", Template: "Bearer {{value}}"}, scope("api.test"), "", "", ""},
		{"a header binding of the bare value", Credential{Hosts: []string{"api.test"}, Header: "X-Api-Key", Template: "{{value}}"}, &secrets.Scope{Hosts: []string{"api.test"}, Headers: []string{"X-API-KEY"}}, "", "", ""},
		{"a header binding outside the default", Credential{Hosts: []string{"api.test"}, Header: "X-Callback-Url", Template: "{{value}}"}, scope("api.test"), "header X-Callback-Url is outside", "", ""},
		{"a header binding's header decides, not its placeholder header", Credential{Hosts: []string{"api.test"}, Header: "User-Agent", Template: "{{value}}", PlaceholderHeader: "Authorization"}, scope("api.test"), "header User-Agent is outside", "", ""},
		{"a template that makes a URL", Credential{Hosts: []string{"api.test"}, Header: "X-Callback-Url", Template: "https://evil/{{value}}"}, &secrets.Scope{Hosts: []string{"api.test"}, Headers: []string{"X-Callback-Url"}}, `header template "https://evil/{{value}}" is not allowed`, "", ""},
		{"a template with text after the value", Credential{Hosts: []string{"api.test"}, Header: "Authorization", Template: "Bearer {{value}} x"}, scope("api.test"), "is not allowed", "", ""},
		{"a template with two words before the value", Credential{Hosts: []string{"api.test"}, Header: "Authorization", Template: "a b {{value}}"}, scope("api.test"), "is not allowed", "", ""},
		{"a template with two spaces", Credential{Hosts: []string{"api.test"}, Header: "Authorization", Template: "Bearer  {{value}}"}, scope("api.test"), "is not allowed", "", ""},
		{"a template with the value twice", Credential{Hosts: []string{"api.test"}, Header: "Authorization", Template: "{{value}} {{value}}"}, scope("api.test"), "is not allowed", "", ""},
		{"a template with a scheme glued on", Credential{Hosts: []string{"api.test"}, Header: "Authorization", Template: "Bearer{{value}}"}, scope("api.test"), "is not allowed", "", ""},
		{"a template of the value in a query", Credential{Hosts: []string{"api.test"}, Header: "Authorization", Template: "x?k={{value}}"}, scope("api.test"), "is not allowed", "", ""},
		{"an empty template", Credential{Hosts: []string{"api.test"}, Header: "Authorization"}, scope("api.test"), "is not allowed", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cred.Secret = "TOKEN"
			var before *secrets.Scope
			if tc.scope != nil {
				cp := *tc.scope
				cp.Methods = slices.Clone(cp.Methods)
				before = &cp
			}
			out, err := WithinScope(tc.cred, tc.scope)
			if tc.want != "" {
				if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "credential TOKEN") {
					t.Fatalf("WithinScope = %v, want permission denied naming TOKEN and %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("WithinScope: %v", err)
			}
			if m := strings.Join(out.Methods, ","); m != tc.methods || out.PathPrefix != tc.prefix || strings.Join(out.Hosts, ",") != strings.Join(tc.cred.Hosts, ",") {
				t.Errorf("binding afterwards: methods %q prefix %q hosts %v, want %q %q", m, out.PathPrefix, out.Hosts, tc.methods, tc.prefix)
			}
			// The result shares nothing with the scope or the binding.
			if len(out.Methods) > 0 {
				out.Methods[0] = "CHANGED"
				if tc.scope != nil && !slices.Equal(tc.scope.Methods, before.Methods) || slices.Contains(tc.cred.Methods, "CHANGED") {
					t.Error("the result's methods alias the scope's or the binding's")
				}
			}
		})
	}
}

func TestCheckGrants(t *testing.T) {
	creds := []Credential{{Secret: "A_TOKEN"}, {Secret: "B_TOKEN"}}
	for _, tc := range []struct {
		name   string
		caller Caller
		creds  []Credential
		want   string
	}{
		{"operator", Caller{Operator: true}, creds, ""},
		{"key granted both", Caller{APIKey: "key-1", Secrets: []string{"B_TOKEN", "A_TOKEN"}}, creds, ""},
		{"key granted one", Caller{APIKey: "key-1", Secrets: []string{"A_TOKEN"}}, creds, "API key key-1 is not granted secret B_TOKEN; the daemon's operator can grant it with `moat apikey grant key-1 B_TOKEN`"},
		{"key granted none", Caller{APIKey: "key-1"}, creds, "API key key-1 is not granted secret A_TOKEN"},
		{"key granted none, no bindings", Caller{APIKey: "key-1"}, nil, ""},
		{"nobody", Caller{}, creds, "carries no identity"},
		{"a grant is a whole name", Caller{APIKey: "key-1", Secrets: []string{"A_TOKEN_X", "A_TOKE"}}, creds[:1], "not granted secret A_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckGrants(tc.caller, tc.creds)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckGrants = %v, want permission denied with %q", err, tc.want)
			}
		})
	}
	if c := CallerFrom(context.Background()); c.Operator || c.APIKey != "" || c.Secrets != nil {
		t.Errorf("a context without a caller gives %+v, want the zero Caller", c)
	}
	ctx := WithCaller(context.Background(), Caller{APIKey: "key-2", Secrets: []string{"A_TOKEN"}})
	if c := CallerFrom(ctx); c.APIKey != "key-2" || c.Operator {
		t.Errorf("CallerFrom = %+v", c)
	}
}

// TestMayUse: the operator uses every sandbox, an API key only those it created; the owner
// a sandbox records is its creator's key, "" for the operator's and for a caller without
// identity (which only the operator can then use).
func TestMayUse(t *testing.T) {
	op, a, b, nobody := Caller{Operator: true}, Caller{APIKey: "key-a"}, Caller{APIKey: "key-b", Secrets: []string{"X"}}, Caller{}
	for _, tc := range []struct {
		caller Caller
		owner  string
		want   bool
	}{
		{op, "", true},
		{op, "key-a", true},
		{Caller{Operator: true, APIKey: "key-b"}, "key-a", true},
		{a, "key-a", true},
		{a, "", false},
		{a, "key-b", false},
		{a, "key-aa", false},
		{Caller{APIKey: "KEY-A"}, "key-a", false},
		{b, "key-a", false},
		{nobody, "", false},
		{nobody, "key-a", false},
	} {
		if got := tc.caller.MayUse(&Sandbox{Owner: tc.owner}); got != tc.want {
			t.Errorf("%+v MayUse a sandbox of %q = %v, want %v", tc.caller, tc.owner, got, tc.want)
		}
	}
	for _, tc := range []struct {
		caller Caller
		want   string
	}{{op, ""}, {Caller{Operator: true, APIKey: "key-a"}, ""}, {a, "key-a"}, {nobody, ""}} {
		if got := tc.caller.Owner(); got != tc.want {
			t.Errorf("%+v.Owner() = %q, want %q", tc.caller, got, tc.want)
		}
		if sb := (&Sandbox{Owner: tc.caller.Owner()}); !tc.caller.MayUse(sb) && (tc.caller.Operator || tc.caller.APIKey != "") {
			t.Errorf("%+v may not use the sandbox it created", tc.caller)
		}
	}
}

// TestCheckBindings: the manager's create-time decision with the real secret store: grants
// first (an ungranted key learns nothing about the secret), then existence, then the
// scope, whose limits the bindings take.
func TestCheckBindings(t *testing.T) {
	testutil.RequiresRoot(t) // the store's directory must belong to root
	st, err := secrets.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put("SCOPED", secrets.NewValue("v1"), nil, &secrets.Scope{Hosts: []string{"api.test"}, Methods: []string{"GET"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Set("LEGACY", secrets.NewValue("v2")); err != nil {
		t.Fatal(err)
	}
	m := &Manager{cfg: Config{Secrets: st}}
	op := WithCaller(context.Background(), Caller{Operator: true})
	key := WithCaller(context.Background(), Caller{APIKey: "key-1", Secrets: []string{"SCOPED", "LEGACY"}})
	bind := func(name string, hosts ...string) []Credential {
		return []Credential{{Secret: name, Hosts: hosts}}
	}
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		creds []Credential
		class error
		want  string
	}{
		{"operator, within", op, bind("SCOPED", "api.test"), nil, ""},
		{"granted key, within", key, bind("SCOPED", "api.test"), nil, ""},
		{"operator, outside", op, bind("SCOPED", "evil.test"), errdefs.ErrPermissionDenied, "host evil.test"},
		{"granted key, outside", key, bind("SCOPED", "evil.test"), errdefs.ErrPermissionDenied, "host evil.test"},
		{"no scope", op, bind("LEGACY", "api.test"), errdefs.ErrPermissionDenied, "`moat secret scope LEGACY --hosts HOST[,HOST...]`"},
		{"unknown secret", op, bind("NOPE", "api.test"), errdefs.ErrNotFound, "moat secret set NOPE --hosts"},
		{"ungranted unknown secret", key, bind("NOPE", "api.test"), errdefs.ErrPermissionDenied, "not granted secret NOPE"},
		{"no caller", context.Background(), bind("SCOPED", "api.test"), errdefs.ErrPermissionDenied, "no identity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := m.checkBindings(tc.ctx, tc.creds)
			if tc.class == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Join(tc.creds[0].Methods, ","); got != "GET" {
					t.Errorf("the binding's methods are %q, want the scope's GET", got)
				}
				return
			}
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkBindings = %v, want %v with %q", err, tc.class, tc.want)
			}
		})
	}
	if err := (&Manager{}).checkBindings(op, bind("SCOPED", "api.test")); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("without a secret store: %v", err)
	}
	if err := (&Manager{}).checkBindings(context.Background(), nil); err != nil {
		t.Errorf("no bindings, no caller: %v", err)
	}
}

// bindingSends reports whether binding c sends its value in a request to host:port (plain:
// in plain HTTP) with method and path: the proxy's matcher (MatchesHost) and the
// injection's limits.
func bindingSends(c Credential, host string, port uint16, plain bool, method, path string) bool {
	return c.MatchesHost(host, port) && (!plain || c.PlainHTTP) &&
		(len(c.Methods) == 0 || slices.Contains(c.Methods, method)) &&
		(c.PathPrefix == "" || strings.HasPrefix(path, c.PathPrefix))
}

// scopeAdmits is the independent reading of a scope: whether it lets the value into that
// request. Its hosts mean what binding hosts mean, so the proxy's matcher decides them.
func scopeAdmits(sc *secrets.Scope, host string, port uint16, plain bool, method, path string) bool {
	if sc == nil || plain && !sc.PlainHTTP ||
		len(sc.Methods) > 0 && !slices.Contains(sc.Methods, method) ||
		sc.PathPrefix != "" && !strings.HasPrefix(path, sc.PathPrefix) {
		return false
	}
	return slices.ContainsFunc(sc.Hosts, func(h string) bool {
		return Credential{Hosts: []string{h}, PlainHTTP: sc.PlainHTTP}.MatchesHost(host, port)
	})
}

// scopeAdmitsHeader is the independent reading of a scope's headers: whether it lets binding
// c write the value into the header it names (a header binding's Header, else its
// PlaceholderHeader, else Authorization), in the form its template gives: the value alone,
// or after one authentication scheme and one space.
func scopeAdmitsHeader(sc *secrets.Scope, c Credential) bool {
	written := "Authorization"
	switch {
	case c.Header != "":
		written = c.Header
	case c.PlaceholderHeader != "":
		written = c.PlaceholderHeader
	}
	allowed := sc.Headers
	if len(allowed) == 0 {
		allowed = []string{"Authorization"}
	}
	if !slices.ContainsFunc(allowed, func(h string) bool { return http.CanonicalHeaderKey(h) == http.CanonicalHeaderKey(written) }) {
		return false
	}
	if c.Header == "" {
		return true
	}
	const tchars = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	words := strings.Split(c.Template, " ")
	switch len(words) {
	case 1:
		return words[0] == "{{value}}"
	case 2:
		return words[1] == "{{value}}" && words[0] != "" && strings.Trim(words[0], tchars) == ""
	}
	return false
}

type probe struct {
	host   string
	port   uint16
	plain  bool
	method string
	path   string
}

// probes are requests binding c sends its value in, or nearly: each of its hosts (a
// wildcard's by names of a few shapes), on each of its ports, in TLS and plain HTTP, with
// each of its methods (or a few), under its prefix (or not).
func probes(c Credential, extra probe) []probe {
	methods := c.Methods
	if len(methods) == 0 {
		methods = []string{"GET", "ZZQ"}
	}
	paths := []string{"/zzq"}
	if c.PathPrefix != "" {
		paths = []string{c.PathPrefix, c.PathPrefix + "zzq"}
	}
	out := []probe{extra}
	for _, h := range c.Hosts {
		name, ports := hostPorts(h, c.PlainHTTP)
		names := []string{name}
		if e, ok := strings.CutPrefix(name, "*."); ok {
			names = []string{"zzq." + e, "q9." + e, "a.zzq9." + e}
		}
		for _, n := range names {
			for _, p := range ports {
				for _, plain := range []bool{false, true} {
					for _, m := range methods {
						for _, path := range paths {
							out = append(out, probe{n, p, plain, m, path})
						}
					}
				}
			}
		}
	}
	return out
}

// FuzzScope: whatever binding WithinScope admits sends the value only where the scope, read
// independently, lets it (checked on probe requests built from the binding and one from the
// fuzzer) and writes it only into a header, and in a form, the scope allows; whatever it
// refuses writes the value into a header or form the scope does not allow, or has a probe
// the binding would send the value in and the scope does not let it. Seeds:
// testdata/fuzz/FuzzScope.
func FuzzScope(f *testing.F) {
	f.Fuzz(func(t *testing.T, bHosts, bMethods, bPrefix string, bPlain bool, sHosts, sMethods, sPrefix string, sPlain bool, host string, port uint16, method, path string, bHeader, bTemplate, bPlaceholderHeader, sHeaders string) {
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		creds := []Credential{{Secret: "TOKEN", Hosts: split(bHosts), Methods: split(bMethods), PathPrefix: bPrefix, PlainHTTP: bPlain,
			Header: bHeader, Template: bTemplate, PlaceholderHeader: bPlaceholderHeader}}
		if validateCredentials(creds) != nil {
			return
		}
		c := creds[0]
		sc, err := secrets.Scope{Hosts: split(sHosts), Methods: split(sMethods), PathPrefix: sPrefix, PlainHTTP: sPlain, Headers: split(sHeaders)}.Normalize()
		if err != nil {
			return
		}
		extra := probe{host, port, bPlain, method, path}
		out, err := WithinScope(c, &sc)
		if err == nil {
			if !scopeAdmitsHeader(&sc, out) {
				t.Fatalf("binding %+v admitted by scope %+v writes the value into a header or form the scope does not allow", out, sc)
			}
			for _, p := range probes(out, extra) {
				if bindingSends(out, p.host, p.port, p.plain, p.method, p.path) && !scopeAdmits(&sc, p.host, p.port, p.plain, p.method, p.path) {
					t.Fatalf("binding %+v admitted by scope %+v sends the value in %+v, which the scope does not allow", out, sc, p)
				}
			}
			return
		}
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Fatalf("refused with %v, not permission denied", err)
		}
		if !scopeAdmitsHeader(&sc, c) {
			return
		}
		// What the binding would be with the scope's defaults: some request of it is outside.
		eff := c
		if len(eff.Methods) == 0 {
			eff.Methods = sc.Methods
		}
		if eff.PathPrefix == "" {
			eff.PathPrefix = sc.PathPrefix
		}
		for _, p := range probes(eff, extra) {
			if bindingSends(eff, p.host, p.port, p.plain, p.method, p.path) && !scopeAdmits(&sc, p.host, p.port, p.plain, p.method, p.path) {
				return
			}
		}
		t.Fatalf("binding %+v refused by scope %+v (%v), but no request of it is outside the scope", c, sc, err)
	})
}
