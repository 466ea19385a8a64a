package envd

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/moatdev/moat/internal/envdauth"
)

// The access token and signed URLs live in internal/envdauth (the daemon's E2B gateway
// checks signatures too).
type Token = envdauth.Token

// NewToken wraps s.
func NewToken(s string) Token { return envdauth.NewToken(s) }

// Errors of request authentication.
var (
	ErrBadSignature     = envdauth.ErrBadSignature
	ErrExpiredSignature = envdauth.ErrExpiredSignature
	ErrBadAuthorization = errors.New("invalid Authorization header")
)

// ParseBasicUser returns the user name of an "Authorization: Basic
// base64(user:password)" header value (the password is ignored; E2B sends
// none). An empty header yields "".
func ParseBasicUser(header string) (string, error) {
	if header == "" {
		return "", nil
	}
	scheme, enc, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", fmt.Errorf("%w: not Basic", ErrBadAuthorization)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", fmt.Errorf("%w: bad base64", ErrBadAuthorization)
	}
	user, _, _ := strings.Cut(string(raw), ":")
	if strings.ContainsAny(user, "\x00\n/") || len(user) > 256 {
		return "", fmt.Errorf("%w: bad user name", ErrBadAuthorization)
	}
	return user, nil
}
