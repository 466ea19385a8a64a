package policy

import (
	"strings"
	"testing"
)

func TestHTTPRules(t *testing.T) {
	rules := Rules{
		Allow: []string{"plain.test"},
		HTTP: []string{
			"api.test GET,HEAD /repos/acme/",
			"api.test POST /repos/acme/widget/pulls",
			"upload.test:8443",
			"*.cdn.test GET",
		},
		Deny: []string{"blocked.api.test"},
	}
	p := mustCompile(t, rules, nil)
	if got, want := p.String(), "allow plain.test; http api.test GET,HEAD /repos/acme/, api.test POST /repos/acme/widget/pulls, upload.test:8443, *.cdn.test GET; deny blocked.api.test"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	tests := []struct {
		name, host   string
		port         uint16
		method, path string
		inspects     bool
		allow        bool
		rule, reason string
	}{
		{name: "prefix and method", host: "api.test", port: 443, method: "GET", path: "/repos/acme/widget", inspects: true, allow: true, rule: "http api.test GET,HEAD /repos/acme/"},
		{name: "second rule", host: "api.test", port: 443, method: "POST", path: "/repos/acme/widget/pulls", inspects: true, allow: true, rule: "http api.test POST /repos/acme/widget/pulls"},
		{name: "method not listed", host: "api.test", port: 443, method: "DELETE", path: "/repos/acme/widget", inspects: true, reason: "no HTTP rule for api.test allows DELETE /repos/acme/widget"},
		{name: "POST outside its prefix", host: "api.test", port: 443, method: "POST", path: "/repos/acme/widget/issues", inspects: true},
		{name: "prefix is a string prefix", host: "api.test", port: 443, method: "GET", path: "/repos/acme-evil/x", inspects: true},
		{name: "dot-dot escape", host: "api.test", port: 443, method: "GET", path: "/repos/acme/../other/x", inspects: true, reason: "clean paths"},
		{name: "encoded dot-dot", host: "api.test", port: 443, method: "GET", path: "/repos/acme/%2e%2e/other", inspects: true},
		{name: "encoded slash", host: "api.test", port: 443, method: "GET", path: "/repos/acme%2F..%2Fother", inspects: true},
		{name: "double slash", host: "api.test", port: 443, method: "GET", path: "/repos/acme//x", inspects: true},
		{name: "backslash", host: "api.test", port: 443, method: "GET", path: `/repos/acme/\x`, inspects: true},
		{name: "methods are case-sensitive", host: "api.test", port: 443, method: "get", path: "/repos/acme/x", inspects: true},
		{name: "port-limited rule, other port", host: "upload.test", port: 443, method: "PUT", path: "/x", inspects: false, allow: true},
		{name: "port-limited rule, its port", host: "upload.test", port: 8443, method: "PUT", path: "/anything", inspects: true, allow: true, rule: "http upload.test:8443"},
		{name: "wildcard", host: "a.b.cdn.test", port: 443, method: "GET", path: "/lib.js", inspects: true, allow: true, rule: "http *.cdn.test GET"},
		{name: "wildcard method", host: "a.cdn.test", port: 443, method: "POST", path: "/lib.js", inspects: true},
		{name: "wildcard excludes its parent", host: "cdn.test", port: 443, method: "POST", path: "/", inspects: false, allow: true},
		{name: "uninspected host", host: "plain.test", port: 443, method: "DELETE", path: "/../x", inspects: false, allow: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Inspects(tt.host, tt.port); got != tt.inspects {
				t.Errorf("Inspects(%s, %d) = %v, want %v", tt.host, tt.port, got, tt.inspects)
			}
			d := p.DecideHTTP(tt.host, tt.port, tt.method, tt.path)
			if d.Allow != tt.allow || d.Rule != tt.rule || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("DecideHTTP(%s %s %s) = %+v, want allow=%v rule=%q reason~%q", tt.host, tt.method, tt.path, d, tt.allow, tt.rule, tt.reason)
			}
		})
	}

	// The connection: an HTTP rule allows its host, deny rules still win.
	for _, c := range []struct {
		req   Request
		allow bool
		rule  string
	}{
		{named("api.test", 443), true, "http api.test GET,HEAD /repos/acme/"},
		{named("upload.test", 8443), true, "http upload.test:8443"},
		{named("upload.test", 443), false, ""},
		{named("blocked.api.test", 443), false, "deny blocked.api.test"},
		{named("x.cdn.test", 80), true, "http *.cdn.test GET"},
	} {
		if d := p.Decide(c.req); d.Allow != c.allow || d.Rule != c.rule {
			t.Errorf("Decide(%+v) = %+v, want allow=%v rule=%q", c.req, d, c.allow, c.rule)
		}
	}

	// Under allow-all, an HTTP rule still limits its host.
	aa := mustCompile(t, Rules{Net: NetAllowAll, HTTP: []string{"api.test GET"}}, nil)
	if d := aa.DecideHTTP("api.test", 443, "POST", "/"); d.Allow {
		t.Errorf("allow-all with an HTTP rule allowed POST: %+v", d)
	}
	if d := aa.DecideHTTP("other.test", 443, "POST", "/"); !d.Allow || aa.Inspects("other.test", 443) {
		t.Errorf("allow-all inspected an unnamed host: %+v", d)
	}
	var nilPolicy *Policy
	if nilPolicy.Inspects("api.test", 443) {
		t.Error("a nil policy inspects")
	}
}

