package sniff

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestSniffClassifies(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  Result
		isErr bool // an error other than ErrNeedMore
		more  bool // ErrNeedMore
	}{
		{in: "", more: true},
		{in: "\x16", more: true},
		{in: "G", more: true},
		{in: "GET", more: true},
		{in: strings.Repeat("A", maxMethod), more: true},
		{in: strings.Repeat("A", maxMethod+1), want: Result{}},
		{in: strings.Repeat("A", maxMethod) + " /", more: true},
		{in: "GET /", more: true},
		{in: "SSH-2.0-OpenSSH_9.6\r\n", want: Result{}},
		{in: "\x16\x02\x00", want: Result{}},
		{in: "\x16\x03", more: true},
		{in: "\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00", want: Result{Proto: TLS}, isErr: true},
		{in: "\x00\x00\x00\x01", want: Result{}},
		{in: "get / HTTP/1.1\r\n\r\n", want: Result{}},
		{in: "GET\t/ HTTP/1.1\r\n\r\n", want: Result{}},
		{in: "GET:/", want: Result{}},
		{in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", want: Result{Proto: HTTP}, isErr: true},
		{in: "BREW /pot HTTP/1.1\r\nHost: Tea.Example\r\n\r\n", want: Result{HTTP, "tea.example"}},
	} {
		r, err := Sniff([]byte(tc.in))
		switch {
		case tc.more:
			if err != ErrNeedMore {
				t.Errorf("%q: %+v, %v; want ErrNeedMore", tc.in, r, err)
			}
		case tc.isErr:
			if err == nil || errors.Is(err, ErrNeedMore) || r != tc.want {
				t.Errorf("%q: %+v, %v; want %+v and an error", tc.in, r, err, tc.want)
			}
		default:
			if err != nil || r != tc.want {
				t.Errorf("%q: %+v, %v; want %+v", tc.in, r, err, tc.want)
			}
		}
	}
}

func TestProtoString(t *testing.T) {
	if Unknown.String() != "unknown" || TLS.String() != "tls" || HTTP.String() != "http" {
		t.Fatal(Unknown, TLS, HTTP)
	}
}

// validName is the fuzz targets' independent check of a returned name: a lowercase host
// name of labels [a-z0-9_-]{1,63}, at most 253 bytes, or a canonical IP literal.
func validName(s string) bool {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Zone() == "" && a.String() == s
	}
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if len(l) == 0 || len(l) > 63 {
			return false
		}
		for _, c := range []byte(l) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
