package egress_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/testutil"
)

// BenchmarkCredentials compares, in one run, HTTPS requests from a sandbox namespace to a
// host with a credential binding (TLS terminated, the placeholder swapped), to a host
// covered by an HTTP rule (TLS terminated, each request checked), to a host with neither
// (TLS passed through), and from the host directly to the same loopback server. A new
// connection to an intercepted host reuses the sandbox's pooled upstream connection;
// first-connection measures one that cannot. Every client socket is made in its client's namespace.
func BenchmarkCredentials(b *testing.B) {
	const secret = "bench-secret-value-42"
	ph := "moat-placeholder-" + strings.Repeat("ab", 24)
	up := testutil.NewUpstreamCA(b, "bound.test", "pass.test", "l7.test")
	roots, cert := up.Pool, up.Cert
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	payload := strings.Repeat("x", 1<<20)
	// An API's JSON: letters, digits and base64, where a scrubber's candidates are many.
	chunk := `{"id":1296269,"node_id":"MDEwOlJlcG9zaXRvcnkxMjk2MjY5","name":"Hello-World","full_name":"octocat/Hello-World","sha":"6dcb09b5b57875f334f61aebed695e2e4193db5e","content":"SGVsbG8gV29ybGQhIFRoaXMgaXMgYSB0ZXN0IG9mIGJhc2U2NCBjb250ZW50Lg=="},` + "\n"
	jsonPayload := strings.Repeat(chunk, (1<<20)/len(chunk)+1)[:1<<20]
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			io.WriteString(w, payload)
			return
		case "/json":
			io.WriteString(w, jsonPayload)
			return
		}
		if a := r.Header.Get("Authorization"); a != "Bearer "+ph && a != "Bearer "+secret {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "ok")
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(ln, "", "")
	b.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	dir := b.TempDir()
	store, err := secrets.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Put("TOK", secrets.NewValue(secret), nil, &secrets.Scope{Hosts: []string{fmt.Sprintf("bound.test:%d", port)}}); err != nil {
		b.Fatal(err)
	}
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	spec := policy.Single(policy.Rules{Allow: []string{"bound.test", "pass.test"}, HTTP: []string{"l7.test GET /"}})
	r := newRigWith(b, egress.Hosts{"bound.test": lo, "pass.test": lo, "l7.test": lo},
		spec,
		[]sandbox.Credential{{Secret: "TOK", Hosts: []string{fmt.Sprintf("bound.test:%d", port)}, Placeholder: ph}},
		func(c *egress.Config) { c.Secrets, c.CADir, c.RootCAs = store, dir+"/ca", roots })
	clientRoots := roots.Clone()
	clientRoots.AppendCertsFromPEM([]byte(r.caPEM))

	host, err := os.Open("/proc/self/ns/net")
	if err != nil {
		b.Fatal(err)
	}
	defer host.Close()
	paths := []struct {
		name, host string
		addr       netip.Addr
		ns         *os.File
	}{
		{"direct", "bound.test", lo[0], host},
		{"passthrough", "pass.test", mustLookup(b, r, "pass.test"), r.s},
		{"intercepted", "bound.test", mustLookup(b, r, "bound.test"), r.s},
		{"http-rule", "l7.test", mustLookup(b, r, "l7.test"), r.s},
	}
	for _, p := range paths {
		client := func(keepAlive bool) *http.Client {
			return &http.Client{Transport: &http.Transport{
				// The transport dials on goroutines of its own: make each socket in the
				// client's namespace (the direct client pays the same namespace switch).
				DialContext: func(ctx context.Context, _, _ string) (c net.Conn, err error) {
					err = linux.RunInNetNS(p.ns, func() (err error) {
						var d net.Dialer
						c, err = d.DialContext(ctx, "tcp4", netip.AddrPortFrom(p.addr, uint16(port)).String())
						return err
					})
					return c, err
				},
				TLSClientConfig:   &tls.Config{RootCAs: clientRoots},
				DisableKeepAlives: !keepAlive,
				ForceAttemptHTTP2: false,
			}}
		}
		get := func(b *testing.B, c *http.Client, path string) int64 {
			req, _ := http.NewRequest("GET", fmt.Sprintf("https://%s:%d%s", p.host, port, path), nil)
			req.Header.Set("Authorization", "Bearer "+ph)
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("%s: status %d", p.name, resp.StatusCode)
			}
			return n
		}
		in := func(b *testing.B, fn func()) { fn() }
		b.Run("new-connection/"+p.name, func(b *testing.B) {
			var lat []time.Duration
			in(b, func() {
				for b.Loop() {
					c := client(false)
					t0 := time.Now()
					get(b, c, "/small")
					lat = append(lat, time.Since(t0))
				}
			})
			reportLatency(b, lat)
		})
		if p.name == "intercepted" {
			// The first connection to a host: the pool of upstream connections is reset
			// (by setting the same policy again) before each one.
			b.Run("first-connection/"+p.name, func(b *testing.B) {
				var lat []time.Duration
				for b.Loop() {
					if _, err := r.m.SetPolicy(r.id, spec); err != nil {
						b.Fatal(err)
					}
					c := client(false)
					t0 := time.Now()
					get(b, c, "/small")
					lat = append(lat, time.Since(t0))
				}
				reportLatency(b, lat)
			})
		}
		b.Run("reused-connection/"+p.name, func(b *testing.B) {
			c := client(true)
			var lat []time.Duration
			in(b, func() {
				get(b, c, "/small")
				for b.Loop() {
					t0 := time.Now()
					get(b, c, "/small")
					lat = append(lat, time.Since(t0))
				}
			})
			reportLatency(b, lat)
		})
		for _, d := range []struct{ name, path string }{{"download-1MiB", "/big"}, {"download-1MiB-json", "/json"}} {
			b.Run(d.name+"/"+p.name, func(b *testing.B) {
				c := client(true)
				b.SetBytes(int64(len(payload)))
				in(b, func() {
					get(b, c, d.path)
					b.ResetTimer()
					for range b.N {
						get(b, c, d.path)
					}
				})
			})
		}
	}
}

func mustLookup(b testing.TB, r *rig, name string) netip.Addr {
	ip, _ := r.lookup(b, name)
	if !ip.IsValid() {
		b.Fatalf("%s did not resolve", name)
	}
	return ip
}
