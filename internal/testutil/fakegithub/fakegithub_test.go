package fakegithub_test

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/testutil/fakegithub"
)

// appJWT signs an App JWT with key for iss, issued at iat and valid for life.
func appJWT(t *testing.T, key *rsa.PrivateKey, iss string, iat time.Time, life time.Duration) string {
	t.Helper()
	enc := base64.RawURLEncoding
	claims := fmt.Sprintf(`{"iat":%d,"exp":%d,"iss":%q}`, iat.Unix(), iat.Add(life).Unix(), iss)
	signed := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(claims))
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + enc.EncodeToString(sig)
}

// call sends an API request as moat does and returns the status and the decoded answer.
func call(t *testing.T, s *fakegithub.Server, method, path, cred string, body any) (int, map[string]any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, s.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	req.Header.Set("User-Agent", "fakegithub-test")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&ans)
	return resp.StatusCode, ans
}

func mintPath(s *fakegithub.Server) string {
	return "/app/installations/" + strconv.FormatInt(s.InstallationID(), 10) + "/access_tokens"
}

// mint asks s for a token for repos and perms and returns it.
func mint(t *testing.T, s *fakegithub.Server, repos []string, perms map[string]string) string {
	t.Helper()
	jwt := appJWT(t, fakegithub.AppKey(), s.AppID(), s.Now().Add(-time.Minute), 9*time.Minute)
	status, ans := call(t, s, http.MethodPost, mintPath(s), jwt, map[string]any{"repositories": repos, "permissions": perms})
	tok, _ := ans["token"].(string)
	if status != http.StatusCreated || tok == "" {
		t.Fatalf("mint: %d %v", status, ans)
	}
	return tok
}

func newServer(t *testing.T) (*fakegithub.Server, *fakegithub.Clock) {
	c := fakegithub.NewClock()
	return fakegithub.New(t, fakegithub.WithClock(c.Now)), c
}

func TestAuthorize(t *testing.T) {
	s, c := newServer(t)
	reader := mint(t, s, []string{"a"}, map[string]string{"contents": "read"})
	writer := mint(t, s, []string{"a", "B"}, map[string]string{"contents": "write", "issues": "read"})
	noContents := mint(t, s, []string{"a"}, map[string]string{"issues": "read"})
	basic := func(user, tok string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+tok))
	}
	for _, tc := range []struct {
		auth  string
		repo  string
		write bool
		want  bool
	}{
		{basic("x-access-token", reader), "a", false, true},
		{"Bearer " + reader, "a", false, true},
		{"bearer " + reader, "owner/A.git", false, true},
		{basic("x-access-token", reader), "a", true, false}, // contents:read cannot push
		{basic("x-access-token", reader), "b", false, false},
		{basic("x-access-token", writer), "b", true, true},
		{basic("x-access-token", writer), "owner/b.git", true, true},
		{basic("x-access-token", writer), "c", false, false},
		{basic("x-access-token", noContents), "a", false, false},
		{basic("someone", reader), "a", false, false},
		{basic("x-access-token", "ghs_unknown"), "a", false, false},
		{basic("x-access-token", ""), "a", false, false},
		{"Basic !!!", "a", false, false},
		{"token " + reader, "a", false, false},
		{reader, "a", false, false},
		{"", "a", false, false},
		{"Bearer " + reader, "", false, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/owner/"+tc.repo+"/info/refs", nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		if got := s.Authorize(r, tc.repo, tc.write); got != tc.want {
			t.Errorf("Authorize(%q, %q, write %v) = %v, want %v", tc.auth, tc.repo, tc.write, got, tc.want)
		}
	}

	// A revoked token is refused; so is an expired one.
	if status, _ := call(t, s, http.MethodDelete, "/installation/token", writer, nil); status != http.StatusNoContent {
		t.Fatalf("revoke: %d", status)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+writer)
	if s.Authorize(r, "a", false) {
		t.Errorf("a revoked token is authorized")
	}
	r.Header.Set("Authorization", "Bearer "+reader)
	c.Advance(fakegithub.DefaultTokenTTL)
	if s.Authorize(r, "a", false) {
		t.Errorf("an expired token is authorized")
	}
}

