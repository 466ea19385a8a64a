package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Rules is one phase's policy as users write it.
type Rules struct {
	// Net is "allow-all", "deny-all" or "" (allow only what an allow rule names).
	Net string `json:"net,omitempty" yaml:"net,omitempty"`
	// Allow and Deny are rule strings or set names; see the package documentation.
	Allow []string `json:"allow,omitempty" yaml:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty" yaml:"deny,omitempty"`
	// HTTP are HTTP rules: "HOST[:PORTS] [METHODS] [/PATH-PREFIX]". Each allows its host
	// like an allow rule and limits the requests sent to it; see the package documentation.
	HTTP []string `json:"http,omitempty" yaml:"http,omitempty"`
	// Ask are rules (or sets without HTTP rules) whose connections are held for a
	// person's decision instead of refused, when no allow rule allows them (ask.go).
	Ask []string `json:"ask,omitempty" yaml:"ask,omitempty"`
}

// The values of Rules.Net.
const (
	NetAllowAll = "allow-all"
	NetDenyAll  = "deny-all"
)

// Request is one connection or DNS query to decide.
type Request struct {
	// Name is the DNS name asked for, or "" for a direct IP connection. It should be
	// canonical (NormalizeName); other valid spellings are normalized at some cost, and an
	// invalid name, such as an IP literal, is denied.
	Name string
	// Addr is the destination address: the address of a direct IP connection, or the
	// resolved upstream address of a named one. It may be the zero Addr.
	Addr netip.Addr
	// Port is the destination port; 0 asks "on some port?".
	Port uint16
	// Claimed is the host a direct IP connection names itself (its TLS SNI or HTTP Host),
	// if any: deny rules on that name apply to it.
	Claimed string
}

// Decision is the answer to a Request, with what the audit log needs to explain it.
type Decision struct {
	Allow bool
	// Ask (never with Allow): the connection is held for a person's decision (ask.go).
	Ask bool
	// Rule is the rule that decided, as "allow <rule>", "deny <rule>", "ask <rule>",
	// "ask-all" (the spec's ask_all), "net allow-all" or "net deny-all"; "" when nothing
	// matched and the default (deny) applied. For a set reference it names the set;
	// Reason names the member.
	Rule string
	// Reason is a sentence for people.
	Reason string
}

// netMode is the compiled Rules.Net.
type netMode uint8

const (
	netRules netMode = iota
	netAllowAll
	netDenyAll
)

// Policy is one compiled phase. It is immutable and safe for concurrent use.
type Policy struct {
	net         netMode
	allow, deny table
	ask         table // ask rules: held for approval when no allow rule matches
	askAll      bool  // the spec's ask_all: hold what no rule allows or denies
	http        httpTable
	summary     string
}

// match is one compiled rule with the decision it makes.
type match struct {
	ports portRange
	dec   Decision
}

type cidrMatch struct {
	prefix netip.Prefix
	match
}

// table holds one list (allow or deny) indexed for lookup.
type table struct {
	strict bool               // deny table: port 0 matches only rules covering every port
	ask    bool               // ask table: matches hold for approval
	exact  map[string][]match // by name
	wild   map[string][]match // by parent name: "example.com" for *.example.com
	cidr   []cidrMatch        // in rule order
}

// Compile compiles one phase's rules. sets are the user's named sets (Spec.Sets), merged
// with the built-in ones. It rejects a bad net value, allow rules under deny-all,
// malformed rules and sets; errors name the field or rule.
func Compile(r Rules, sets map[string][]string) (*Policy, error) {
	resolved, err := resolveSets(sets)
	if err != nil {
		return nil, err
	}
	return compile(r, resolved, false)
}

