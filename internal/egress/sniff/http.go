package sniff

import (
	"bytes"
	"errors"
	"net/netip"
)

var (
	errBareLF         = errors.New("sniff: http: line ends in LF without CR")
	errBadByte        = errors.New("sniff: http: control character in request head")
	errRequestLine    = errors.New("sniff: http: malformed request line")
	errVersion        = errors.New("sniff: http: not HTTP/1.x")
	errTarget         = errors.New("sniff: http: unsupported request target")
	errUserinfo       = errors.New("sniff: http: userinfo in request target")
	errObsFold        = errors.New("sniff: http: folded header line")
	errField          = errors.New("sniff: http: malformed header field")
	errDuplicateHost  = errors.New("sniff: http: more than one Host header")
	errHostMismatch   = errors.New("sniff: http: Host header disagrees with request target")
	errHostPort       = errors.New("sniff: http: malformed host or port")
	errConnectNoPort  = errors.New("sniff: http: CONNECT target without port")
	errMethod         = errors.New("sniff: http: malformed method")
	errEmptyAuthority = errors.New("sniff: http: empty authority in request target")
)

// HTTPHost returns the host an HTTP/1.x request head at the start of b is for, normalised as
// Result.Name, and "" when the request names none (HTTP/1.0 without Host). It reads the
// request line and the header block up to the empty line; what follows is ignored. The host
// comes from the request target when it has one (absolute-form "http://host/…", or CONNECT's
// "host:port") and otherwise from the Host header.
//
// HTTPHost returns ErrNeedMore until the header block ends, and an error for a request head
// two parsers could read differently: lines ending in a bare LF (only CRLF is accepted),
// control characters, folded header lines, whitespace before a field's colon, more than one
// Host header, a Host that names another host than the request target, userinfo in the
// target, a method other than A–Z, or a version other than HTTP/1.x.
func HTTPHost(b []byte) (string, error) {
	b, full := peek(b)
	name, err := httpHost(b)
	if err == ErrNeedMore && full {
		err = errTooLarge
	}
	return name, err
}

func httpHost(b []byte) (string, error) {
	line, rest, err := nextLine(b)
	if err != nil {
		return "", err
	}
	method, target, err := requestLine(line)
	if err != nil {
		return "", err
	}
	var fromTarget string
	hasTarget := false
	switch {
	case string(method) == "CONNECT":
		fromTarget, err = hostPort(target, true)
		hasTarget = true
	case target[0] == '/':
	case string(target) == "*" && string(method) == "OPTIONS":
	default:
		fromTarget, err = absoluteHost(target)
		hasTarget = true
	}
	if err != nil {
		return "", err
	}

	var host string
	seen := false
	for {
		if line, rest, err = nextLine(rest); err != nil {
			return "", err
		}
		if len(line) == 0 {
			break
		}
		name, value, err := field(line)
		if err != nil {
			return "", err
		}
		if !asciiEqualFold(name, "host") {
			continue
		}
		if seen {
			return "", errDuplicateHost
		}
		seen = true
		if host, err = hostPort(value, false); err != nil {
			return "", err
		}
	}
	if hasTarget {
		if seen && host != fromTarget {
			return "", errHostMismatch
		}
		return fromTarget, nil
	}
	return host, nil
}

// nextLine splits the first CRLF-terminated line off b. A line ending in a bare LF is an
// error; so is a control character (other than HTAB, or CR right before LF) anywhere in the
// line, even before the line is complete.
func nextLine(b []byte) (line, rest []byte, err error) {
	for i, c := range b {
		switch {
		case c == '\n':
			if i == 0 || b[i-1] != '\r' {
				return nil, nil, errBareLF
			}
			return b[:i-1], b[i+1:], nil
		case c == '\r':
			if i+1 < len(b) && b[i+1] != '\n' {
				return nil, nil, errBadByte
			}
		case c < ' ' && c != '\t', c == 0x7f:
			return nil, nil, errBadByte
		}
	}
	return nil, nil, ErrNeedMore
}

