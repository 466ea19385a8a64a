package intercept

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkIntercept compares a request to the upstream directly with one through Serve
// (TLS terminated, injected, re-encrypted, scrubbed), on a reused connection and on a new
// one each time (both TLS handshakes on the intercepted path).
func BenchmarkIntercept(b *testing.B) {
	body := strings.Repeat("x", 1024) + value
	u := newUpstream(b, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })
	h := newHarness(b, u, Config{Injections: []Injection{bearer()}})
	// The same, resuming upstream TLS sessions.
	hr := newHarness(b, u, Config{Injections: []Injection{bearer()}, UpstreamSessions: tls.NewLRUClientSessionCache(8)})
	direct := func(keepAlive bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return u.dial(ctx)
			},
			TLSClientConfig:   &tls.Config{RootCAs: u.roots, ServerName: host},
			DisableKeepAlives: !keepAlive,
		}}
	}
	intercepted := func(h *harness, keepAlive bool) *http.Client {
		c := h.client()
		c.Transport.(*http.Transport).DisableKeepAlives = !keepAlive
		return c
	}
	for _, bc := range []struct {
		name string
		c    *http.Client
	}{
		{"reused/direct", direct(true)},
		{"reused/intercepted", intercepted(h, true)},
		{"new-conn/direct", direct(false)},
		{"new-conn/intercepted", intercepted(h, false)},
		{"new-conn/intercepted-upstream-resumed", intercepted(hr, false)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			defer bc.c.CloseIdleConnections()
			req, _ := http.NewRequest("GET", "https://api.test/bench", nil)
			req.Header.Set("Authorization", "Bearer "+placeholder)
			for b.Loop() {
				res, err := bc.c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err != nil || res.StatusCode != 200 || n < 1024 {
					b.Fatalf("%d bytes, status %d, %v", n, res.StatusCode, err)
				}
			}
		})
	}
}

func BenchmarkScrub(b *testing.B) {
	rep := newReplacer(value, placeholder)
	in := []byte(strings.Repeat(strings.Repeat("y", 4000)+value, 16))
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		io.Copy(io.Discard, newScrubReader(&chunkReader{src: in, sizes: []byte{255}}, rep))
	}
}