// compile compiles one phase; askAll is the spec's ask_all.
func compile(r Rules, sets map[string][]member, askAll bool) (*Policy, error) {
	p := &Policy{deny: table{strict: true}, ask: table{ask: true}}
	switch r.Net {
	case "":
		p.net = netRules
	case NetAllowAll:
		p.net = netAllowAll
	case NetDenyAll:
		p.net = netDenyAll
		if len(r.Allow) > 0 {
			return nil, invalidf("net deny-all takes no allow rules")
		}
		if len(r.HTTP) > 0 {
			return nil, invalidf("net deny-all takes no http rules")
		}
		if len(r.Ask) > 0 {
			return nil, invalidf("net deny-all takes no ask rules")
		}
	default:
		return nil, invalidf("net %q: must be %s, %s or empty", r.Net, NetAllowAll, NetDenyAll)
	}
	allowed, err := p.allow.add("allow", r.Allow, sets)
	if err != nil {
		return nil, err
	}
	// Allowed sets' HTTP members check each request to their hosts (add allowed the hosts).
	for _, entry := range r.Allow {
		for _, m := range sets[strings.ToLower(strings.TrimSpace(entry))] {
			if m.http != nil {
				p.http.insert(m.http)
			}
		}
	}
	denied, err := p.deny.add("deny", r.Deny, sets)
	if err != nil {
		return nil, err
	}
	asked, err := p.compileAsk(r.Ask, sets, askAll)
	if err != nil {
		return nil, err
	}
	var inspected []string
	for _, entry := range r.HTTP {
		hr, err := parseHTTPRule(entry)
		if err != nil {
			return nil, fmt.Errorf("http rule %q: %w", entry, err)
		}
		p.http.insert(hr)
		p.allow.insert(hr.host, Decision{Allow: true, Rule: "http " + hr.text, Reason: "matches HTTP rule " + hr.text + " (each request is checked)"})
		inspected = append(inspected, hr.text)
	}
	var parts []string
	switch {
	case p.net == netAllowAll:
		parts = append(parts, NetAllowAll)
	case p.net == netDenyAll || len(allowed) == 0 && len(inspected) == 0:
		parts = append(parts, NetDenyAll)
	}
	if p.askAll {
		parts = append(parts, "ask-all")
	}
	if len(allowed) > 0 {
		parts = append(parts, "allow "+strings.Join(allowed, ", "))
	}
	if len(inspected) > 0 {
		parts = append(parts, "http "+strings.Join(inspected, ", "))
	}
	if len(asked) > 0 {
		parts = append(parts, "ask "+strings.Join(asked, ", "))
	}
	if len(denied) > 0 {
		parts = append(parts, "deny "+strings.Join(denied, ", "))
	}
	p.summary = strings.Join(parts, "; ")
	return p, nil
}

// add compiles entries (rules or set names) into t and returns their canonical texts.
func (t *table) add(verb string, entries []string, sets map[string][]member) ([]string, error) {
	texts := make([]string, 0, len(entries))
	for _, entry := range entries {
		key := strings.ToLower(strings.TrimSpace(entry))
		if members, ok := sets[key]; ok {
			for _, m := range members {
				d := t.decision(verb, key, m.text)
				if m.http != nil && !t.strict {
					d.Reason += "; each request is checked"
				}
				t.insert(m.rule, d)
			}
			texts = append(texts, key)
			continue
		}
		if host, _, ok := strings.Cut(key, ":"); ok {
			if _, isSet := sets[host]; isSet {
				return nil, invalidf("%s rule %q: a set takes no port", verb, entry)
			}
		}
		r, err := parseRule(entry)
		if err != nil {
			return nil, fmt.Errorf("%s rule %q: %w", verb, entry, err)
		}
		text := r.String()
		t.insert(r, t.decision(verb, text, ""))
		texts = append(texts, text)
	}
	return texts, nil
}

// decision precomputes what a match of rule (a member of a set if member != "") says.
func (t *table) decision(verb, rule, member string) Decision {
	d := Decision{Allow: !t.strict && !t.ask, Ask: t.ask, Rule: verb + " " + rule}
	switch {
	case t.strict:
		d.Reason = "denied by rule " + rule
	case t.ask:
		d.Reason = "matches ask rule " + rule + ": held for approval"
	default:
		d.Reason = "matches allow rule " + rule
	}
	if member != "" {
		d.Reason += " (" + member + ")"
	}
	return d
}

func (t *table) insert(r rule, d Decision) {
	m := match{ports: r.ports, dec: d}
	switch r.kind {
	case kindName:
		if t.exact == nil {
			t.exact = make(map[string][]match)
		}
		t.exact[r.host] = append(t.exact[r.host], m)
	case kindWildcard:
		if t.wild == nil {
			t.wild = make(map[string][]match)
		}
		t.wild[r.host] = append(t.wild[r.host], m)
	case kindCIDR:
		t.cidr = append(t.cidr, cidrMatch{prefix: r.prefix, match: m})
	}
}

