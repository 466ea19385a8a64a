// Package sniff reads the name a sandbox's connection is meant for from the first bytes the
// sandbox sends: the server name (SNI) of a TLS ClientHello, or the Host of an HTTP/1.x
// request. The egress proxy decides on the connection by that name and forwards the peeked
// bytes unchanged, so a name read here must be the name the upstream server will read too.
//
// The bytes are untrusted. The parsers never read past the slice, never look at more than
// MaxPeek bytes, allocate no more than a few copies of those, and reject what two parsers
// could read differently (a second Host header, a Host that disagrees with the request target, bare LF
// line ends, folded header lines, a second server_name) instead of guessing. A name they
// return is a lowercase host name or an IP literal; whether it may be reached is the
// policy's decision, and the proxy dials the policy's name, not an address the sandbox chose.
//
// Every result other than ErrNeedMore is final: appending bytes does not change it.
//
// A name read here covers only the message it was read from: the HTTP requests that follow
// on a kept-alive connection may name other hosts, and inside TLS the encrypted HTTP Host
// (or an encrypted ClientHello) may differ from the SNI. A proxy that splices the rest of
// the stream relies on the upstream honouring the first name.
package sniff

import (
	"errors"
	"net/netip"
)

// MaxPeek is the most bytes a caller reads before sniffing gives an answer: the parsers look
// at no more than the first MaxPeek bytes of their input, and a message that does not end
// within them is an error, never ErrNeedMore.
const MaxPeek = 16 << 10

// ErrNeedMore means the input is a proper prefix of a message that could still be read:
// the caller should read more (up to MaxPeek bytes in all) and call again with all of it.
var ErrNeedMore = errors.New("sniff: need more data")

var (
	errTooLarge    = errors.New("sniff: message does not end within MaxPeek bytes")
	errInvalidName = errors.New("sniff: invalid host name")
)

// Proto is what a stream's first bytes look like.
type Proto int

const (
	// Unknown is neither TLS nor HTTP/1.x.
	Unknown Proto = iota
	// TLS starts with a TLS handshake record.
	TLS
	// HTTP starts with an HTTP/1.x request line.
	HTTP
)

func (p Proto) String() string {
	switch p {
	case TLS:
		return "tls"
	case HTTP:
		return "http"
	}
	return "unknown"
}

// Result is what Sniff learnt from a stream's first bytes.
type Result struct {
	Proto Proto
	// Name is the TLS server name or the HTTP host, lowercased, without port or trailing
	// dot; an IP literal in canonical form. It is "" when the message carries none.
	Name string
}

// maxMethod bounds the length of an HTTP method token.
const maxMethod = 24

// Sniff classifies the start of a client stream. A stream is TLS when it starts with a
// handshake record (type 0x16, version major 3) and HTTP when it starts with a method token
// of A–Z followed by a space; Name is then read by ServerName or HTTPHost, whose errors Sniff
// returns with Proto set. Anything else is Unknown with a nil error. Sniff returns
// ErrNeedMore while b is a proper prefix of something it could still classify or read a name
// from.
func Sniff(b []byte) (Result, error) {
	b, _ = peek(b)
	// Servers ignore empty lines before a request line (RFC 9112 §2.2), so a request
	// behind them is still a request: skip them too.
	for len(b) > 0 && (b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	if len(b) == 0 {
		return Result{}, ErrNeedMore
	}
	switch c := b[0]; {
	case c == recordTypeHandshake:
		if len(b) < 2 {
			return Result{}, ErrNeedMore
		}
		if b[1] != 3 {
			return Result{}, nil
		}
		name, err := ServerName(b)
		return Result{Proto: TLS, Name: name}, err
	case isUpper(c):
		n := 0
		for n < len(b) && n <= maxMethod && isUpper(b[n]) {
			n++
		}
		switch {
		case n > maxMethod:
			return Result{}, nil
		case n == len(b):
			return Result{}, ErrNeedMore
		case b[n] != ' ':
			return Result{}, nil
		}
		name, err := HTTPHost(b)
		return Result{Proto: HTTP, Name: name}, err
	}
	return Result{}, nil
}

// peek limits b to MaxPeek bytes and reports whether it had at least that many.
func peek(b []byte) ([]byte, bool) {
	if len(b) >= MaxPeek {
		return b[:MaxPeek], true
	}
	return b, false
}

func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }

// hostName returns b as a name the policy can match: a host name lowercased with one
// trailing dot removed, or an IP literal (without zone) in canonical form. A host name has
// labels of letters, digits, '-' and '_', 1–63 bytes each, at most 253 bytes in all, and a
// last label that is not a number (so "0177.1" or "1.2.3.4.5" are not taken for names that
// resolvers would read as addresses). Anything else, including non-ASCII, is an error.
func hostName(b []byte) (string, error) {
	if len(b) > 0 && b[len(b)-1] == '.' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || len(b) > 253 {
		return "", errInvalidName
	}
	if maybeAddr(b) {
		if a, err := netip.ParseAddr(string(b)); err == nil {
			if a.Zone() != "" {
				return "", errInvalidName
			}
			return a.String(), nil
		}
	}
	out := make([]byte, len(b))
	label, last := 0, 0
	for i, c := range b {
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case c == '.':
			if label == 0 {
				return "", errInvalidName
			}
			out[i], label, last = c, 0, i+1
			continue
		default:
			return "", errInvalidName
		}
		out[i] = c
		if label++; label > 63 {
			return "", errInvalidName
		}
	}
	if label == 0 || numeric(out[last:]) {
		return "", errInvalidName
	}
	return string(out), nil
}

// maybeAddr reports whether b has only the bytes of an IP literal.
func maybeAddr(b []byte) bool {
	for _, c := range b {
		if !(c == '.' || c == ':' || isHex(c)) {
			return false
		}
	}
	return true
}

// numeric reports whether a lowercase label is a decimal or 0x-hex number, as the last
// label of an address some resolvers accept (inet_aton).
func numeric(label []byte) bool {
	if len(label) >= 2 && label[0] == '0' && label[1] == 'x' {
		for _, c := range label[2:] {
			if !isHex(c) {
				return false
			}
		}
		return true
	}
	for _, c := range label {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
