package policy

import (
	"slices"
	"strings"
)

// maxMethods bounds the methods one HTTP rule lists.
const maxMethods = 16

// httpRule is one compiled HTTP rule: requests to its host and ports with one of its
// methods (any if none) and a path under its prefix (any if empty).
type httpRule struct {
	host    rule // kindName or kindWildcard
	methods []string
	prefix  string
	text    string
	set     string // the set it is a member of, if any
}

// httpTable holds a phase's HTTP rules by host, like table does for allow rules.
type httpTable struct {
	exact map[string][]*httpRule
	wild  map[string][]*httpRule // by parent name
}

// parseHTTPRule parses "HOST[:PORTS] [METHOD[,METHOD...]] [/PATH-PREFIX]" (see the package
// documentation). The error does not repeat the rule.
func parseHTTPRule(s string) (*httpRule, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, invalidf("empty rule")
	}
	if len(fields) > 3 {
		return nil, invalidf("want HOST[:PORTS] [METHODS] [/PATH-PREFIX]")
	}
	h, err := parseRule(fields[0])
	if err != nil {
		return nil, err
	}
	if h.kind == kindCIDR {
		return nil, invalidf("an HTTP rule names a host, not an address")
	}
	r := &httpRule{host: h}
	rest := fields[1:]
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "/") {
		if rest[0] != "*" {
			for _, m := range strings.Split(rest[0], ",") {
				if !IsMethod(m) {
					return nil, invalidf("%q is not an HTTP method (upper case, e.g. GET,POST; * for any)", m)
				}
				if !slices.Contains(r.methods, m) {
					r.methods = append(r.methods, m)
				}
			}
			if len(r.methods) > maxMethods {
				return nil, invalidf("more than %d methods", maxMethods)
			}
		}
		rest = rest[1:]
	}
	if len(rest) > 0 {
		p := rest[0]
		if !strings.HasPrefix(p, "/") {
			return nil, invalidf("path prefix %q must start with /", p)
		}
		if !CleanHTTPPath(p) {
			return nil, invalidf("path prefix %q has an empty, '.' or '..' segment, a backslash or an encoded '/', '\\' or '.'", p)
		}
		if strings.ContainsAny(p, "?#") {
			return nil, invalidf("path prefix %q: a prefix matches the path only, without a query or fragment", p)
		}
		if p != "/" {
			r.prefix = p
		}
		rest = rest[1:]
	}
	if len(rest) > 0 {
		return nil, invalidf("want HOST[:PORTS] [METHODS] [/PATH-PREFIX]")
	}
	r.text = r.String()
	return r, nil
}

// String returns the rule's canonical text.
func (r *httpRule) String() string {
	s := r.host.String()
	if len(r.methods) > 0 {
		s += " " + strings.Join(r.methods, ",")
	}
	if r.prefix != "" {
		s += " " + r.prefix
	}
	return s
}

func (r *httpRule) allows(method, path string) bool {
	return (len(r.methods) == 0 || slices.Contains(r.methods, method)) && strings.HasPrefix(path, r.prefix)
}

// IsMethod reports whether m is an upper-case HTTP method token (letters, '-', '_').
func IsMethod(m string) bool {
	if m == "" || len(m) > 32 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; !('A' <= c && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func (t *httpTable) insert(r *httpRule) {
	if r.host.kind == kindName {
		if t.exact == nil {
			t.exact = map[string][]*httpRule{}
		}
		t.exact[r.host.host] = append(t.exact[r.host.host], r)
		return
	}
	if t.wild == nil {
		t.wild = map[string][]*httpRule{}
	}
	t.wild[r.host.host] = append(t.wild[r.host.host], r)
}

// each calls fn with every rule covering name and port (exact first, then wildcards from
// the most specific parent up) until fn returns true; it reports whether one did.
func (t *httpTable) each(name string, port uint16, fn func(*httpRule) bool) bool {
	for _, r := range t.exact[name] {
		if r.host.ports.covers(port, false) && fn(r) {
			return true
		}
	}
	for i := 0; i < len(name) && len(t.wild) > 0; i++ {
		if name[i] != '.' {
			continue
		}
		for _, r := range t.wild[name[i+1:]] {
			if r.host.ports.covers(port, false) && fn(r) {
				return true
			}
		}
	}
	return false
}

// Inspects reports whether HTTP rules restrict requests to name (canonical) on port: the
// proxy must then terminate TLS to see each request and ask DecideHTTP. A nil Policy
// inspects nothing.
func (p *Policy) Inspects(name string, port uint16) bool {
	if p == nil || len(p.http.exact) == 0 && len(p.http.wild) == 0 {
		return false
	}
	return p.http.each(name, port, func(*httpRule) bool { return true })
}

// DecideHTTP decides one HTTP request on an inspected connection to name (canonical) and
// port. path is the request's path as sent (escaped, without the query). Where no HTTP
// rule covers the host every request is allowed (Rule ""); otherwise a request is allowed
// when its path is clean (CleanHTTPPath) and one of the host's rules lists its method and
// a prefix of its path. The connection itself was decided by Decide.
func (p *Policy) DecideHTTP(name string, port uint16, method, path string) Decision {
	if !p.Inspects(name, port) {
		return Decision{Allow: true, Reason: "no HTTP rule covers " + name}
	}
	if !CleanHTTPPath(path) {
		return Decision{Reason: "the path has an empty, '.' or '..' segment, a backslash or an encoded '/', '\\' or '.'; HTTP rules only match clean paths"}
	}
	var d Decision
	hint := ""
	p.http.each(name, port, func(r *httpRule) bool {
		if r.allows(method, path) {
			d = Decision{Allow: true, Rule: "http " + r.text, Reason: "matches HTTP rule " + r.text}
			if r.set != "" {
				d.Rule = "allow " + r.set
				d.Reason += " (set " + r.set + ")"
			}
			return true
		}
		if h := setHints()[r.set]; h != "" {
			hint = " (" + h + ")"
		}
		return false
	})
	if !d.Allow {
		d.Reason = "no HTTP rule for " + name + " allows " + method + " " + path + hint
	}
	return d
}

// CleanHTTPPath reports whether an escaped URL path starts with '/' and has no empty, "."
// or ".." segment, no backslash, and no percent-encoded '/', '\' or '.': a path a server
// cannot resolve to somewhere other than where it seems to point, so that a prefix match
// on it means what it says.
func CleanHTTPPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, `\`) {
		return false
	}
	lower := strings.ToLower(p)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(lower, "%2e") {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		switch {
		case s == "." || s == "..":
			return false
		case s == "" && i != len(segs)-1: // "//" inside; a trailing '/' is fine
			return false
		}
	}
	return true
}