// name finds the rule covering a canonical name and port: an exact rule first, then
// wildcards from the most specific parent up, each list in rule order.
func (t *table) name(name string, port uint16) (Decision, bool) {
	for _, m := range t.exact[name] {
		if m.ports.covers(port, t.strict) {
			return m.dec, true
		}
	}
	if len(t.wild) == 0 {
		return Decision{}, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] != '.' {
			continue
		}
		for _, m := range t.wild[name[i+1:]] {
			if m.ports.covers(port, t.strict) {
				return m.dec, true
			}
		}
	}
	return Decision{}, false
}

// addr finds the first CIDR rule covering an (unmapped) address and port.
func (t *table) addr(a netip.Addr, port uint16) (Decision, bool) {
	for _, m := range t.cidr {
		if m.prefix.Contains(a) && m.ports.covers(port, t.strict) {
			return m.dec, true
		}
	}
	return Decision{}, false
}

// Decide decides a connection or DNS query; see the package documentation for the order
// of steps. A nil Policy denies everything.
func (p *Policy) Decide(req Request) Decision {
	if p == nil {
		return Decision{Reason: "no policy"}
	}
	if p.net == netDenyAll {
		return Decision{Rule: "net deny-all", Reason: "net deny-all denies every connection"}
	}
	addr := req.Addr.Unmap()
	if req.Name == "" {
		if !addr.IsValid() {
			return Decision{Reason: "request has neither a host name nor an address"}
		}
		if d, ok := p.deny.denyAddr(addr, req.Port); ok {
			return d
		}
		if req.Claimed != "" {
			claimed, err := NormalizeName(req.Claimed)
			if err != nil {
				return Decision{Reason: "invalid claimed host name"}
			}
			if d, ok := p.deny.name(claimed, req.Port); ok {
				return d
			}
		}
		if p.net == netAllowAll {
			return allowAll()
		}
		if d, ok := p.allow.addr(addr, req.Port); ok {
			return d
		}
		if d, ok := p.ask.addr(addr, req.Port); ok {
			return d
		}
		if p.askAll {
			return askAll()
		}
		return Decision{Reason: "direct IP connections are not allowed; name the host or add a CIDR rule"}
	}
	name, err := NormalizeName(req.Name)
	if err != nil {
		return Decision{Reason: "invalid host name"}
	}
	if d, ok := p.deny.name(name, req.Port); ok {
		return d
	}
	if addr.IsValid() {
		if d, ok := p.deny.denyAddr(addr, req.Port); ok {
			return d
		}
	}
	if p.net == netAllowAll {
		return allowAll()
	}
	if d, ok := p.allow.name(name, req.Port); ok {
		return d
	}
	if d, ok := p.ask.name(name, req.Port); ok {
		return d
	}
	if p.askAll {
		return askAll()
	}
	return Decision{Reason: "no allow rule matches"}
}

func allowAll() Decision {
	return Decision{Allow: true, Rule: "net allow-all", Reason: "net allow-all allows what no deny rule denies"}
}

// AllowsName is the DNS server's question: may name be reached on some port? It is
// Decide(Request{Name: name}): true if an allow rule names it on any port (or net is
// allow-all) and no deny rule covering every port matches it.
func (p *Policy) AllowsName(name string) Decision {
	return p.Decide(Request{Name: name})
}

// NamesAddr reports whether a CIDR allow rule covers addr and port (0: any port) and no
// CIDR deny rule does. net allow-all alone never names an address. The proxy uses it to
// let a sandbox reach private or loopback addresses only when the policy says so
// explicitly. An IPv6 address that carries an IPv4 address (EmbeddedIPv4) is never
// named (CIDR rules are IPv4), and a deny rule covering the IPv4 address it carries
// covers it too.
func (p *Policy) NamesAddr(addr netip.Addr, port uint16) bool {
	if p == nil || p.net == netDenyAll {
		return false
	}
	addr = addr.Unmap()
	if !addr.IsValid() {
		return false
	}
	if _, denied := p.deny.denyAddr(addr, port); denied {
		return false
	}
	_, ok := p.allow.addr(addr, port)
	return ok
}

// String summarizes the policy canonically, e.g. "deny-all", "allow-all; deny evil.test"
// or "allow registries, api.github.com:443; deny evil.test". A policy without allow rules
// and without net allow-all starts with "deny-all".
func (p *Policy) String() string {
	if p == nil {
		return NetDenyAll
	}
	return p.summary
}
