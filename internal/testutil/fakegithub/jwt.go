package fakegithub

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
	"strings"
	"sync"
)

// appKey is the App's RSA key, generated once per test binary: RSA generation is slow.
var appKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(fmt.Sprintf("fakegithub: generating the App key: %v", err))
	}
	return k
})

// AppKey returns the App's 2048-bit RSA private key, which every Server checks App JWTs
// against. It is generated on first use and shared by the whole test binary.
func AppKey() *rsa.PrivateKey { return appKey() }

// pkcs1PEM encodes k as an "RSA PRIVATE KEY" PEM block.
func pkcs1PEM(k *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

// Claims are the claims of an App JWT.
type Claims struct {
	IssuedAt  int64  `json:"iat"` // Unix seconds
	ExpiresAt int64  `json:"exp"` // Unix seconds
	Issuer    string `json:"iss"` // the App ID or client ID
}

// VerifyAppJWT checks tok as GitHub checks an App JWT and returns its claims. It is
// written from RFC 7515/7519 independently of moat's signer: three strict base64url
// parts, the exact header {"alg":"RS256","typ":"JWT"}, a PKCS#1 v1.5 SHA-256 signature
// by pub, and claims with exactly iat, exp and iss. It does not check the claims' values
// (the Server does, against its clock and App ID).
func VerifyAppJWT(tok string, pub *rsa.PublicKey) (Claims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return Claims{}, fmt.Errorf("app JWT: %d parts", len(parts))
	}
	enc := base64.RawURLEncoding.Strict()
	var raw [3][]byte
	for i, p := range parts {
		b, err := enc.DecodeString(p)
		if err != nil {
			return Claims{}, fmt.Errorf("app JWT part %d: %w", i, err)
		}
		raw[i] = b
	}
	var hdr map[string]any
	if err := json.Unmarshal(raw[0], &hdr); err != nil {
		return Claims{}, fmt.Errorf("app JWT header: %w", err)
	}
	if len(hdr) != 2 || hdr["alg"] != "RS256" || hdr["typ"] != "JWT" {
		return Claims{}, fmt.Errorf("app JWT header %s is not {alg: RS256, typ: JWT}", raw[0])
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], raw[2]); err != nil {
		return Claims{}, fmt.Errorf("app JWT signature: %w", err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw[1], &all); err != nil {
		return Claims{}, fmt.Errorf("app JWT claims: %w", err)
	}
	if len(all) != 3 {
		return Claims{}, fmt.Errorf("app JWT has %d claims, want exactly iat, exp and iss", len(all))
	}
	var c Claims
	if err := json.Unmarshal(raw[1], &c); err != nil {
		return Claims{}, fmt.Errorf("app JWT claims: %w", err)
	}
	return c, nil
}
