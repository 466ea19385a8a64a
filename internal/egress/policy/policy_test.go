package policy

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func mustCompile(t testing.TB, r Rules, sets map[string][]string) *Policy {
	t.Helper()
	p, err := Compile(r, sets)
	if err != nil {
		t.Fatalf("Compile(%+v, %v): %v", r, sets, err)
	}
	return p
}

func named(name string, port uint16) Request { return Request{Name: name, Port: port} }

func direct(addr string, port uint16) Request {
	return Request{Addr: netip.MustParseAddr(addr), Port: port}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		rules  Rules
		sets   map[string][]string
		req    Request
		allow  bool
		rule   string // want Decision.Rule; "" for the default
		reason string // want substring of Decision.Reason
	}{
		// Exact names and ports.
		{name: "exact any port", rules: Rules{Allow: []string{"example.com"}},
			req: named("example.com", 8443), allow: true, rule: "allow example.com", reason: "matches allow rule example.com"},
		{name: "exact other name", rules: Rules{Allow: []string{"example.com"}},
			req: named("www.example.com", 443), rule: "", reason: "no allow rule matches"},
		{name: "exact port hit", rules: Rules{Allow: []string{"example.com:443"}},
			req: named("example.com", 443), allow: true, rule: "allow example.com:443"},
		{name: "exact port miss", rules: Rules{Allow: []string{"example.com:443"}},
			req: named("example.com", 80)},
		{name: "range low edge", rules: Rules{Allow: []string{"example.com:8000-8100"}},
			req: named("example.com", 8000), allow: true, rule: "allow example.com:8000-8100"},
		{name: "range high edge", rules: Rules{Allow: []string{"example.com:8000-8100"}},
			req: named("example.com", 8100), allow: true, rule: "allow example.com:8000-8100"},
		{name: "range above", rules: Rules{Allow: []string{"example.com:8000-8100"}},
			req: named("example.com", 8101)},
		{name: "second rule for same name", rules: Rules{Allow: []string{"example.com:80", "example.com:443"}},
			req: named("example.com", 443), allow: true, rule: "allow example.com:443"},
		{name: "request name normalized", rules: Rules{Allow: []string{"example.com"}},
			req: named("EXAMPLE.com.", 443), allow: true, rule: "allow example.com"},
		{name: "invalid request name", rules: Rules{Net: NetAllowAll},
			req: named("exa mple.com", 443), reason: "invalid host name"},
		{name: "IP literal as name", rules: Rules{Net: NetAllowAll},
			req: named("10.0.0.1", 443), reason: "invalid host name"},

		// Wildcards.
		{name: "wildcard one level", rules: Rules{Allow: []string{"*.example.com"}},
			req: named("a.example.com", 443), allow: true, rule: "allow *.example.com"},
		{name: "wildcard deep", rules: Rules{Allow: []string{"*.example.com"}},
			req: named("a.b.c.example.com", 443), allow: true, rule: "allow *.example.com"},
		{name: "wildcard not apex", rules: Rules{Allow: []string{"*.example.com"}},
			req: named("example.com", 443)},
		{name: "wildcard not suffix string", rules: Rules{Allow: []string{"*.example.com"}},
			req: named("badexample.com", 443)},
		{name: "wildcard trailing dot", rules: Rules{Allow: []string{"*.example.com"}},
			req: named("a.example.com.", 443), allow: true, rule: "allow *.example.com"},
		{name: "wildcard not parent", rules: Rules{Allow: []string{"*.a.example.com"}},
			req: named("b.example.com", 443)},
		{name: "wildcard port", rules: Rules{Allow: []string{"*.example.com:443"}},
			req: named("a.example.com", 80)},
		{name: "exact plus wildcard covers apex", rules: Rules{Allow: []string{"example.com", "*.example.com"}},
			req: named("example.com", 443), allow: true, rule: "allow example.com"},
		{name: "most specific wildcard reported", rules: Rules{Allow: []string{"*.example.com", "*.b.example.com"}},
			req: named("a.b.example.com", 443), allow: true, rule: "allow *.b.example.com"},

		// Deny wins.
		{name: "deny exact over allow wildcard", rules: Rules{Allow: []string{"*.example.com"}, Deny: []string{"evil.example.com"}},
			req: named("evil.example.com", 443), rule: "deny evil.example.com", reason: "denied by rule evil.example.com"},
		{name: "deny wildcard over allow exact", rules: Rules{Allow: []string{"a.example.com"}, Deny: []string{"*.example.com"}},
			req: named("a.example.com", 443), rule: "deny *.example.com"},
		{name: "deny port only", rules: Rules{Allow: []string{"example.com"}, Deny: []string{"example.com:22"}},
			req: named("example.com", 443), allow: true, rule: "allow example.com"},
		{name: "deny port hit", rules: Rules{Allow: []string{"example.com"}, Deny: []string{"example.com:22"}},
			req: named("example.com", 22), rule: "deny example.com:22"},
		{name: "deny wildcard spares apex", rules: Rules{Allow: []string{"example.com"}, Deny: []string{"*.example.com"}},
			req: named("example.com", 443), allow: true, rule: "allow example.com"},

		// Net modes.
		{name: "allow-all", rules: Rules{Net: NetAllowAll},
			req: named("anything.test", 1), allow: true, rule: "net allow-all"},
		{name: "allow-all with deny", rules: Rules{Net: NetAllowAll, Deny: []string{"evil.test"}},
			req: named("evil.test", 443), rule: "deny evil.test"},
		{name: "allow-all with deny other", rules: Rules{Net: NetAllowAll, Deny: []string{"evil.test"}},
			req: named("good.test", 443), allow: true, rule: "net allow-all"},
		{name: "allow-all direct IP", rules: Rules{Net: NetAllowAll},
			req: direct("203.0.113.7", 443), allow: true, rule: "net allow-all"},
		{name: "allow-all direct IPv6", rules: Rules{Net: NetAllowAll},
			req: direct("2001:db8::1", 443), allow: true, rule: "net allow-all"},
		{name: "allow-all CIDR deny direct", rules: Rules{Net: NetAllowAll, Deny: []string{"169.254.0.0/16"}},
			req: direct("169.254.169.254", 80), rule: "deny 169.254.0.0/16"},
		{name: "deny-all", rules: Rules{Net: NetDenyAll},
			req: named("example.com", 443), rule: "net deny-all"},
		{name: "deny-all direct", rules: Rules{Net: NetDenyAll},
			req: direct("10.0.0.1", 443), rule: "net deny-all"},
		{name: "no rules", rules: Rules{},
			req: named("example.com", 443), reason: "no allow rule matches"},

		// Direct IP.
		{name: "direct IP without CIDR", rules: Rules{Allow: []string{"example.com"}},
			req: direct("93.184.216.34", 443), reason: "direct IP connections are not allowed"},
		{name: "direct IP CIDR", rules: Rules{Allow: []string{"10.1.0.0/16:5432"}},
			req: direct("10.1.2.3", 5432), allow: true, rule: "allow 10.1.0.0/16:5432"},
		{name: "direct IP CIDR wrong port", rules: Rules{Allow: []string{"10.1.0.0/16:5432"}},
			req: direct("10.1.2.3", 5433)},
		{name: "direct IP outside CIDR", rules: Rules{Allow: []string{"10.1.0.0/16"}},
			req: direct("10.2.0.1", 5432)},
		{name: "direct single IP", rules: Rules{Allow: []string{"192.168.1.5"}},
			req: direct("192.168.1.5", 22), allow: true, rule: "allow 192.168.1.5"},
		{name: "direct 4in6", rules: Rules{Allow: []string{"10.0.0.0/8"}},
			req: direct("::ffff:10.0.0.1", 22), allow: true, rule: "allow 10.0.0.0/8"},
		{name: "direct IPv6 no rule", rules: Rules{Allow: []string{"0.0.0.0/0"}},
			req: direct("2001:db8::1", 443)},
		{name: "direct CIDR deny wins", rules: Rules{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.9.0.0/16"}},
			req: direct("10.9.0.1", 22), rule: "deny 10.9.0.0/16"},
		{name: "neither name nor addr", rules: Rules{Net: NetAllowAll},
			req: Request{Port: 443}, reason: "neither"},

		// CIDR rules and names.
		{name: "CIDR allow does not allow name", rules: Rules{Allow: []string{"10.0.0.0/8"}},
			req: Request{Name: "db.internal", Addr: netip.MustParseAddr("10.0.0.5"), Port: 5432}},
		{name: "CIDR deny denies name", rules: Rules{Allow: []string{"example.com"}, Deny: []string{"10.0.0.0/8"}},
			req: Request{Name: "example.com", Addr: netip.MustParseAddr("10.0.0.5"), Port: 443}, rule: "deny 10.0.0.0/8"},
		{name: "CIDR deny denies name mapped", rules: Rules{Net: NetAllowAll, Deny: []string{"10.0.0.0/8"}},
			req: Request{Name: "example.com", Addr: netip.MustParseAddr("::ffff:10.0.0.5"), Port: 443}, rule: "deny 10.0.0.0/8"},
		{name: "CIDR deny other addr", rules: Rules{Allow: []string{"example.com"}, Deny: []string{"10.0.0.0/8"}},
			req: Request{Name: "example.com", Addr: netip.MustParseAddr("93.184.216.34"), Port: 443}, allow: true, rule: "allow example.com"},

		// Sets.
		{name: "builtin set", rules: Rules{Allow: []string{"registries"}},
			req: named("registry.npmjs.org", 443), allow: true, rule: "allow registries", reason: "(registry.npmjs.org:443 GET,HEAD); each request is checked"},
		{name: "builtin set port", rules: Rules{Allow: []string{"registries"}},
			req: named("registry.npmjs.org", 80)},
		{name: "builtin set debian http", rules: Rules{Allow: []string{"registries"}},
			req: named("deb.debian.org", 80), allow: true, rule: "allow registries"},
		{name: "builtin set case", rules: Rules{Allow: []string{"Registries"}},
			req: named("proxy.golang.org", 443), allow: true, rule: "allow registries"},
		{name: "builtin set other host", rules: Rules{Allow: []string{"registries"}},
			req: named("github.com", 443)},
		{name: "extended set new member", rules: Rules{Allow: []string{"registries"}},
			sets: map[string][]string{"registries": {"my-mirror.internal"}},
			req:  named("my-mirror.internal", 8080), allow: true, rule: "allow registries", reason: "(my-mirror.internal)"},
		{name: "extended set keeps builtin", rules: Rules{Allow: []string{"registries"}},
			sets: map[string][]string{"registries": {"my-mirror.internal"}},
			req:  named("pypi.org", 443), allow: true, rule: "allow registries"},
		{name: "user set", rules: Rules{Allow: []string{"gh"}},
			sets: map[string][]string{"gh": {"github.com:443", "*.githubusercontent.com:443"}},
			req:  named("raw.githubusercontent.com", 443), allow: true, rule: "allow gh", reason: "(*.githubusercontent.com:443)"},
		{name: "user set in deny", rules: Rules{Net: NetAllowAll, Deny: []string{"gh"}},
			sets: map[string][]string{"gh": {"github.com"}},
			req:  named("github.com", 443), rule: "deny gh", reason: "denied by rule gh (github.com)"},
		{name: "unknown set is a name", rules: Rules{Allow: []string{"npm"}},
			req: named("registry.npmjs.org", 443)},
		{name: "unknown set name matches host", rules: Rules{Allow: []string{"npm"}},
			req: named("npm", 443), allow: true, rule: "allow npm"},
		{name: "set with CIDR direct", rules: Rules{Allow: []string{"lan"}},
			sets: map[string][]string{"lan": {"192.168.0.0/16"}},
			req:  direct("192.168.3.4", 80), allow: true, rule: "allow lan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompile(t, tt.rules, tt.sets)
			d := p.Decide(tt.req)
			if d.Allow != tt.allow {
				t.Errorf("Decide(%+v) = %+v; want allow %v", tt.req, d, tt.allow)
			}
			if d.Rule != tt.rule {
				t.Errorf("Decide(%+v).Rule = %q; want %q", tt.req, d.Rule, tt.rule)
			}
			if d.Reason == "" || !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("Decide(%+v).Reason = %q; want it to contain %q", tt.req, d.Reason, tt.reason)
			}
		})
	}
}