// requestLine splits "METHOD SP target SP HTTP/1.x".
func requestLine(line []byte) (method, target []byte, err error) {
	sp := bytes.IndexByte(line, ' ')
	if sp < 1 || sp > maxMethod {
		return nil, nil, errMethod
	}
	method, line = line[:sp], line[sp+1:]
	for _, c := range method {
		if !isUpper(c) {
			return nil, nil, errMethod
		}
	}
	sp = bytes.IndexByte(line, ' ')
	if sp < 1 {
		return nil, nil, errRequestLine
	}
	target, version := line[:sp], line[sp+1:]
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return nil, nil, errRequestLine
		}
	}
	if len(version) != 8 || string(version[:7]) != "HTTP/1." || version[7] < '0' || version[7] > '9' {
		return nil, nil, errVersion
	}
	return method, target, nil
}

// absoluteHost returns the host of an absolute-form target "http[s]://authority[/…]".
func absoluteHost(target []byte) (string, error) {
	i := bytes.Index(target, []byte("://"))
	if i < 0 || !(asciiEqualFold(target[:i], "http") || asciiEqualFold(target[:i], "https")) {
		return "", errTarget
	}
	auth := target[i+3:]
	if end := bytes.IndexAny(auth, "/?#"); end >= 0 {
		auth = auth[:end]
	}
	if len(auth) == 0 {
		return "", errEmptyAuthority
	}
	if bytes.IndexByte(auth, '@') >= 0 {
		return "", errUserinfo
	}
	return hostPort(auth, false)
}

// field splits a header line "name: value"; the name is a token right before the colon and
// the value is trimmed of spaces and tabs.
func field(line []byte) (name, value []byte, err error) {
	if line[0] == ' ' || line[0] == '\t' {
		return nil, nil, errObsFold
	}
	colon := bytes.IndexByte(line, ':')
	if colon < 1 {
		return nil, nil, errField
	}
	name, value = line[:colon], line[colon+1:]
	for _, c := range name {
		if !isTchar(c) {
			return nil, nil, errField
		}
	}
	return name, bytes.Trim(value, " \t"), nil
}

// hostPort reads "host[:port]" or "[v6]:port" from a Host value or an authority and returns
// the normalised host; "" for an empty value. With needPort the port must be present.
func hostPort(s []byte, needPort bool) (string, error) {
	if len(s) == 0 {
		if needPort {
			return "", errConnectNoPort
		}
		return "", nil
	}
	var name string
	var port []byte
	hasPort := false
	if s[0] == '[' {
		end := bytes.IndexByte(s, ']')
		if end < 0 {
			return "", errHostPort
		}
		a, err := netip.ParseAddr(string(s[1:end]))
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", errHostPort
		}
		name = a.String()
		if rest := s[end+1:]; len(rest) > 0 {
			if rest[0] != ':' {
				return "", errHostPort
			}
			port, hasPort = rest[1:], true
		}
	} else {
		host := s
		if i := bytes.IndexByte(s, ':'); i >= 0 {
			host, port, hasPort = s[:i], s[i+1:], true
		}
		var err error
		if name, err = hostName(host); err != nil {
			return "", err
		}
	}
	if !hasPort {
		if needPort {
			return "", errConnectNoPort
		}
		return name, nil
	}
	if len(port) == 0 || len(port) > 5 {
		return "", errHostPort
	}
	p := 0
	for _, c := range port {
		if c < '0' || c > '9' {
			return "", errHostPort
		}
		p = p*10 + int(c-'0')
	}
	if p > 65535 {
		return "", errHostPort
	}
	return name, nil
}

// isTchar reports whether c may appear in an HTTP token (RFC 9110 §5.6.2).
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// asciiEqualFold compares b with the lowercase ASCII string s, ignoring ASCII case only
// (bytes.EqualFold would also match Unicode folds such as 'ſ' for 's').
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
