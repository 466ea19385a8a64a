package envdauth

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