func TestLookupAndCounts(t *testing.T) {
	s, c := newServer(t)
	tok := mint(t, s, []string{"a", "b"}, map[string]string{"contents": "write"})
	g, ok := s.Lookup(tok)
	if !ok || !slices.Equal(g.Repositories, []string{"a", "b"}) || len(g.Permissions) != 1 ||
		g.Permissions["contents"] != "write" || !g.ExpiresAt.Equal(c.Now().Add(time.Hour)) {
		t.Fatalf("Lookup = %+v, %v", g, ok)
	}
	if _, ok := s.Lookup("ghs_other"); ok {
		t.Errorf("Lookup of a token never issued")
	}
	// GitHub gives a request naming no repositories or permissions all the installation's.
	all := mint(t, s, nil, nil)
	if g, ok := s.Lookup(all); !ok || !slices.Equal(g.Repositories, s.Repositories()) || len(g.Permissions) != len(s.Permissions()) {
		t.Errorf("Lookup of a token for everything = %+v, %v", g, ok)
	}
	if status, _ := call(t, s, http.MethodDelete, "/installation/token", tok, nil); status != http.StatusNoContent {
		t.Fatalf("revoke: %d", status)
	}
	if status, _ := call(t, s, http.MethodDelete, "/installation/token", tok, nil); status != http.StatusUnauthorized {
		t.Errorf("second revoke: %d, want 401", status)
	}
	if _, ok := s.Lookup(tok); ok {
		t.Errorf("Lookup of a revoked token")
	}
	if n, m := s.MintRequests(), s.RevokeRequests(); n != 2 || m != 2 {
		t.Errorf("MintRequests %d, RevokeRequests %d; want 2, 2", n, m)
	}
	if r := s.Revoked(); !slices.Equal(r, []string{tok}) {
		t.Errorf("Revoked = %q", r)
	}
	if toks := s.Tokens(); !slices.Equal(toks, []string{tok, all}) {
		t.Errorf("Tokens = %q", toks)
	}
	if reqs := s.Requests(); len(reqs) != 2 || !slices.Equal(reqs[0].Repositories, []string{"a", "b"}) || reqs[1].Repositories != nil {
		t.Errorf("Requests = %+v", reqs)
	}
	s.FailMints(http.StatusBadGateway)
	jwt := appJWT(t, fakegithub.AppKey(), s.AppID(), c.Now(), time.Minute)
	if status, _ := call(t, s, http.MethodPost, mintPath(s), jwt, map[string]any{"repositories": []string{"a"}}); status != http.StatusBadGateway {
		t.Errorf("mint while failing: %d", status)
	}
}

func TestMintChecks(t *testing.T) {
	s, c := newServer(t)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := c.Now()
	body := map[string]any{"repositories": []string{"a"}, "permissions": map[string]string{"contents": "read"}}
	for name, tc := range map[string]struct {
		jwt  string
		path string
		body any
		want int
	}{
		"wrong key":          {appJWT(t, other, s.AppID(), now, time.Minute), mintPath(s), body, http.StatusUnauthorized},
		"wrong issuer":       {appJWT(t, fakegithub.AppKey(), "999", now, time.Minute), mintPath(s), body, http.StatusUnauthorized},
		"issued in future":   {appJWT(t, fakegithub.AppKey(), s.AppID(), now.Add(time.Minute), time.Minute), mintPath(s), body, http.StatusUnauthorized},
		"issued long ago":    {appJWT(t, fakegithub.AppKey(), s.AppID(), now.Add(-3*time.Minute), 5*time.Minute), mintPath(s), body, http.StatusUnauthorized},
		"too long":           {appJWT(t, fakegithub.AppKey(), s.AppID(), now, 11*time.Minute), mintPath(s), body, http.StatusUnauthorized},
		"not a JWT":          {"ghs_x", mintPath(s), body, http.StatusUnauthorized},
		"other installation": {appJWT(t, fakegithub.AppKey(), s.AppID(), now, time.Minute), "/app/installations/7/access_tokens", body, http.StatusNotFound},
		"other repository": {appJWT(t, fakegithub.AppKey(), s.AppID(), now, time.Minute), mintPath(s),
			map[string]any{"repositories": []string{"d"}}, http.StatusUnprocessableEntity},
		"higher permission": {appJWT(t, fakegithub.AppKey(), s.AppID(), now, time.Minute), mintPath(s),
			map[string]any{"permissions": map[string]string{"issues": "write"}}, http.StatusUnprocessableEntity},
		"unknown field": {appJWT(t, fakegithub.AppKey(), s.AppID(), now, time.Minute), mintPath(s),
			map[string]any{"repository_ids": []int{1}}, http.StatusBadRequest},
		"ok": {appJWT(t, fakegithub.AppKey(), s.AppID(), now, time.Minute), mintPath(s), body, http.StatusCreated},
	} {
		if status, ans := call(t, s, http.MethodPost, tc.path, tc.jwt, tc.body); status != tc.want {
			t.Errorf("%s: %d %v, want %d", name, status, ans, tc.want)
		}
	}
	if len(s.Tokens()) != 1 {
		t.Errorf("%d tokens issued, want 1", len(s.Tokens()))
	}
}

func TestVerifyAppJWT(t *testing.T) {
	now := time.Unix(1772366400, 0)
	tok := appJWT(t, fakegithub.AppKey(), "12345", now, 9*time.Minute)
	c, err := fakegithub.VerifyAppJWT(tok, &fakegithub.AppKey().PublicKey)
	if err != nil || c != (fakegithub.Claims{IssuedAt: now.Unix(), ExpiresAt: now.Unix() + 540, Issuer: "12345"}) {
		t.Fatalf("VerifyAppJWT = %+v, %v", c, err)
	}
	bad := []byte(tok)
	i := strings.LastIndexByte(tok, '.') + 1
	if bad[i] == 'A' {
		bad[i] = 'B'
	} else {
		bad[i] = 'A'
	}
	if _, err := fakegithub.VerifyAppJWT(string(bad), &fakegithub.AppKey().PublicKey); err == nil {
		t.Errorf("a JWT with a changed signature verifies")
	}
}

func TestPrivateKeyPEM(t *testing.T) {
	s, _ := newServer(t)
	if !bytes.HasPrefix(s.PrivateKeyPEM(), []byte("-----BEGIN RSA PRIVATE KEY-----\n")) {
		t.Errorf("PrivateKeyPEM is not PKCS#1 PEM")
	}
	if s.AppID() != fakegithub.DefaultAppID || s.InstallationID() != fakegithub.DefaultInstallationID {
		t.Errorf("App %s installation %d", s.AppID(), s.InstallationID())
	}
}
