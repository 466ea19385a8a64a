package envd

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestParseBasicUser(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		header, user string
		ok           bool
	}{
		{"", "", true},
		{"Basic " + b64("user:"), "user", true},
		{"basic " + b64("root:ignored"), "root", true},
		{"Basic " + b64("nocolon"), "nocolon", true},
		{"Basic " + b64(":"), "", true},
		{"Bearer abc", "", false},
		{"Basic", "", false},
		{"Basic !!!", "", false},
		{"Basic " + b64("../etc:"), "", false},
		{"Basic " + b64("a\x00b:"), "", false},
		{"Basic " + b64(strings.Repeat("a", 300)+":"), "", false},
	} {
		user, err := ParseBasicUser(tc.header)
		if (err == nil) != tc.ok || user != tc.user {
			t.Errorf("ParseBasicUser(%q) = %q, %v; want %q, ok %v", tc.header, user, err, tc.user, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadAuthorization) {
			t.Errorf("ParseBasicUser(%q) error %v is not ErrBadAuthorization", tc.header, err)
		}
	}
}

// FuzzParseBasicUser checks that any header parses without panicking, and
// that every acceptable user name survives the SDK's encoding.
func FuzzParseBasicUser(f *testing.F) {
	f.Add("Basic dXNlcjo=", "user")
	f.Add("Basic", "")
	f.Add("basic cm9vdDp4", "a:b")
	f.Fuzz(func(t *testing.T, header, name string) {
		if u, err := ParseBasicUser(header); err == nil && strings.ContainsAny(u, ":\x00\n/") {
			t.Fatalf("ParseBasicUser(%q) accepted %q", header, u)
		}
		if strings.ContainsAny(name, ":\x00\n/") || len(name) > 256 {
			return
		}
		got, err := ParseBasicUser("Basic " + base64.StdEncoding.EncodeToString([]byte(name+":")))
		if err != nil || got != name {
			t.Fatalf("round trip of %q: %q, %v", name, got, err)
		}
	})
}

func TestChooseEncoding(t *testing.T) {
	for _, tc := range []struct {
		accept string
		gz, ok bool
	}{
		{"", false, true},
		{"gzip", true, true},
		{"gzip, deflate, br", true, true},
		{"br;q=1.0, gzip;q=0.5", true, true},
		{"gzip;q=0", false, true},
		{"br", false, true},
		{"br, identity;q=0", false, false},
		{"*;q=0", false, false},
		{"gzip, *;q=0", true, true},
	} {
		gz, ok := chooseEncoding(tc.accept)
		if gz != tc.gz || ok != tc.ok {
			t.Errorf("chooseEncoding(%q) = %v, %v; want %v, %v", tc.accept, gz, ok, tc.gz, tc.ok)
		}
	}
}

// FuzzChooseEncoding checks that any Accept-Encoding parses without
// panicking and that gzip is only chosen when named.
func FuzzChooseEncoding(f *testing.F) {
	f.Add("gzip, deflate;q=0.5")
	f.Add("identity;q=0,,;;q=")
	f.Fuzz(func(t *testing.T, accept string) {
		gz, ok := chooseEncoding(accept)
		if gz && (!ok || !strings.Contains(strings.ToLower(accept), "gzip")) {
			t.Fatalf("chooseEncoding(%q) = %v, %v", accept, gz, ok)
		}
	})
}
