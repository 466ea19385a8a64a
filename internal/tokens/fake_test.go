package tokens

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/moatdev/moat/internal/testutil/fakegithub"
)

// otherKey is an RSA key that is not the App's, generated once per test binary.
var otherKey = sync.OnceValue(func() *rsa.PrivateKey { return mustKey(2048) })

func mustKey(bits int) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		panic(err)
	}
	return k
}

func pkcs1PEM(k *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

func pkcs8PEM(t testing.TB, k any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// clock is the fake clock shared by the provider and the fake GitHub.
type clock = fakegithub.Clock

func newClock() *clock { return fakegithub.NewClock() }

// newFakeGitHub starts a fake GitHub on clock c, with its default App, installation 42
// reaching repositories a, b, c with contents:write, pull_requests:write and issues:read,
// and tokens living an hour.
func newFakeGitHub(t testing.TB, c *clock) *fakegithub.Server {
	t.Helper()
	return fakegithub.New(t, fakegithub.WithClock(c.Now))
}

// appConfig returns a valid configuration for f's installation, on f's clock, asking for
// repositories a, b and contents:write, pull_requests:write.
func appConfig(f *fakegithub.Server) GitHubAppConfig {
	return GitHubAppConfig{
		AppID:          f.AppID(),
		PrivateKeyPEM:  f.PrivateKeyPEM(),
		InstallationID: f.InstallationID(),
		Repositories:   []string{"a", "b"},
		Permissions:    map[string]string{"contents": "write", "pull_requests": "write"},
		APIURL:         f.URL(),
		HTTPClient:     f.Client(),
		Now:            f.Now,
	}
}

// noSecrets fails the test if s holds any token f issued, any App JWT f received or
// listed in jwts (or its signature), or the App key's PEM body.
func noSecrets(t testing.TB, f *fakegithub.Server, what, s string, jwts ...string) {
	t.Helper()
	revoked := f.Revoked()
	for _, tok := range f.Tokens() {
		if strings.Contains(s, tok) {
			if slices.Contains(revoked, tok) {
				t.Errorf("%s holds a revoked token: %s", what, s)
			} else {
				t.Errorf("%s holds a token: %s", what, s)
			}
		}
	}
	for _, j := range append(f.JWTs(), jwts...) {
		if j != "" && strings.Contains(s, j) || strings.Contains(s, j[strings.LastIndexByte(j, '.')+1:]) {
			t.Errorf("%s holds an App JWT: %s", what, s)
		}
	}
	if keyLine := strings.Split(string(f.PrivateKeyPEM()), "\n")[2]; strings.Contains(s, keyLine) {
		t.Errorf("%s holds key material: %s", what, s)
	}
}

func newApp(t testing.TB, cfg GitHubAppConfig) Provider {
	t.Helper()
	p, err := NewGitHubApp(cfg)
	if err != nil {
		t.Fatalf("NewGitHubApp: %v", err)
	}
	return p
}

// errorString is err's text, or "" for nil.
func errorString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
