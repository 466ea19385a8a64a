package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// Seeds live in testdata/fuzz/<FuzzName>/.

func FuzzParseRule(f *testing.F) {
	allowAll := mustCompile(f, Rules{Net: NetAllowAll}, nil)
	f.Fuzz(func(t *testing.T, s string) {
		// Any request name: Decide never panics, and allow-all allows exactly valid names.
		_, nameErr := NormalizeName(s)
		if d := allowAll.Decide(Request{Name: s, Port: 443}); d.Allow != (nameErr == nil && s != "") {
			t.Fatalf("allow-all Decide(%q) = %+v, NormalizeName error %v", s, d, nameErr)
		}
		if n, err := NormalizeName(s); err == nil {
			if again, err := NormalizeName(n); err != nil || again != n {
				t.Fatalf("NormalizeName(%q) = %q is not idempotent: %q, %v", s, n, again, err)
			}
		}

		r, err := parseRule(s)
		if err != nil {
			return
		}
		text := r.String()
		again, err := parseRule(text)
		if err != nil || again != r {
			t.Fatalf("parseRule(%q) = %q does not round-trip: %+v, %v", s, text, again, err)
		}
		p, err := Compile(Rules{Allow: []string{text}}, nil)
		if err != nil {
			if strings.Contains(err.Error(), "a set takes no port") {
				return
			}
			t.Fatalf("Compile(allow %q): %v", text, err)
		}
		// The rule allows what it names.
		var req Request
		switch r.kind {
		case kindName:
			req = Request{Name: r.host, Port: r.ports.lo}
		case kindWildcard:
			if len(r.host)+2 > maxNameLen {
				return
			}
			req = Request{Name: "x." + r.host, Port: r.ports.hi}
		case kindCIDR:
			req = Request{Addr: r.prefix.Addr(), Port: r.ports.hi}
			if !p.NamesAddr(req.Addr, req.Port) {
				t.Fatalf("allow %q does not name %v", text, req.Addr)
			}
		}
		if _, isSet := builtinSets()[r.host]; isSet && r.kind == kindName && r.ports.all() {
			return // text is a set reference, not this name
		}
		if d := p.Decide(req); !d.Allow || d.Rule != "allow "+text {
			t.Fatalf("allow %q: Decide(%+v) = %+v", text, req, d)
		}
		// Denying it under allow-all denies the same request; deny-all never allows.
		deny := mustCompile(t, Rules{Net: NetAllowAll, Deny: []string{text}}, nil)
		if d := deny.Decide(req); d.Allow {
			t.Fatalf("deny %q: Decide(%+v) = %+v", text, req, d)
		}
		denyAll := mustCompile(t, Rules{Net: NetDenyAll, Deny: []string{text}}, nil)
		if d := denyAll.Decide(req); d.Allow {
			t.Fatalf("deny-all: Decide(%+v) = %+v", req, d)
		}
		// As an ask rule it asks for what it names; a deny rule wins over it, an allow
		// rule beats it.
		ask := mustCompile(t, Rules{Ask: []string{text}}, nil)
		if d := ask.Decide(req); d.Allow || !d.Ask || d.Rule != "ask "+text {
			t.Fatalf("ask %q: Decide(%+v) = %+v", text, req, d)
		}
		askDeny := mustCompile(t, Rules{Ask: []string{text}, Deny: []string{text}}, nil)
		if d := askDeny.Decide(req); d.Allow || d.Ask {
			t.Fatalf("ask and deny %q: Decide(%+v) = %+v", text, req, d)
		}
		askAllow := mustCompile(t, Rules{Ask: []string{text}, Allow: []string{text}}, nil)
		if d := askAllow.Decide(req); !d.Allow || d.Ask {
			t.Fatalf("ask and allow %q: Decide(%+v) = %+v", text, req, d)
		}
	})
}

