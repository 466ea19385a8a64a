package tokens

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// GitHub accepts App JWTs valid for at most 10 minutes; iat is backdated a minute for
// clock drift, as GitHub recommends.
const (
	jwtBackdate = 60 * time.Second
	jwtLifetime = 9 * time.Minute
	minKeyBits  = 2048
)

// jwtHeader is the fixed, pre-encoded header of every App JWT.
var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))

// jwtClaims are the claims GitHub reads from an App JWT.
type jwtClaims struct {
	IssuedAt  int64  `json:"iat"`
	ExpiresAt int64  `json:"exp"`
	Issuer    string `json:"iss"`
}

// signAppJWT returns an RS256 JWT authenticating App iss at time now: iat now-60s,
// exp now+9min.
func signAppJWT(key *rsa.PrivateKey, iss string, now time.Time) (string, error) {
	claims, err := json.Marshal(jwtClaims{
		IssuedAt:  now.Add(-jwtBackdate).Unix(),
		ExpiresAt: now.Add(jwtLifetime).Unix(),
		Issuer:    iss,
	})
	if err != nil {
		return "", fmt.Errorf("encoding App JWT claims: %w", err)
	}
	signed := jwtHeader + "." + base64.RawURLEncoding.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("signing App JWT: %w", err)
	}
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// parseRSAKey reads an RSA private key of at least 2048 bits from the first PEM block of
// data, PKCS#1 ("RSA PRIVATE KEY") or PKCS#8 ("PRIVATE KEY"). Errors name the problem,
// never the key's bytes, and are of class errdefs.ErrInvalidArgument.
func parseRSAKey(data []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("github app private key: no PEM block: %w", errdefs.ErrInvalidArgument)
	}
	var key *rsa.PrivateKey
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("github app private key: PKCS#1: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		key = k
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("github app private key: PKCS#8: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("github app private key: a %T, not RSA: %w", k, errdefs.ErrInvalidArgument)
		}
		key = rk
	default:
		return nil, fmt.Errorf("github app private key: PEM block %.40q is not an RSA private key: %w", block.Type, errdefs.ErrInvalidArgument)
	}
	if bits := key.N.BitLen(); bits < minKeyBits {
		return nil, fmt.Errorf("github app private key: %d bits, need at least %d: %w", bits, minKeyBits, errdefs.ErrInvalidArgument)
	}
	return key, nil
}
