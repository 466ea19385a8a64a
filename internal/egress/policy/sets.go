package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// builtinSets are the named sets every policy knows. A user set of the same name extends
// one. Read-only: BuiltinSets hands out copies.
var builtinSets = map[string][]string{
	"registries": {
		// npm and Yarn
		"registry.npmjs.org:443", "registry.yarnpkg.com:443",
		// PyPI: index and package files
		"pypi.org:443", "files.pythonhosted.org:443",
		// Go: module proxy and checksum database
		"proxy.golang.org:443", "sum.golang.org:443",
		// crates.io: API, sparse index, downloads
		"crates.io:443", "index.crates.io:443", "static.crates.io:443",
		// Debian: APT uses plain HTTP by default (packages are signed)
		"deb.debian.org:80", "deb.debian.org:443", "security.debian.org:80", "security.debian.org:443",
		// RubyGems
		"rubygems.org:443", "index.rubygems.org:443",
		// Maven Central
		"repo.maven.apache.org:443", "repo1.maven.org:443",
	},
}

// BuiltinSets returns a copy of the built-in named sets.
func BuiltinSets() map[string][]string {
	out := make(map[string][]string, len(builtinSets))
	for name, members := range builtinSets {
		out[name] = slices.Clone(members)
	}
	return out
}

// member is one parsed rule of a set, with the text it was written as.
type member struct {
	rule rule
	text string // canonical
}

// resolveSets parses the built-in sets extended by user's, keyed by set name.
func resolveSets(user map[string][]string) (map[string][]member, error) {
	isSet := func(s string) bool {
		s = strings.ToLower(strings.TrimSpace(s))
		_, builtin := builtinSets[s]
		_, own := user[s]
		return builtin || own
	}
	out := make(map[string][]member, len(builtinSets)+len(user))
	add := func(name string, texts []string) error {
		for _, text := range texts {
			if isSet(text) {
				return invalidf("sets: %q: member %q is a set; sets cannot contain sets", name, text)
			}
			r, err := parseRule(text)
			if err != nil {
				return fmt.Errorf("sets: %q: member %q: %w", name, text, err)
			}
			out[name] = append(out[name], member{rule: r, text: r.String()})
		}
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(builtinSets)) {
		if err := add(name, builtinSets[name]); err != nil {
			return nil, fmt.Errorf("built-in %w", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(user)) {
		if !validWord(name) {
			return nil, invalidf("sets: %q is not a valid set name (lowercase letters, digits, '-' and '_', starting with a letter or digit, no dots)", name)
		}
		if _, ok := out[name]; !ok {
			out[name] = nil // an empty user set is still a set
		}
		if err := add(name, user[name]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// validWord reports whether s can name a set or a phase: 1-63 of [a-z0-9_-], starting
// with a letter or digit. Set names have no dots, so they never shadow a dotted host name.
func validWord(s string) bool {
	if s == "" || len(s) > maxLabelLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}
