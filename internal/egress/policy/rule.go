package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// invalidError is a policy error: its text is written for the user who wrote the policy,
// and its class is errdefs.ErrInvalidArgument.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return errdefs.ErrInvalidArgument }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// NormalizeName returns the canonical form of a DNS host name: ASCII lowercase, without
// one trailing dot. It rejects an empty name, names longer than 253 bytes or with a label
// longer than 63, empty labels, characters other than letters, digits, '-' and '_' (so
// "*", IP literals with ':', URLs and non-ASCII names), labels starting or ending with '-',
// and names whose last label is numeric ("10.0.0.1", "127.1", "0x7f"), which resolvers may
// read as IPv4 addresses. For a name already in canonical form it does not allocate.
func NormalizeName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", invalidf("empty host name")
	}
	if len(s) > maxNameLen {
		return "", invalidf("host name is longer than %d bytes", maxNameLen)
	}
	upper := false
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			label := s[start:i]
			switch {
			case label == "":
				return "", invalidf("host name %q has an empty label", s)
			case len(label) > maxLabelLen:
				return "", invalidf("host name %q has a label longer than %d bytes", s, maxLabelLen)
			case label[0] == '-' || label[len(label)-1] == '-':
				return "", invalidf("host name %q has a label starting or ending with '-'", s)
			}
			start = i + 1
			continue
		}
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case 'A' <= c && c <= 'Z':
			upper = true
		default:
			return "", invalidf("host name %q contains %q (allowed: letters, digits, '-', '_')", s, c)
		}
	}
	if upper {
		s = lowerASCII(s)
	}
	if numericLabel(s[strings.LastIndexByte(s, '.')+1:]) {
		return "", invalidf("%q is an IP address, not a host name", s)
	}
	return s, nil
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// numericLabel reports whether a label is a number as inet_aton reads them: decimal, or
// hexadecimal with a 0x prefix. No top-level domain is numeric.
func numericLabel(l string) bool {
	digits := "0123456789"
	if len(l) >= 2 && l[0] == '0' && l[1] == 'x' {
		l, digits = l[2:], "0123456789abcdef"
	}
	for i := 0; i < len(l); i++ {
		if strings.IndexByte(digits, l[i]) < 0 {
			return false
		}
	}
	return true
}

// ruleKind is what a rule matches.
type ruleKind uint8

const (
	kindName     ruleKind = iota // exactly rule.host
	kindWildcard                 // names strictly below rule.host
	kindCIDR                     // addresses in rule.prefix
)

const (
	minPort = 1
	maxPort = 65535
)

// portRange is an inclusive range of ports; a rule without a port has 1-65535.
type portRange struct{ lo, hi uint16 }

func (r portRange) all() bool { return r.lo == minPort && r.hi == maxPort }

// covers reports whether r covers port. Port 0 asks "some port?": an allow rule answers
// yes whatever its range, a deny rule (strict) only if it covers every port.
func (r portRange) covers(port uint16, strict bool) bool {
	if port == 0 {
		return !strict || r.all()
	}
	return r.lo <= port && port <= r.hi
}

// rule is one parsed rule string (never a set reference).
type rule struct {
	kind   ruleKind
	host   string       // kindName: the name; kindWildcard: the parent name, without "*."
	prefix netip.Prefix // kindCIDR: a masked IPv4 prefix
	ports  portRange
}

// String returns the rule's canonical text, which parseRule reads back as the same rule.
func (r rule) String() string {
	var s string
	switch r.kind {
	case kindName:
		s = r.host
	case kindWildcard:
		s = "*." + r.host
	case kindCIDR:
		if r.prefix.IsSingleIP() {
			s = r.prefix.Addr().String()
		} else {
			s = r.prefix.String()
		}
	}
	switch {
	case r.ports.all():
		return s
	case r.ports.lo == r.ports.hi:
		return s + ":" + strconv.Itoa(int(r.ports.lo))
	default:
		return s + ":" + strconv.Itoa(int(r.ports.lo)) + "-" + strconv.Itoa(int(r.ports.hi))
	}
}

// parseRule parses one rule string (see the package documentation). Surrounding spaces
// are ignored. The error does not repeat the rule; callers say which rule it was.
func parseRule(s string) (rule, error) {
	t := strings.TrimSpace(s)
	switch {
	case t == "":
		return rule{}, invalidf("empty rule")
	case strings.Contains(t, "://"):
		return rule{}, invalidf("a rule names a host, not a URL; drop the scheme")
	case strings.ContainsAny(t, "[]") || strings.Count(t, ":") > 1:
		return rule{}, invalidf("IPv6 is not supported")
	}
	host, portText, hasPort := strings.Cut(t, ":")
	r := rule{ports: portRange{minPort, maxPort}}
	if hasPort {
		ports, err := parsePorts(portText)
		if err != nil {
			return rule{}, err
		}
		r.ports = ports
	}
	switch {
	case host == "*":
		return rule{}, invalidf(`"*" is not a rule; use net: allow-all`)
	case strings.HasPrefix(host, "*."):
		name, err := NormalizeName(host[2:])
		if err != nil {
			return rule{}, err
		}
		r.kind, r.host = kindWildcard, name
	case strings.Contains(host, "/"):
		p, err := netip.ParsePrefix(host)
		if err != nil {
			before, _, _ := strings.Cut(host, "/")
			if _, aerr := netip.ParseAddr(before); aerr != nil {
				return rule{}, invalidf("a rule names a host, not a URL path")
			}
			return rule{}, invalidf("invalid CIDR prefix %q", host)
		}
		if !p.Addr().Is4() {
			return rule{}, invalidf("IPv6 is not supported")
		}
		if m := p.Masked(); m != p {
			return rule{}, invalidf("CIDR prefix %s has host bits set; did you mean %s?", p, m)
		}
		r.kind, r.prefix = kindCIDR, p
	default:
		if a, err := netip.ParseAddr(host); err == nil {
			if !a.Is4() {
				return rule{}, invalidf("IPv6 is not supported")
			}
			r.kind, r.prefix = kindCIDR, netip.PrefixFrom(a, 32)
			break
		}
		name, err := NormalizeName(host)
		if err != nil {
			return rule{}, err
		}
		r.kind, r.host = kindName, name
	}
	return r, nil
}

// parsePorts parses "443" or "8000-8100".
func parsePorts(s string) (portRange, error) {
	loText, hiText, isRange := strings.Cut(s, "-")
	lo, err := parsePort(loText)
	if err != nil {
		return portRange{}, err
	}
	if !isRange {
		return portRange{lo, lo}, nil
	}
	hi, err := parsePort(hiText)
	if err != nil {
		return portRange{}, err
	}
	if lo > hi {
		return portRange{}, invalidf("port range %d-%d is reversed", lo, hi)
	}
	return portRange{lo, hi}, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, invalidf("missing port after ':'")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, invalidf("port %q is not a number", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n < minPort {
		return 0, invalidf("port %s is out of range %d-%d", s, minPort, maxPort)
	}
	return uint16(n), nil
}
