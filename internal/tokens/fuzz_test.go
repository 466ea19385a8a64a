package tokens

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/moatdev/moat/internal/testutil/fakegithub"
)

// FuzzJWTRoundTrip signs App JWTs with signAppJWT and reads them back with the fake GitHub's
// independent verifier: the claims survive, the window is GitHub's (iat 60 s back, at most
// 10 min), and changing any byte of the token makes it fail verification.
// Seeds: testdata/fuzz/FuzzJWTRoundTrip.
func FuzzJWTRoundTrip(f *testing.F) {
	f.Add("12345", int64(1772366400), uint(0))
	f.Add("Iv23liABCdef.123", int64(0), uint(17))
	f.Add("", int64(-1), uint(1000))
	f.Add("\"quoted\"\\", int64(253402300799), uint(3))
	key := fakegithub.AppKey()
	f.Fuzz(func(t *testing.T, iss string, unix int64, at uint) {
		if !utf8.ValidString(iss) || unix < -1<<40 || unix > 1<<40 {
			return // JSON carries UTF-8 only; time.Unix range beyond any clock
		}
		now := time.Unix(unix, 0)
		tok, err := signAppJWT(key, iss, now)
		if err != nil {
			t.Fatal(err)
		}
		c, err := fakegithub.VerifyAppJWT(tok, &key.PublicKey)
		if err != nil {
			t.Fatalf("decoding a token just signed: %v", err)
		}
		if c.Issuer != iss || c.IssuedAt != unix-60 || c.ExpiresAt != unix+540 {
			t.Fatalf("claims %+v for iss %q at %d", c, iss, unix)
		}
		if c.ExpiresAt-c.IssuedAt > 600 {
			t.Fatalf("window %d s, GitHub allows 600", c.ExpiresAt-c.IssuedAt)
		}
		b := []byte(tok)
		i := int(at % uint(len(b)))
		for _, r := range []byte{'A', 'g', '.', '-', '_', '='} {
			if b[i] == r {
				continue
			}
			m := append([]byte(nil), b...)
			m[i] = r
			if _, err := fakegithub.VerifyAppJWT(string(m), &key.PublicKey); err == nil {
				t.Fatalf("token with byte %d changed to %q still verifies", i, r)
			}
		}
	})
}

// FuzzParseAccessToken feeds GitHub token answers (bytes from the network) to the parser
// and the grant check: no panic, an accepted token fits in a header, and an accepted grant
// is within the request. Seeds: testdata/fuzz/FuzzParseAccessToken.
func FuzzParseAccessToken(f *testing.F) {
	f.Add([]byte(`{"token":"ghs_x","expires_at":"2026-03-01T13:00:00Z","permissions":{"contents":"write"},"repository_selection":"selected","repositories":[{"name":"a"}]}`))
	f.Add([]byte(`{"token":"ghs_x","expires_at":"2026-03-01T13:00:00Z","permissions":{"contents":"admin"},"repositories":[]}`))
	f.Add([]byte(`{"token":"ghs_x","expires_at":"2026-03-01T13:00:00Z","permissions":{},"repository_selection":"all"}`))
	f.Add([]byte(`{"token":"a b","expires_at":"bad"}`))
	f.Add([]byte(`[]`))
	repos := []string{"a", "b"}
	perms := map[string]string{"contents": "write", "issues": "read"}
	f.Fuzz(func(t *testing.T, data []byte) {
		ans, err := parseAccessToken(data)
		if err != nil {
			return
		}
		if ans.Token == "" || strings.ContainsAny(ans.Token, " \r\n\t\x00") || ans.ExpiresAt.IsZero() {
			t.Fatalf("accepted an unusable token answer %q", data)
		}
		if err := checkGrant(ans, repos, perms); err != nil {
			if !errors.Is(err, ErrOverGranted) {
				t.Fatalf("grant check error %v is not ErrOverGranted", err)
			}
			return
		}
		if ans.RepositorySelection == "all" || ans.Repositories == nil || ans.Permissions == nil {
			t.Fatalf("accepted a grant that does not list what it grants: %q", data)
		}
		for _, r := range ans.Repositories {
			if !containsFold(repos, r.Name) {
				t.Fatalf("accepted repository %q", r.Name)
			}
		}
		for k, v := range ans.Permissions {
			if permLevels()[v] == 0 || permLevels()[v] > permLevels()[perms[k]] {
				t.Fatalf("accepted permission %s:%s", k, v)
			}
		}
	})
}
