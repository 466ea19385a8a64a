package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// builtinSets returns the named sets every policy knows. A user set of the same name extends
// one. Read-only: BuiltinSets hands out copies.
//
// "registries" is read-only: its members are HTTP rules allowing GET and HEAD (and, where
// a registry's downloads live under known paths, only those paths), so a sandbox can
// download packages but not publish them — a registry that accepts uploads would
// otherwise carry data out under a token the sandbox brings itself. "registries-publish"
// is the explicit opt-in to publishing: the same hosts and the upload endpoints, every
// method. Both terminate TLS to the registries with the sandbox's CA (see HTTP rules).
func builtinSets() map[string][]string {
	return map[string][]string{
		"registries": {
			// npm and Yarn: package documents and tarballs under the package's name
			"registry.npmjs.org:443 GET,HEAD", "registry.yarnpkg.com:443 GET,HEAD",
			// PyPI: the simple and JSON indexes, and the package files
			"pypi.org:443 GET,HEAD /simple/", "pypi.org:443 GET,HEAD /pypi/",
			"files.pythonhosted.org:443 GET,HEAD /packages/",
			// Go: module proxy and checksum database
			"proxy.golang.org:443 GET,HEAD", "sum.golang.org:443 GET,HEAD",
			// crates.io: API (downloads redirect to static.crates.io), sparse index, downloads
			"crates.io:443 GET,HEAD /api/v1/crates", "index.crates.io:443 GET,HEAD", "static.crates.io:443 GET,HEAD",
			// Debian: APT uses plain HTTP by default (packages are signed)
			"deb.debian.org:80 GET,HEAD", "deb.debian.org:443 GET,HEAD",
			"security.debian.org:80 GET,HEAD", "security.debian.org:443 GET,HEAD",
			// RubyGems
			"rubygems.org:443 GET,HEAD", "index.rubygems.org:443 GET,HEAD",
			// Maven Central
			"repo.maven.apache.org:443 GET,HEAD /maven2/", "repo1.maven.org:443 GET,HEAD /maven2/",
		},
		"registries-publish": {
			"registry.npmjs.org:443 *", "registry.yarnpkg.com:443 *",
			"pypi.org:443 *", "files.pythonhosted.org:443 *", "upload.pypi.org:443 *",
			"proxy.golang.org:443 *", "sum.golang.org:443 *",
			"crates.io:443 *", "index.crates.io:443 *", "static.crates.io:443 *",
			"deb.debian.org:80 *", "deb.debian.org:443 *", "security.debian.org:80 *", "security.debian.org:443 *",
			"rubygems.org:443 *", "index.rubygems.org:443 *",
			"repo.maven.apache.org:443 *", "repo1.maven.org:443 *",
		},
	}
}

// setHints says what to do when a request is refused by a built-in set's HTTP rules.
func setHints() map[string]string {
	return map[string]string{
		"registries": "the registries set is read-only; allow registries-publish to publish",
	}
}

// BuiltinSets returns a copy of the built-in named sets.
func BuiltinSets() map[string][]string {
	out := make(map[string][]string, len(builtinSets()))
	for name, members := range builtinSets() {
		out[name] = slices.Clone(members)
	}
	return out
}

// member is one parsed rule of a set, with the text it was written as. A member written
// with methods or a path ("HOST[:PORTS] METHODS [/PREFIX]") is an HTTP rule (http), whose
// host part is rule.
type member struct {
	rule rule
	http *httpRule
	text string // canonical
}

// parseMember parses one member of set name: an HTTP rule when it has more than one
// field, else a rule.
func parseMember(name, text string) (member, error) {
	if len(strings.Fields(text)) > 1 {
		hr, err := parseHTTPRule(text)
		if err != nil {
			return member{}, err
		}
		hr.set = name
		text := hr.text
		if len(hr.methods) == 0 && hr.prefix == "" {
			text += " *" // a lone host would read back as an allow rule
		}
		return member{rule: hr.host, http: hr, text: text}, nil
	}
	r, err := parseRule(text)
	if err != nil {
		return member{}, err
	}
	return member{rule: r, text: r.String()}, nil
}

// resolveSets parses the built-in sets extended by user's, keyed by set name.
func resolveSets(user map[string][]string) (map[string][]member, error) {
	isSet := func(s string) bool {
		s = strings.ToLower(strings.TrimSpace(s))
		_, builtin := builtinSets()[s]
		_, own := user[s]
		return builtin || own
	}
	out := make(map[string][]member, len(builtinSets())+len(user))
	add := func(name string, texts []string) error {
		for _, text := range texts {
			if isSet(text) {
				return invalidf("sets: %q: member %q is a set; sets cannot contain sets", name, text)
			}
			m, err := parseMember(name, text)
			if err != nil {
				return fmt.Errorf("sets: %q: member %q: %w", name, text, err)
			}
			out[name] = append(out[name], m)
		}
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(builtinSets())) {
		if err := add(name, builtinSets()[name]); err != nil {
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