func TestHTTPRuleErrors(t *testing.T) {
	for _, tt := range []struct{ rule, want string }{
		{"", "empty rule"},
		{"10.0.0.0/8 GET", "names a host, not an address"},
		{"api.test get", `"get" is not an HTTP method`},
		{"api.test GET,", `"" is not an HTTP method`},
		{"api.test GET repos/", `"repos/" must start with /`},
		{"api.test repos/", `"repos/" is not an HTTP method`},
		{"api.test GET /a/../b", "'..' segment"},
		{"api.test GET /a%2fb", "encoded"},
		{"api.test GET /a?x=1", "without a query"},
		{"api.test GET /a /b", "want HOST"},
		{"https://api.test GET", "not a URL"},
		{"api.test:0 GET", "port"},
	} {
		_, err := Compile(Rules{HTTP: []string{tt.rule}}, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "http rule") {
			t.Errorf("http rule %q: error %v, want one containing %q", tt.rule, err, tt.want)
		}
	}
	if _, err := Compile(Rules{Net: NetDenyAll, HTTP: []string{"api.test"}}, nil); err == nil {
		t.Error("deny-all accepted an http rule")
	}
	// Canonical texts: methods deduplicated, "/" and "*" mean no limit.
	p := mustCompile(t, Rules{HTTP: []string{"API.test:443 GET,GET,POST /", "b.test * /x/"}}, nil)
	if got := p.String(); got != "http api.test:443 GET,POST, b.test /x/" {
		t.Errorf("String() = %q", got)
	}
}

