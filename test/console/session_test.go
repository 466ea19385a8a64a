package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestConsoleSessionLifetime signs in over HTTP (no browser) to a real daemon: the session
// survives a restart of the daemon (it lives in SQLite), and ends when its API key is
// deleted (`moat apikey rm`), asserted by the daemon's answers to the same cookie.
func TestConsoleSessionLifetime(t *testing.T) {
	if testing.Short() {
		t.Skip("a real daemon (not with -short)")
	}
	d := startDaemon(t)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(d.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, page := get("/ui/login")
	m := regexp.MustCompile(`name="login_token" value="([0-9a-f]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no login token in %s", page)
	}
	req, _ := http.NewRequest("POST", d.url+"/ui/login", strings.NewReader(url.Values{"login_token": {m[1]}, "key": {d.key}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", d.url)
	resp, err := c.Do(req) // follows the 303 to /ui/
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	code, body := get("/ui/session")
	var s struct {
		APIKey string `json:"api_key"`
		Owner  string `json:"owner"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &s) != nil || s.APIKey == "" || s.Owner != "alice" {
		t.Fatalf("GET /ui/session after sign-in = %d %s, want the key of owner alice", code, body)
	}

	d.stop(t)
	d.start(t)
	if code, body := get("/v1/sandboxes"); code != 200 {
		t.Fatalf("the session after a daemon restart: %d %s, want 200", code, body)
	}

	d.moat(t, "apikey", "rm", s.APIKey)
	if code, body := get("/v1/sandboxes"); code != http.StatusUnauthorized {
		t.Fatalf("the session of a deleted key: %d %s, want 401", code, body)
	}
	if code, _ := get("/ui/session"); code != http.StatusUnauthorized {
		t.Fatalf("GET /ui/session of a deleted key: %d, want 401", code)
	}
}