func TestNilPolicyDenies(t *testing.T) {
	var p *Policy
	if d := p.Decide(named("example.com", 443)); d.Allow {
		t.Errorf("nil policy allowed: %+v", d)
	}
	if p.NamesAddr(netip.MustParseAddr("10.0.0.1"), 0) {
		t.Error("nil policy names an address")
	}
}

func TestAllowsName(t *testing.T) {
	p := mustCompile(t, Rules{
		Allow: []string{"example.com:443", "*.cdn.test:8080", "both.test:443"},
		Deny:  []string{"bad.cdn.test", "both.test:443"},
	}, nil)
	tests := []struct {
		name  string
		allow bool
	}{
		{"example.com", true},        // allowed on 443
		{"a.cdn.test", true},         // wildcard on 8080
		{"bad.cdn.test", false},      // port-less deny
		{"both.test", true},          // a port deny does not hide the name from DNS
		{"other.test", false},        // no rule
		{"cdn.test", false},          // wildcard does not cover the apex
		{"Example.COM.", true},       // normalized
		{"", false},                  // no name, no address
		{"not a name", false},        // invalid
		{"10.0.0.1", false},          // IP literal is not a name
		{"a.b.c.d.e.cdn.test", true}, // deep wildcard
	}
	for _, tt := range tests {
		if d := p.AllowsName(tt.name); d.Allow != tt.allow {
			t.Errorf("AllowsName(%q) = %+v; want allow %v", tt.name, d, tt.allow)
		}
	}
	if d := mustCompile(t, Rules{Net: NetAllowAll, Deny: []string{"x.test:22"}}, nil).AllowsName("x.test"); !d.Allow {
		t.Errorf("allow-all with a port deny: AllowsName = %+v; want allow", d)
	}
}

