package policy

import "strings"

// CoversRule reports whether p allows something that the allow rule (or set name) entry
// names, checked on one representative destination: the name itself (a wildcard's
// representative child "x.<parent>"), the prefix's first address, on the first port of
// its range (on "some port" for a rule of every port); a set when p covers one of its
// members. It serves a check of rules
// meant to narrow p (a sandbox user's own rules): a rule p covers nowhere could never
// let anything through. Entries that do not parse are not covered. sets are the user's
// named sets (Spec.Sets).
func (p *Policy) CoversRule(entry string, sets map[string][]string) bool {
	resolved, err := resolveSets(sets)
	if err != nil {
		return false
	}
	key := strings.ToLower(strings.TrimSpace(entry))
	if members, ok := resolved[key]; ok {
		for _, m := range members {
			if p.coversParsed(m.rule) {
				return true
			}
		}
		return false
	}
	r, err := parseRule(entry)
	if err != nil {
		return false
	}
	return p.coversParsed(r)
}

func (p *Policy) coversParsed(r rule) bool {
	var req Request
	switch r.kind {
	case kindName:
		req.Name = r.host
	case kindWildcard:
		req.Name = "x." + r.host
	case kindCIDR:
		req.Addr = r.prefix.Addr()
	}
	if !r.ports.all() {
		req.Port = r.ports.lo
	}
	return p.Decide(req).Allow
}
