package apiserver

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestMetricsAccess(t *testing.T) {
	tok := []byte("0123456789abcdef0123")
	for _, c := range []struct {
		name   string
		token  []byte
		remote string
		auth   string
		want   error
	}{
		{"loopback v4, no token configured", nil, "127.0.0.1:5555", "", nil},
		{"loopback v6", nil, "[::1]:5555", "", nil},
		{"loopback mapped", nil, "[::ffff:127.0.0.1]:5555", "", nil},
		{"other address, no token configured", nil, "192.0.2.7:5555", "", errdefs.ErrPermissionDenied},
		{"other address with some bearer, no token configured", nil, "10.0.0.1:1", "Bearer " + string(tok), errdefs.ErrPermissionDenied},
		{"garbage peer", nil, "not-an-address", "", errdefs.ErrPermissionDenied},
		{"token configured, none given, loopback", tok, "127.0.0.1:1", "", errdefs.ErrUnauthenticated},
		{"token configured, none given", tok, "192.0.2.7:1", "", errdefs.ErrUnauthenticated},
		{"wrong token", tok, "192.0.2.7:1", "Bearer 0123456789abcdef0124", errdefs.ErrUnauthenticated},
		{"prefix of the token", tok, "192.0.2.7:1", "Bearer 0123456789abcdef", errdefs.ErrUnauthenticated},
		{"not bearer", tok, "192.0.2.7:1", "Basic " + string(tok), errdefs.ErrUnauthenticated},
		{"right token", tok, "192.0.2.7:1", "Bearer " + string(tok), nil},
	} {
		err := MetricsAccess(c.token, c.remote, c.auth)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: MetricsAccess = %v, want %v", c.name, err, c.want)
		}
	}
}

// TestMetricsEndpoint: /metrics through the real gate. Without a metrics token a TCP
// scrape from a loopback peer passes and one from any other address is refused (403),
// even with a valid API key; the unix socket (auth nil) always passes.
func TestMetricsEndpoint(t *testing.T) {
	envd := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(envd.Close)
	s := New(Deps{Sandboxes: &fakeSandboxes{envd: envd}, Log: slog.New(slog.DiscardHandler)})
	s.SetMetrics(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "# metrics\n") }), nil, nil)
	tcp, sock := s.Handler(keys{"good": true}), s.Handler(nil)
	for _, c := range []struct {
		name   string
		h      http.Handler
		remote string
		key    string
		method string
		want   int
	}{
		{"loopback", tcp, "127.0.0.1:40000", "", "GET", 200},
		{"loopback v6", tcp, "[::1]:40000", "", "GET", 200},
		{"other address", tcp, "192.0.2.7:40000", "", "GET", 403},
		{"other address with an API key", tcp, "192.0.2.7:40000", "good", "GET", 403},
		{"unix socket", sock, "@", "", "GET", 200},
		{"POST", tcp, "127.0.0.1:40000", "", "POST", 405},
	} {
		req := httptest.NewRequest(c.method, "/metrics", nil)
		req.RemoteAddr = c.remote
		if c.key != "" {
			req.Header.Set("Authorization", "Bearer "+c.key)
		}
		rec := httptest.NewRecorder()
		c.h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, rec.Code, rec.Body, c.want)
		}
	}
}
