package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// Entry is one rule of a phase as an inventory shows it: parsed by the same parser the
// policy is compiled with, with every set expanded into its members (Set names it).
type Entry struct {
	Verb string `json:"verb"` // "allow", "deny", "http" or "ask"
	Text string `json:"text"` // canonical
	Set  string `json:"set,omitempty"`
	Kind string `json:"kind"` // "name", "wildcard" or "cidr"
	// Host is the name of a name rule or the parent of a wildcard ("*.HOST"); CIDR the
	// prefix of a CIDR rule.
	Host string `json:"host,omitempty"`
	CIDR string `json:"cidr,omitempty"`
	// Bits is the CIDR prefix length; Ports "1-65535" (all), "443" or "8000-8100".
	Bits  int    `json:"bits,omitempty"`
	Ports string `json:"ports"`
	// HTTP: each request is checked against Methods (empty: any) and PathPrefix (empty:
	// any path). Set on http entries and on allow entries from sets with HTTP members.
	HTTP       bool     `json:"http,omitempty"`
	Methods    []string `json:"methods,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
}

// AllPorts reports whether e covers every port.
func (e Entry) AllPorts() bool { return e.Ports == "1-65535" }

// Describe lists a phase's rules with its sets (the built-in ones extended by sets)
// expanded. It rejects what Compile rejects in those rules.
func Describe(r Rules, sets map[string][]string) ([]Entry, error) {
	resolved, err := resolveSets(sets)
	if err != nil {
		return nil, err
	}
	if _, err := compile(r, resolved, false); err != nil {
		return nil, err
	}
	var out []Entry
	for _, l := range []struct {
		verb    string
		entries []string
	}{{"allow", r.Allow}, {"deny", r.Deny}, {"ask", r.Ask}} {
		for _, text := range l.entries {
			key := strings.ToLower(strings.TrimSpace(text))
			if members, ok := resolved[key]; ok {
				for _, m := range members {
					e := entryOf(l.verb, m.rule, m.text)
					e.Set = key
					if m.http != nil {
						e.HTTP, e.Methods, e.PathPrefix = true, m.http.methods, m.http.prefix
					}
					out = append(out, e)
				}
				continue
			}
			ru, err := parseRule(text)
			if err != nil {
				return nil, fmt.Errorf("%s rule %q: %w", l.verb, text, err)
			}
			out = append(out, entryOf(l.verb, ru, ru.String()))
		}
	}
	for _, text := range r.HTTP {
		hr, err := parseHTTPRule(text)
		if err != nil {
			return nil, fmt.Errorf("http rule %q: %w", text, err)
		}
		e := entryOf("http", hr.host, hr.text)
		e.HTTP, e.Methods, e.PathPrefix = true, hr.methods, hr.prefix
		out = append(out, e)
	}
	return out, nil
}

func entryOf(verb string, r rule, text string) Entry {
	e := Entry{Verb: verb, Text: text}
	switch r.kind {
	case kindName:
		e.Kind, e.Host = "name", r.host
	case kindWildcard:
		e.Kind, e.Host = "wildcard", r.host
	case kindCIDR:
		e.Kind, e.CIDR, e.Bits = "cidr", r.prefix.String(), r.prefix.Bits()
	}
	e.Ports = strconv.Itoa(int(r.ports.lo))
	if r.ports.hi != r.ports.lo {
		e.Ports += "-" + strconv.Itoa(int(r.ports.hi))
	}
	return e
}
