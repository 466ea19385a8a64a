package sniff

import (
	"errors"
	"strings"
	"testing"
)

func TestHTTPHost(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com"},
		{"GET / HTTP/1.1\r\nhost: Example.COM\r\n\r\n", "example.com"},
		{"GET / HTTP/1.1\r\nHOST:example.com:8080\r\n\r\n", "example.com"},
		{"GET / HTTP/1.1\r\nHost: \t example.com. \t\r\n\r\n", "example.com"},
		{"GET /x?y=1 HTTP/1.1\r\nUser-Agent: curl/8\r\nHost: a.example\r\nAccept: */*\r\n\r\n", "a.example"},
		{"GET / HTTP/1.1\r\nHost: 192.0.2.1:80\r\n\r\n", "192.0.2.1"},
		{"GET / HTTP/1.1\r\nHost: [2001:DB8::1]:80\r\n\r\n", "2001:db8::1"},
		{"GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n", "::1"},
		{"GET / HTTP/1.0\r\n\r\n", ""},
		{"GET / HTTP/1.1\r\nHost:\r\n\r\n", ""},
		{"GET http://Abs.Example/path HTTP/1.1\r\n\r\n", "abs.example"},
		{"GET HTTP://abs.example:8080?q HTTP/1.1\r\nHost: abs.example\r\n\r\n", "abs.example"},
		{"GET https://abs.example#f HTTP/1.1\r\nHost: ABS.example.:443\r\n\r\n", "abs.example"},
		{"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "example.com"},
		{"CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n", "2001:db8::1"},
		{"OPTIONS * HTTP/1.1\r\nHost: o.example\r\n\r\n", "o.example"},
		{"PROPFIND /dav HTTP/1.1\r\nHost: dav.example\r\n\r\n", "dav.example"},
		{"POST / HTTP/1.1\r\nHost: p.example\r\nContent-Length: 30\r\n\r\nHost: evil.example\r\n\r\n\n\x00\xff", "p.example"},
		{"GET / HTTP/1.1\r\nX-Obs: caf\xc3\xa9\r\nHost: o.example\r\n\r\n", "o.example"},
	} {
		got, err := HTTPHost([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
		r, err := Sniff([]byte(tc.in))
		if err != nil || r != (Result{HTTP, tc.want}) {
			t.Errorf("%q: Sniff = %+v, %v", tc.in, r, err)
		}
		// The head split anywhere before its end needs more.
		end := strings.Index(tc.in, "\r\n\r\n") + 4
		for i := range end {
			if _, err := HTTPHost([]byte(tc.in[:i])); err != ErrNeedMore {
				t.Fatalf("%q cut at %d: %v", tc.in, i, err)
			}
		}
	}
}

func TestHTTPHostRejected(t *testing.T) {
	for name, in := range map[string]string{
		"duplicate Host":               "GET / HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n",
		"duplicate Host, other case":   "GET / HTTP/1.1\r\nHost: a.example\r\nhOsT: b.example\r\n\r\n",
		"duplicate Host, empty first":  "GET / HTTP/1.1\r\nHost:\r\nHost: b.example\r\n\r\n",
		"absolute vs Host":             "GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
		"absolute vs empty Host":       "GET http://a.example/ HTTP/1.1\r\nHost:\r\n\r\n",
		"CONNECT vs Host":              "CONNECT a.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n",
		"CONNECT without port":         "CONNECT a.example HTTP/1.1\r\n\r\n",
		"CONNECT origin-form":          "CONNECT / HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"userinfo":                     "GET http://a.example@b.example/ HTTP/1.1\r\n\r\n",
		"empty authority":              "GET http:///x HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"other scheme":                 "GET ftp://a.example/ HTTP/1.1\r\n\r\n",
		"authority-form for GET":       "GET a.example:80 HTTP/1.1\r\n\r\n",
		"asterisk for GET":             "GET * HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"LF only":                      "GET / HTTP/1.1\nHost: a.example\n\n",
		"LF only in headers":           "GET / HTTP/1.1\r\nHost: a.example\n\r\n",
		"bare CR":                      "GET / HTTP/1.1\r\nX: a\rHost: b.example\r\n\r\n",
		"NUL in header":                "GET / HTTP/1.1\r\nHost: a.example\x00\r\n\r\n",
		"folded Host":                  "GET / HTTP/1.1\r\nX: y\r\n Host: b.example\r\n\r\n",
		"folded value":                 "GET / HTTP/1.1\r\nHost: a.example\r\n\tb.example\r\n\r\n",
		"space before colon":           "GET / HTTP/1.1\r\nHost : b.example\r\n\r\n",
		"tab before colon":             "GET / HTTP/1.1\r\nHost\t: b.example\r\n\r\n",
		"no colon":                     "GET / HTTP/1.1\r\nHost b.example\r\n\r\n",
		"empty field name":             "GET / HTTP/1.1\r\n: b.example\r\n\r\n",
		"unicode fold of Host":         "GET / HTTP/1.1\r\nHo\xc5\xbft: b.example\r\n\r\n",
		"host with space":              "GET / HTTP/1.1\r\nHost: a.example b.example\r\n\r\n",
		"host list":                    "GET / HTTP/1.1\r\nHost: a.example,b.example\r\n\r\n",
		"host with path":               "GET / HTTP/1.1\r\nHost: a.example/x\r\n\r\n",
		"host with userinfo":           "GET / HTTP/1.1\r\nHost: u@a.example\r\n\r\n",
		"bad port":                     "GET / HTTP/1.1\r\nHost: a.example:http\r\n\r\n",
		"port too big":                 "GET / HTTP/1.1\r\nHost: a.example:65536\r\n\r\n",
		"empty port":                   "GET / HTTP/1.1\r\nHost: a.example:\r\n\r\n",
		"two ports":                    "GET / HTTP/1.1\r\nHost: a.example:80:81\r\n\r\n",
		"unbracketed IPv6":             "GET / HTTP/1.1\r\nHost: ::1\r\n\r\n",
		"bracketed IPv4":               "GET / HTTP/1.1\r\nHost: [192.0.2.1]\r\n\r\n",
		"IPv6 zone":                    "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n",
		"numeric host":                 "GET / HTTP/1.1\r\nHost: 2130706433\r\n\r\n",
		"HTTP/2 preface":               "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"HTTP/0.9":                     "GET /\r\n\r\n",
		"lowercase version":            "GET / http/1.1\r\n\r\n",
		"two spaces":                   "GET  / HTTP/1.1\r\n\r\n",
		"trailing space":               "GET / HTTP/1.1 \r\n\r\n",
		"tab separator":                "GET\t/ HTTP/1.1\r\n\r\n",
		"lowercase method":             "get / HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"method with hyphen":           "M-SEARCH * HTTP/1.1\r\n\r\n",
		"non-ASCII target":             "GET /\xff HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"absolute-form bad host":       "GET http://a_b..example/ HTTP/1.1\r\n\r\n",
		"absolute-form IPv6 with zone": "GET http://[fe80::1%eth0]/ HTTP/1.1\r\n\r\n",
	} {
		if got, err := HTTPHost([]byte(in)); err == nil || errors.Is(err, ErrNeedMore) {
			t.Errorf("%s: %q, %v; want an error", name, got, err)
		}
	}
}

func TestHTTPHostEarlyErrors(t *testing.T) {
	// A control character is refused before its line ends.
	for _, in := range []string{"GET /\x00", "GET / HTTP/1.1\r\nX: \x01", "GET /\rx", "GET / HTTP/1.1\n"} {
		if _, err := HTTPHost([]byte(in)); err == nil || errors.Is(err, ErrNeedMore) {
			t.Errorf("%q: %v", in, err)
		}
	}
	// A head that does not end within MaxPeek is refused.
	long := "GET / HTTP/1.1\r\nHost: a.example\r\nX: " + strings.Repeat("y", MaxPeek)
	if _, err := HTTPHost([]byte(long)); err == nil || errors.Is(err, ErrNeedMore) {
		t.Errorf("long head: %v", err)
	}
	if _, err := HTTPHost([]byte(long[:MaxPeek-1])); err != ErrNeedMore {
		t.Errorf("long head below MaxPeek: %v", err)
	}
	// A head that ends past MaxPeek is refused even if the caller read all of it.
	if _, err := HTTPHost([]byte(long + "\r\n\r\n")); err == nil || errors.Is(err, ErrNeedMore) {
		t.Errorf("head past MaxPeek: %v", err)
	}
}
