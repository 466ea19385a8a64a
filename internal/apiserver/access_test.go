package apiserver

import (
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// pathValues fills a route pattern's wildcards with values of the right shape.
var pathValues = regexp.MustCompile(`\{[a-z]+(\.\.\.)?\}`)

// TestRouteAccess calls every route of the table over TCP: without an API key each one
// but the public ones is refused with 401 before its handler runs; with a valid key each
// socketOnly route is refused with 403. The table itself must mark the routes of API keys,
// secrets and drive archives socketOnly, so a new route there cannot be added open to keys.
func TestRouteAccess(t *testing.T) {
	s := New(Deps{Sandboxes: &fakeSandboxes{}, Log: slog.New(slog.DiscardHandler)})
	api := httptest.NewServer(s.Handler(keys{"good": true}))
	t.Cleanup(api.Close)
	if len(s.routes) < 50 {
		t.Fatalf("only %d routes in the table", len(s.routes))
	}
	counts := map[access]int{}
	for _, r := range s.routes {
		counts[r.access]++
		method, path, ok := strings.Cut(r.pattern, " ")
		if !ok {
			method, path = "GET", r.pattern
		}
		for _, prefix := range []string{"/v1/apikeys", "/v1/secrets", "/v1/archives"} {
			if strings.HasPrefix(path, prefix) && r.access != socketOnly {
				t.Errorf("%s is not socketOnly", r.pattern)
			}
		}
		url := api.URL + pathValues.ReplaceAllStringFunc(path, func(w string) string {
			if w == "{id}" {
				return "sb-000000000001"
			}
			return "x"
		})
		code, body := call(t, method, url, "", nil)
		switch {
		case r.access == public && code == 401:
			t.Errorf("%s without a key: 401, but it is public", r.pattern)
		case r.access != public && code != 401:
			t.Errorf("%s without a key: %d %s, want 401", r.pattern, code, body)
		}
		if r.access == socketOnly {
			if code, body := call(t, method, url, "good", nil); code != 403 || !strings.Contains(body, "unix socket only") {
				t.Errorf("%s with an API key: %d %s, want 403", r.pattern, code, body)
			}
		}
	}
	if counts[public] == 0 || counts[socketOnly] < 12 {
		t.Errorf("access classes in the table: %v", counts)
	}
	t.Logf("%d routes: %d by key, %d public, %d unix socket only", len(s.routes), counts[byKey], counts[public], counts[socketOnly])
}
