// Package envdauth is the envd access token and E2B's signed file URLs ("v1_"
// signatures), shared by moat-init (which checks them) and the daemon's E2B gateway
// (which finds the sandbox a signed URL belongs to).
package envdauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Errors of signed URLs.
var (
	ErrBadSignature     = errors.New("invalid signature")
	ErrExpiredSignature = errors.New("signature expired")
)

// Token is the sandbox's access token. It never prints or logs its value.
type Token struct{ secret string }

// NewToken wraps s.
func NewToken(s string) Token { return Token{secret: s} }

// Empty reports whether the token is unset.
func (t Token) Empty() bool { return t.secret == "" }

// String returns a placeholder, never the token.
func (Token) String() string { return "[redacted]" }

// LogValue keeps the token out of logs.
func (Token) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Equal reports whether s is the token, in time independent of where they
// differ and of their lengths.
func (t Token) Equal(s string) bool {
	a := sha256.Sum256([]byte(t.secret))
	b := sha256.Sum256([]byte(s))
	return !t.Empty() && subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// signatureDigest is sha256("<path>:<op>:<user>:<token>[:<expiration>]"),
// the signed-URL scheme of E2B's envd.
func (t Token) signatureDigest(path, op, user, expiration string) [sha256.Size]byte {
	s := path + ":" + op + ":" + user + ":" + t.secret
	if expiration != "" {
		s += ":" + expiration
	}
	return sha256.Sum256([]byte(s))
}

// Sign returns the signature of a file URL for path, op ("read" or
// "write") and user, valid until expiration (Unix seconds; "" for no
// expiry): "v1_" and the unpadded standard base64 of the digest.
func (t Token) Sign(path, op, user, expiration string) string {
	d := t.signatureDigest(path, op, user, expiration)
	return "v1_" + base64.RawStdEncoding.EncodeToString(d[:])
}

// ParseSignature decodes a "v1_<base64>" signature into its digest. It
// accepts the base64 with or without padding.
func ParseSignature(sig string) ([]byte, error) {
	enc, ok := strings.CutPrefix(sig, "v1_")
	if !ok {
		return nil, fmt.Errorf("%w: unknown version", ErrBadSignature)
	}
	d, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "="))
	if err != nil || len(d) != sha256.Size {
		return nil, fmt.Errorf("%w: malformed", ErrBadSignature)
	}
	return d, nil
}

// VerifySignature checks a signed-URL signature for path, op and each of
// users (the first match wins) and its expiration, a decimal Unix time or
// "" when the URL does not expire.
func (t Token) VerifySignature(sig, path, op string, users []string, expiration string, now time.Time) error {
	got, err := ParseSignature(sig)
	if err != nil {
		return err
	}
	if expiration != "" {
		exp, err := strconv.ParseInt(expiration, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: malformed expiration", ErrBadSignature)
		}
		if now.Unix() > exp {
			return ErrExpiredSignature
		}
	}
	if t.Empty() {
		return ErrBadSignature
	}
	ok := 0
	for _, u := range users {
		want := t.signatureDigest(path, op, u, expiration)
		ok |= subtle.ConstantTimeCompare(got, want[:])
	}
	if ok != 1 {
		return ErrBadSignature
	}
	return nil
}
