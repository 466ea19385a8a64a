package envd

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTokenNeverPrints(t *testing.T) {
	tok := NewToken("s3cret")
	for _, s := range []string{tok.String(), tok.LogValue().String()} {
		if strings.Contains(s, "s3cret") {
			t.Fatalf("token printed as %q", s)
		}
	}
	if !tok.Equal("s3cret") || tok.Equal("s3cre") || tok.Equal("") || NewToken("").Equal("") {
		t.Fatal("Equal is wrong")
	}
}

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

func TestSignature(t *testing.T) {
	tok := NewToken("token")
	// The scheme, spelled out: v1_ + unpadded base64 of the sha256.
	sum := sha256.Sum256([]byte("/home/user/a.txt:read:user:token:1700000000"))
	want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	if got := tok.Sign("/home/user/a.txt", "read", "user", "1700000000"); got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	now := time.Unix(1699999999, 0)
	users := []string{"user"}
	if err := tok.VerifySignature(want, "/home/user/a.txt", "read", users, "1700000000", now); err != nil {
		t.Fatalf("valid signature refused: %v", err)
	}
	// Padding is tolerated.
	if err := tok.VerifySignature(want+"=", "/home/user/a.txt", "read", users, "1700000000", now); err != nil {
		t.Fatalf("padded signature refused: %v", err)
	}
	for name, tc := range map[string]struct {
		sig, path, op, exp string
		users              []string
		now                time.Time
		want               error
	}{
		"expired":      {want, "/home/user/a.txt", "read", "1700000000", users, time.Unix(1700000001, 0), ErrExpiredSignature},
		"other op":     {want, "/home/user/a.txt", "write", "1700000000", users, now, ErrBadSignature},
		"other path":   {want, "a.txt", "read", "1700000000", users, now, ErrBadSignature},
		"other user":   {want, "/home/user/a.txt", "read", "1700000000", []string{"root"}, now, ErrBadSignature},
		"no exp":       {want, "/home/user/a.txt", "read", "", users, now, ErrBadSignature},
		"bad exp":      {want, "/home/user/a.txt", "read", "soon", users, now, ErrBadSignature},
		"no version":   {strings.TrimPrefix(want, "v1_"), "/home/user/a.txt", "read", "1700000000", users, now, ErrBadSignature},
		"v2":           {"v2_" + want[3:], "/home/user/a.txt", "read", "1700000000", users, now, ErrBadSignature},
		"short digest": {want[:20], "/home/user/a.txt", "read", "1700000000", users, now, ErrBadSignature},
	} {
		if err := tok.VerifySignature(tc.sig, tc.path, tc.op, tc.users, tc.exp, tc.now); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", name, err, tc.want)
		}
	}
	// Any of several candidate users may match.
	if err := tok.VerifySignature(want, "/home/user/a.txt", "read", []string{"root", "user"}, "1700000000", now); err != nil {
		t.Errorf("second candidate refused: %v", err)
	}
	if err := NewToken("").VerifySignature(NewToken("").Sign("p", "read", "u", ""), "p", "read", []string{"u"}, "", now); err == nil {
		t.Error("an empty token verified a signature")
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

// FuzzSignature checks that signatures verify for exactly what they sign
// and that arbitrary signature strings never panic or verify.
func FuzzSignature(f *testing.F) {
	f.Add("/home/user/a.txt", "user", int64(1700000000), "v1_abc")
	f.Add("", "", int64(0), "")
	f.Add("a:b", "c:d", int64(-1), "v1_"+strings.Repeat("A", 43))
	f.Fuzz(func(t *testing.T, path, user string, exp int64, junk string) {
		tok := NewToken("fuzz-token")
		expStr := strconv.FormatInt(exp, 10)
		now := time.Unix(exp, 0)
		sig := tok.Sign(path, "write", user, expStr)
		if err := tok.VerifySignature(sig, path, "write", []string{user}, expStr, now); err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
		if err := tok.VerifySignature(sig, path, "read", []string{user}, expStr, now); err == nil {
			t.Fatal("write signature verified for read")
		}
		if err := tok.VerifySignature(junk, path, "write", []string{user}, expStr, now); err == nil {
			// Only another spelling of the same digest (padding) may pass.
			dj, _ := ParseSignature(junk)
			ds, _ := ParseSignature(sig)
			if !bytes.Equal(dj, ds) {
				t.Fatalf("junk %q verified", junk)
			}
		}
		_, _ = ParseSignature(junk)
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