func TestNamesAddr(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		addr  string
		port  uint16
		want  bool
	}{
		{"CIDR covers", Rules{Allow: []string{"10.0.0.0/8"}}, "10.1.2.3", 5432, true},
		{"CIDR covers any port", Rules{Allow: []string{"10.0.0.0/8"}}, "10.1.2.3", 0, true},
		{"CIDR port hit", Rules{Allow: []string{"10.0.0.0/8:5432"}}, "10.1.2.3", 5432, true},
		{"CIDR port miss", Rules{Allow: []string{"10.0.0.0/8:5432"}}, "10.1.2.3", 22, false},
		{"CIDR port rule any port", Rules{Allow: []string{"10.0.0.0/8:5432"}}, "10.1.2.3", 0, true},
		{"outside", Rules{Allow: []string{"10.0.0.0/8"}}, "192.168.0.1", 80, false},
		{"single IP", Rules{Allow: []string{"127.0.0.1:8080"}}, "127.0.0.1", 8080, true},
		{"mapped", Rules{Allow: []string{"127.0.0.1"}}, "::ffff:127.0.0.1", 80, true},
		{"allow-all alone", Rules{Net: NetAllowAll}, "10.1.2.3", 80, false},
		{"allow-all plus CIDR", Rules{Net: NetAllowAll, Allow: []string{"10.0.0.0/8"}}, "10.1.2.3", 80, true},
		{"name rule only", Rules{Allow: []string{"localhost"}}, "127.0.0.1", 80, false},
		{"deny wins", Rules{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.0.0.0/16"}}, "10.0.1.1", 80, false},
		{"deny port", Rules{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.0.0.0/16:22"}}, "10.0.1.1", 80, true},
		{"deny port any-port query", Rules{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.0.0.0/16:22"}}, "10.0.1.1", 0, true},
		{"deny-all", Rules{Net: NetDenyAll}, "10.0.0.1", 80, false},
		{"IPv6", Rules{Allow: []string{"0.0.0.0/0"}}, "::1", 80, false},
	}
	for _, tt := range tests {
		p := mustCompile(t, tt.rules, nil)
		if got := p.NamesAddr(netip.MustParseAddr(tt.addr), tt.port); got != tt.want {
			t.Errorf("%s: NamesAddr(%s, %d) = %v; want %v", tt.name, tt.addr, tt.port, got, tt.want)
		}
	}
	if mustCompile(t, Rules{Allow: []string{"0.0.0.0/0"}}, nil).NamesAddr(netip.Addr{}, 0) {
		t.Error("NamesAddr(zero Addr) = true")
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name  string
		rules Rules
		sets  map[string][]string
		err   string
	}{
		{"bad net", Rules{Net: "allow"}, nil, `net "allow": must be allow-all, deny-all or empty`},
		{"deny-all with allow", Rules{Net: NetDenyAll, Allow: []string{"example.com"}}, nil, "net deny-all takes no allow rules"},
		{"bad allow rule", Rules{Allow: []string{"example.com", "https://x.test"}}, nil, `allow rule "https://x.test": a rule names a host, not a URL`},
		{"bad deny rule", Rules{Deny: []string{"x.test:0"}}, nil, `deny rule "x.test:0": port 0 is out of range`},
		{"star", Rules{Allow: []string{"*"}}, nil, `allow rule "*"`},
		{"empty", Rules{Allow: []string{""}}, nil, `allow rule "": empty rule`},
		{"ipv6", Rules{Allow: []string{"[fd00::/8]:443"}}, nil, "IPv6 is not supported"},
		{"set with port", Rules{Allow: []string{"registries:443"}}, nil, `allow rule "registries:443": a set takes no port`},
		{"nested set", Rules{}, map[string][]string{"mine": {"registries"}}, `sets: "mine": member "registries" is a set`},
		{"nested user set", Rules{}, map[string][]string{"a": {"b"}, "b": {"x.test"}}, `sets: "a": member "b" is a set`},
		{"bad set member", Rules{}, map[string][]string{"mine": {"x.test:99999"}}, `sets: "mine": member "x.test:99999": port 99999 is out of range`},
		{"bad set name", Rules{}, map[string][]string{"my.set": {"x.test"}}, `sets: "my.set" is not a valid set name`},
		{"upper set name", Rules{}, map[string][]string{"Mine": {"x.test"}}, `sets: "Mine" is not a valid set name`},
		{"empty set name", Rules{}, map[string][]string{"": {"x.test"}}, `sets: "" is not a valid set name`},
	}
	for _, tt := range tests {
		_, err := Compile(tt.rules, tt.sets)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: Compile error = %v; want it to contain %q", tt.name, err, tt.err)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Compile error %v is not ErrInvalidArgument", tt.name, err)
		}
	}
}

func TestCompileEmptyUserSet(t *testing.T) {
	p := mustCompile(t, Rules{Allow: []string{"nothing", "example.com"}}, map[string][]string{"nothing": nil})
	if d := p.Decide(named("nothing", 443)); d.Allow {
		t.Errorf("an empty set reference allowed the host of the same name: %+v", d)
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		rules Rules
		want  string
	}{
		{Rules{Net: NetDenyAll}, "deny-all"},
		{Rules{}, "deny-all"},
		{Rules{Deny: []string{"x.test"}}, "deny-all; deny x.test"},
		{Rules{Net: NetAllowAll}, "allow-all"},
		{Rules{Net: NetAllowAll, Deny: []string{"Evil.Test."}}, "allow-all; deny evil.test"},
		{Rules{Net: NetAllowAll, Allow: []string{"10.0.0.0/8"}}, "allow-all; allow 10.0.0.0/8"},
		{Rules{Allow: []string{"Registries", " API.github.com:443", "*.x.test:80-81", "192.168.1.5/32"}, Deny: []string{"evil.test"}},
			"allow registries, api.github.com:443, *.x.test:80-81, 192.168.1.5; deny evil.test"},
	}
	for _, tt := range tests {
		if got := mustCompile(t, tt.rules, nil).String(); got != tt.want {
			t.Errorf("Compile(%+v).String() = %q; want %q", tt.rules, got, tt.want)
		}
	}
}

func TestBuiltinSets(t *testing.T) {
	sets := BuiltinSets()
	reg := sets["registries"]
	for _, want := range []string{"registry.npmjs.org:443 GET,HEAD", "pypi.org:443 GET,HEAD /simple/", "proxy.golang.org:443 GET,HEAD",
		"index.crates.io:443 GET,HEAD", "deb.debian.org:80 GET,HEAD", "security.debian.org:443 GET,HEAD", "rubygems.org:443 GET,HEAD",
		"repo1.maven.org:443 GET,HEAD /maven2/"} {
		if !slices.Contains(reg, want) {
			t.Errorf("registries lacks %s", want)
		}
	}
	for name, members := range sets {
		for _, text := range members {
			m, err := parseMember(name, text)
			if err != nil || m.text != text {
				t.Errorf("built-in set %s: member %q is not canonical (%q): %v", name, text, m.text, err)
				continue
			}
			if m.http == nil {
				t.Errorf("built-in set %s: member %q is not an HTTP rule", name, text)
				continue
			}
			// registries is read-only; registries-publish takes every method.
			if read := name == "registries"; read != slices.Equal(m.http.methods, []string{"GET", "HEAD"}) || !read && len(m.http.methods) > 0 {
				t.Errorf("built-in set %s: member %q has methods %v", name, text, m.http.methods)
			}
		}
	}
	// registries-publish covers every host of registries.
	for _, text := range reg {
		host, _, _ := strings.Cut(text, " ")
		if !slices.Contains(sets["registries-publish"], host+" *") {
			t.Errorf("registries-publish lacks %s", host)
		}
	}
	reg[0] = "changed.test"
	if BuiltinSets()["registries"][0] == "changed.test" {
		t.Error("BuiltinSets returns the table itself, not a copy")
	}
}

func TestDecideNoAlloc(t *testing.T) {
	p := benchPolicy(t)
	reqs := []Request{
		named("a.b.cdn.example.com", 443),
		named("registry.npmjs.org", 443),
		named("nothing.test", 443),
		{Name: "api.github.com", Addr: netip.MustParseAddr("140.82.112.6"), Port: 443},
		direct("10.1.2.3", 5432),
	}
	for _, req := range reqs {
		if n := testing.AllocsPerRun(100, func() { p.Decide(req) }); n != 0 {
			t.Errorf("Decide(%+v) allocates %v times", req, n)
		}
	}
}

// benchPolicy is a realistic policy of about 30 rules.
func benchPolicy(tb testing.TB) *Policy {
	return mustCompile(tb, Rules{
		Allow: []string{
			"registries", "api.github.com:443", "github.com:443", "*.githubusercontent.com:443",
			"*.example.com:443", "*.amazonaws.com:443", "api.openai.com:443", "api.anthropic.com:443",
			"10.1.0.0/16:5432", "192.168.1.5",
		},
		Deny: []string{"evil.example.com", "*.internal.example.com", "169.254.0.0/16"},
	}, nil)
}

func BenchmarkDecide(b *testing.B) {
	p := benchPolicy(b)
	req := Request{Name: "a.b.cdn.example.com", Addr: netip.MustParseAddr("93.184.216.34"), Port: 443}
	if !p.Decide(req).Allow {
		b.Fatal("benchmark request is denied")
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(req)
	}
}

// TestClaimedName: a direct IP connection that names a denied host (TLS SNI, HTTP Host)
// is denied even under allow-all, and a CIDR deny rule covers a named connection's
// resolved address.
func TestClaimedName(t *testing.T) {
	p := mustCompile(t, Rules{Net: NetAllowAll, Deny: []string{"denied.test", "8.8.8.0/24"}}, nil)
	ip := netip.MustParseAddr("203.0.113.9")
	if d := p.Decide(Request{Addr: ip, Port: 443, Claimed: "Denied.Test"}); d.Allow {
		t.Errorf("claimed denied name allowed: %+v", d)
	}
	if d := p.Decide(Request{Addr: ip, Port: 443, Claimed: "fine.test"}); !d.Allow {
		t.Errorf("claimed other name denied: %+v", d)
	}
	if d := p.Decide(Request{Name: "dns.test", Addr: netip.MustParseAddr("8.8.8.8"), Port: 53}); d.Allow {
		t.Errorf("named connection to a denied range allowed: %+v", d)
	}
	cidr := mustCompile(t, Rules{Allow: []string{"10.0.0.0/8:443"}}, nil)
	if d := cidr.Decide(Request{Addr: netip.MustParseAddr("10.1.2.3"), Port: 443, Claimed: "internal.test"}); !d.Allow {
		t.Errorf("a CIDR-allowed connection that names a host not denied: %+v", d)
	}
}