func TestParseFileHTTP(t *testing.T) {
	s, err := ParseFile([]byte("phases:\n  setup: {allow: [registries]}\n  run:\n    http: [\"api.test GET /repos/acme/\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Phases["run"].HTTP; len(got) != 1 || got[0] != "api.test GET /repos/acme/" {
		t.Errorf("run http = %q", got)
	}
	if _, err := ParseFile([]byte("http: [\"api.test bad\"]\n")); err == nil || !strings.Contains(err.Error(), "not an HTTP method") {
		t.Errorf("bad http rule in a file: %v", err)
	}
	if _, err := ParseFile([]byte("http: [api.test]\nphases: {run: {}}\n")); err == nil {
		t.Error("top-level http combined with phases was accepted")
	}
}

func TestCleanHTTPPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/a": true, "/a/": true, "/a/b.c": true, "/a/..b": true, "/a%20b": true,
		"": false, "a": false, "//": false, "/a//b": false, "/./a": false, "/a/.": false, "/a/..": false,
		"/a/../b": false, `/a\b`: false, "/a%2Fb": false, "/a%2e%2e/b": false, "/a%5cb": false,
	} {
		if got := CleanHTTPPath(p); got != want {
			t.Errorf("CleanHTTPPath(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestRegistriesReadOnly: the built-in registries set lets a sandbox download packages
// but not publish them; registries-publish is the opt-in; both check every request.
func TestRegistriesReadOnly(t *testing.T) {
	ro := mustCompile(t, Rules{Allow: []string{"registries"}}, nil)
	pub := mustCompile(t, Rules{Allow: []string{"registries-publish"}}, nil)
	both := mustCompile(t, Rules{Allow: []string{"registries", "registries-publish"}}, nil)
	for _, tc := range []struct {
		host             string
		port             uint16
		method, path     string
		ro, pub          bool
		roRule, roReason string
	}{
		{"registry.npmjs.org", 443, "GET", "/left-pad", true, true, "allow registries", "matches HTTP rule registry.npmjs.org:443 GET,HEAD (set registries)"},
		{"registry.npmjs.org", 443, "GET", "/left-pad/-/left-pad-1.3.0.tgz", true, true, "allow registries", ""},
		{"registry.npmjs.org", 443, "HEAD", "/left-pad", true, true, "allow registries", ""},
		{"registry.npmjs.org", 443, "PUT", "/left-pad", false, true, "", "registries set is read-only"},
		{"registry.npmjs.org", 443, "POST", "/-/npm/v1/security/advisories/bulk", false, true, "", "allow registries-publish to publish"},
		{"registry.npmjs.org", 443, "DELETE", "/left-pad/-rev/1", false, true, "", ""},
		{"crates.io", 443, "PUT", "/api/v1/crates/new", false, true, "", ""},
		{"crates.io", 443, "GET", "/api/v1/crates/serde/1.0.0/download", true, true, "", ""},
		{"crates.io", 443, "GET", "/me", false, true, "", ""},
		{"pypi.org", 443, "GET", "/simple/requests/", true, true, "", ""},
		{"pypi.org", 443, "POST", "/simple/requests/", false, true, "", ""},
		{"pypi.org", 443, "GET", "/account/login/", false, true, "", ""},
		{"upload.pypi.org", 443, "POST", "/legacy/", false, true, "", ""},
		{"files.pythonhosted.org", 443, "GET", "/packages/ab/cd/x-1.0-py3-none-any.whl", true, true, "", ""},
		{"rubygems.org", 443, "POST", "/api/v1/gems", false, true, "", ""},
		{"deb.debian.org", 80, "GET", "/debian/dists/bookworm/InRelease", true, true, "", ""},
		{"deb.debian.org", 80, "POST", "/debian/x", false, true, "", ""},
		{"proxy.golang.org", 443, "GET", "/golang.org/x/mod/@v/list", true, true, "", ""},
		{"repo1.maven.org", 443, "PUT", "/maven2/x/y/1/y-1.jar", false, true, "", ""},
	} {
		name := tc.method + " " + tc.host + tc.path
		connect := Request{Name: tc.host, Port: tc.port}
		if d := ro.Decide(connect); (tc.host == "upload.pypi.org") == d.Allow {
			t.Errorf("registries: connect %s = %+v", tc.host, d)
		}
		if !pub.Decide(connect).Allow || !both.Decide(connect).Allow {
			t.Errorf("registries-publish: connect %s refused", tc.host)
		}
		if tc.host != "upload.pypi.org" && (!ro.Inspects(tc.host, tc.port) || !pub.Inspects(tc.host, tc.port)) {
			t.Errorf("%s: not inspected", name)
		}
		d := ro.DecideHTTP(tc.host, tc.port, tc.method, tc.path)
		if tc.host != "upload.pypi.org" && d.Allow != tc.ro {
			t.Errorf("registries: %s = %+v, want allow %v", name, d, tc.ro)
		}
		if tc.roRule != "" && d.Rule != tc.roRule || !strings.Contains(d.Reason, tc.roReason) {
			t.Errorf("registries: %s = %+v, want rule %q, reason containing %q", name, d, tc.roRule, tc.roReason)
		}
		for which, p := range map[string]*Policy{"registries-publish": pub, "both": both} {
			if d := p.DecideHTTP(tc.host, tc.port, tc.method, tc.path); d.Allow != tc.pub {
				t.Errorf("%s: %s = %+v, want allow %v", which, name, d, tc.pub)
			}
		}
	}
	// Another port of a registry is not allowed by either.
	if ro.Decide(named("registry.npmjs.org", 8443)).Allow || pub.Decide(named("registry.npmjs.org", 80)).Allow {
		t.Error("a registry's other port is allowed")
	}
	// deny registries denies the hosts outright; a set's HTTP members make the spec need
	// the interception CA.
	den := mustCompile(t, Rules{Net: NetAllowAll, Deny: []string{"registries"}}, nil)
	if d := den.Decide(named("registry.npmjs.org", 443)); d.Allow || d.Rule != "deny registries" {
		t.Errorf("deny registries: %+v", d)
	}
	if den.Inspects("registry.npmjs.org", 443) {
		t.Error("deny registries inspects")
	}
	if !Single(Rules{Allow: []string{"registries"}}).HasHTTPRules() || Single(Rules{Deny: []string{"registries"}}).HasHTTPRules() ||
		Single(Rules{Allow: []string{"x.test"}}).HasHTTPRules() {
		t.Error("HasHTTPRules does not follow allowed sets")
	}
	// A user set may hold HTTP rules too; extending registries with a plain host allows it whole.
	sets := map[string][]string{"mine": {"api.test GET /v1/"}, "registries": {"mirror.internal"}}
	mine := mustCompile(t, Rules{Allow: []string{"mine", "registries"}}, sets)
	if !mine.DecideHTTP("api.test", 443, "GET", "/v1/x").Allow || mine.DecideHTTP("api.test", 443, "POST", "/v1/x").Allow {
		t.Error("user set with an HTTP member")
	}
	if mine.Inspects("mirror.internal", 443) || !mine.Decide(named("mirror.internal", 8080)).Allow {
		t.Error("a plain member of an extended registries set")
	}
}