func FuzzParseFile(f *testing.F) {
	reqs := []Request{
		{Name: "example.com", Port: 443},
		{Name: "a.example.com", Port: 80},
		{Name: "registry.npmjs.org", Port: 443},
		{Name: "localhost"},
		{Addr: netip.MustParseAddr("10.0.0.1"), Port: 5432},
		{Addr: netip.MustParseAddr("127.0.0.1")},
		{Name: "example.com", Addr: netip.MustParseAddr("192.168.1.5"), Port: 443},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseFile(data)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("ParseFile returned a spec that does not validate: %v", err)
		}
		for _, start := range []Start{StartCreate, StartSetup, StartReplace} {
			if phase, err := s.StartPhase(start, "run"); err == nil {
				if _, ok := s.Phases[phase]; !ok {
					t.Fatalf("StartPhase(%d) = %q, not a phase of %v", start, phase, s.Phases)
				}
				if s.Phase != "" && start != StartSetup && phase != s.Phase {
					t.Fatalf("StartPhase(%d) = %q, but the file names %q", start, phase, s.Phase)
				}
				if start == StartCreate && s.Phase == "" && phase == "setup" && len(s.Phases) > 1 {
					t.Fatalf("a file naming no phase starts in setup: %v", s.Phases)
				}
			}
		}
		if s.Phase == "" {
			var err error
			if s, err = s.WithStartPhase(StartCreate, ""); err != nil {
				return // ambiguous: the entry point must be told a phase
			}
		}
		c, err := CompileSpec(s)
		if err != nil {
			t.Fatalf("CompileSpec of a parsed file: %v", err)
		}
		if _, ok := c.Phase(s.Phase); !ok {
			t.Fatalf("current phase %q not compiled", s.Phase)
		}
		for _, name := range c.Phases() {
			p, _ := c.Phase(name)
			if p.String() == "" {
				t.Fatalf("phase %q: empty String()", name)
			}
			denyAll := s.Phases[name].Net == NetDenyAll
			for _, req := range reqs {
				d := p.Decide(req)
				if (d.Allow || d.Ask) && denyAll {
					t.Fatalf("phase %q is deny-all but allowed or asked %+v: %+v", name, req, d)
				}
				if d.Allow && d.Ask {
					t.Fatalf("phase %q: %+v both allowed and asked: %+v", name, req, d)
				}
				if d.Ask && !s.HasAsk() {
					t.Fatalf("phase %q asked %+v without ask rules or ask_all: %+v", name, req, d)
				}
				if p.NamesAddr(req.Addr, req.Port) && denyAll {
					t.Fatalf("phase %q is deny-all but names %v", name, req.Addr)
				}
			}
		}
	})
}

func FuzzHTTPRule(f *testing.F) {
	f.Fuzz(func(t *testing.T, rule, method, path string) {
		r, err := parseHTTPRule(rule)
		if err != nil {
			return
		}
		again, err := parseHTTPRule(r.text)
		if err != nil || again.String() != r.text {
			t.Fatalf("parseHTTPRule(%q) = %q does not round-trip: %v", rule, r.text, err)
		}
		p, err := Compile(Rules{HTTP: []string{r.text}}, nil)
		if err != nil {
			t.Fatalf("Compile(http %q): %v", r.text, err)
		}
		host := r.host.host
		if r.host.kind == kindWildcard {
			if len(host)+2 > maxNameLen {
				return
			}
			host = "x." + host
		}
		port := r.host.ports.lo
		if !p.Inspects(host, port) {
			t.Fatalf("http %q does not inspect %s:%d", r.text, host, port)
		}
		// What the rule names is allowed.
		m := "GET"
		if len(r.methods) > 0 {
			m = r.methods[0]
		}
		pre := r.prefix
		if pre == "" {
			pre = "/"
		}
		if d := p.DecideHTTP(host, port, m, pre); !d.Allow {
			t.Fatalf("http %q: DecideHTTP(%s %s) = %+v", r.text, m, pre, d)
		}
		// Any request: an allowed one is clean, under the prefix, with a listed method.
		d := p.DecideHTTP(host, port, method, path)
		if d.Allow && (!CleanHTTPPath(path) || !strings.HasPrefix(path, r.prefix) || len(r.methods) > 0 && !slices.Contains(r.methods, method)) {
			t.Fatalf("http %q allowed %s %s", r.text, method, path)
		}
	})
}
