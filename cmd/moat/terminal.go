package main

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Text a sandbox chose (file names, names it resolved or connected to, error messages that
// quote it) is printed through termSafe, and JSON through jsonSafe, so that it cannot act
// on the operator's terminal: no escape sequence (colours, cursor moves, window titles,
// OSC 8 links, clipboard writes), no carriage return or backspace to overwrite what moat
// printed, no tab or newline to forge columns or lines, no bidirectional override to
// reorder them. A command's own output (exec, run, cp to stdout) is the user's stream and
// is passed through untouched.

// termSafe returns s with every rune that is not printable written as a Go escape: C0
// controls and DEL as \xNN (tab, newline and carriage return as \t, \n and \r), C1
// controls and other non-printable runes (format characters such as bidirectional
// overrides and zero-width characters, non-ASCII spaces, unassigned code points) as \u or
// \U escapes, and bytes that are not UTF-8 as \xNN. A backslash is doubled, so the result
// reads back unambiguously. Printable text, non-ASCII letters and symbols included, is
// unchanged.
func termSafe(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\x`...)
			b = appendHex(b, uint32(s[i]), 2)
		case r == '\\':
			b = append(b, `\\`...)
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r == '\r':
			b = append(b, `\r`...)
		case strconv.IsPrint(r):
			b = append(b, s[i:i+size]...)
		case r < 0x80:
			b = append(b, `\x`...)
			b = appendHex(b, uint32(r), 2)
		case r < 0x10000:
			b = append(b, `\u`...)
			b = appendHex(b, uint32(r), 4)
		default:
			b = append(b, `\U`...)
			b = appendHex(b, uint32(r), 8)
		}
		i += size
	}
	return string(b)
}

// jsonSafe rewrites JSON as encoding/json writes it (which escapes C0 controls but not
// DEL, C1 controls or other non-printable runes) so that every non-printable rune inside a
// string is a \u escape; the document decodes to the same value. Outside strings,
// encoding/json writes only printable ASCII and whitespace, which is kept.
func jsonSafe(js []byte) []byte {
	out := make([]byte, 0, len(js))
	for i := 0; i < len(js); {
		c := js[i]
		if c < 0x7f {
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(js[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			// Not written by encoding/json (it replaces invalid UTF-8); replaced too.
			out = append(out, `\ufffd`...)
		case strconv.IsPrint(r):
			out = append(out, js[i:i+size]...)
		case r < 0x10000:
			out = append(out, `\u`...)
			out = appendHex(out, uint32(r), 4)
		default:
			hi, lo := utf16.EncodeRune(r)
			out = append(out, `\u`...)
			out = appendHex(out, uint32(hi), 4)
			out = append(out, `\u`...)
			out = appendHex(out, uint32(lo), 4)
		}
		i += size
	}
	return out
}

// appendHex appends v as n lowercase hexadecimal digits.
func appendHex(b []byte, v uint32, n int) []byte {
	const digits = "0123456789abcdef"
	for shift := 4 * (n - 1); shift >= 0; shift -= 4 {
		b = append(b, digits[v>>uint(shift)&0xf])
	}
	return b
}
