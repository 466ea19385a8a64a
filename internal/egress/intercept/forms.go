package intercept

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
)

// This file holds the two pure decisions about where a value may appear: the request
// header forms a placeholder is swapped in (swapCredential), and the response forms a
// value is scrubbed in (scrubPairs).

// defaultPlaceholderHeader is the header a placeholder is swapped in when the injection
// names none.
const defaultPlaceholderHeader = "Authorization"

// minEncoded is the shortest encoded form of a value that is scrubbed: a shorter one
// (of a value of a few bytes) would match ordinary text by chance. The value itself is
// scrubbed whatever its length.
const minEncoded = 8

// swapCredential returns hv, a value of the header a placeholder is swapped in, with the
// placeholder ph replaced by v, when hv is one of the credential forms moat swaps in:
//
//	ph                              the bare placeholder
//	SCHEME ph                       one auth scheme (an RFC 9110 token other than Basic,
//	                                e.g. Bearer or token), one space, the placeholder
//	Basic base64(USER:ph)           Basic credentials (standard base64, padded) whose
//	Basic base64(ph:PASSWORD)       password or user is exactly the placeholder
//
// For Basic credentials sent is the base64 text the client sent and wrote the one written,
// so that an echo of the written form can be given back as the client sent it. Any other
// value (the placeholder inside a longer string, twice, or in both user and password) is
// not swapped: ok is false and out is hv.
func swapCredential(hv, ph, v string) (out, sent, wrote string, ok bool) {
	if ph == "" {
		return hv, "", "", false
	}
	if hv == ph {
		return v, "", "", true
	}
	scheme, rest, found := strings.Cut(hv, " ")
	if !found || !IsToken(scheme) || strings.Contains(scheme, ph) {
		return hv, "", "", false
	}
	if !strings.EqualFold(scheme, "Basic") {
		if rest != ph {
			return hv, "", "", false
		}
		return scheme + " " + v, "", "", true
	}
	dec, err := base64.StdEncoding.Strict().DecodeString(rest)
	if err != nil {
		return hv, "", "", false
	}
	user, pass, found := strings.Cut(string(dec), ":")
	switch {
	case !found:
		return hv, "", "", false
	case pass == ph && !strings.Contains(user, ph):
		pass = v
	case user == ph && !strings.Contains(pass, ph):
		user = v
	default:
		return hv, "", "", false
	}
	enc := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	return scheme + " " + enc, rest, enc, true
}

// scrubPairs returns the old, new pairs (for newReplacer) that take value v out of a
// response, longest first within each kind:
//
//   - v, its URL escapes (query and path; upper- and lower-case hex digits), its JSON
//     string escapes, its hex (lower and upper case) and its base64 (standard and URL
//     alphabets, with and without padding): each replaced by the same encoding of ph, so
//     that a client decoding it finds the placeholder it sent;
//   - the stretch of a longer base64 run that only v's bytes determine, for each of the
//     three alignments v can have in the encoded bytes (as in base64("user:" + v)):
//     replaced by "[redacted]", since no encoding of ph fits there. The characters at
//     either end of such a stretch mix v's first or last bits with the neighbouring
//     bytes' and are left: they reveal at most 4 bits of v's first byte and 4 of its last.
//
// With ph empty (a header injection, whose value the sandbox never sees) everything is
// replaced by "[redacted]". Encoded forms shorter than minEncoded bytes are left out.
func scrubPairs(v, ph string) []string {
	if v == "" {
		return nil
	}
	var pairs []string
	seen := map[string]bool{}
	add := func(old, new string) {
		if seen[old] || old != v && len(old) < minEncoded {
			return
		}
		seen[old] = true
		if ph == "" {
			new = redacted
		}
		pairs = append(pairs, old, new)
	}
	add(v, ph)
	for _, esc := range []func(string) string{url.QueryEscape, url.PathEscape} {
		add(esc(v), esc(ph))
		add(lowerEscapes(esc(v)), lowerEscapes(esc(ph)))
	}
	for _, html := range []bool{true, false} {
		add(jsonString(v, html), jsonString(ph, html))
	}
	add(hex.EncodeToString([]byte(v)), hex.EncodeToString([]byte(ph)))
	add(strings.ToUpper(hex.EncodeToString([]byte(v))), strings.ToUpper(hex.EncodeToString([]byte(ph))))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		add(enc.EncodeToString([]byte(v)), enc.EncodeToString([]byte(ph)))
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for _, core := range base64Cores(enc, v) {
			add(core, redacted)
		}
	}
	return pairs
}

// base64Cores returns, for v preceded by 0, 1 and 2 other bytes, the characters of the
// base64 encoding that v's bits alone determine.
func base64Cores(enc *base64.Encoding, v string) []string {
	cores := make([]string, 0, 3)
	buf := make([]byte, 2+len(v))
	for s := range 3 {
		b := buf[2-s:]
		copy(b[s:], v)
		e := enc.EncodeToString(b)
		// Character i holds bits 6i to 6i+5: the first that holds none of the s leading
		// bytes' bits is ceil(8s/6); the last wholly v's ends before bit 8(s+len(v)).
		start, end := (8*s+5)/6, 8*(s+len(v))/6
		if end > start {
			cores = append(cores, e[start:end])
		}
	}
	return cores
}

// lowerEscapes rewrites the hex digits of s's percent escapes in lower case.
func lowerEscapes(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = toLowerHex(b[i+1]), toLowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func toLowerHex(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonString is s as the inside of a JSON string (without the quotes), with or without
// the HTML escapes of encoding/json.
func jsonString(s string, html bool) string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(html)
	if err := e.Encode(s); err != nil {
		return s
	}
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}
