package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/testutil"
)

// BenchmarkEgressOverhead measures what the egress boundary adds, against a baseline
// taken in the same loop: each iteration does the same thing once directly (loopback,
// from the host's namespace) and once through the proxy (from the sandbox's namespace,
// over the veth, redirected by nftables, dialled upstream by the proxy), alternately, so
// that the load of a shared machine falls on both alike. It reports the medians of both,
// the added median ("added-µs") and, for downloads, the proxied throughput as a
// percentage of the direct one ("proxied-%").
//
//   - tcp-new-connection: connect, one line echoed, close (a plain TCP/HTTP-like exchange).
//   - https-new-connection: a new TLS connection and one small GET, passed through.
//   - https-download-1MiB: a 1 MiB GET on a kept-alive TLS connection, passed through.
func BenchmarkEgressOverhead(b *testing.B) {
	echoPort, _ := echoServer(b)
	up := testutil.NewUpstreamCA(b, "pass.test")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	payload := strings.Repeat("x", 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, payload)
			return
		}
		io.WriteString(w, "ok")
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{up.Cert}}}
	go srv.ServeTLS(ln, "", "")
	b.Cleanup(func() { srv.Close() })
	tlsPort := uint16(ln.Addr().(*net.TCPAddr).Port)

	lo := netip.MustParseAddr("127.0.0.1")
	r := newRig(b, egress.Hosts{"up.test": {lo}, "pass.test": {lo}}, policy.Single(policy.Rules{Allow: []string{"up.test", "pass.test"}}))
	host, err := os.Open("/proc/self/ns/net")
	if err != nil {
		b.Fatal(err)
	}
	defer host.Close()
	type path struct {
		ns         *os.File
		echo, tlsA netip.AddrPort
	}
	direct := path{host, netip.AddrPortFrom(lo, echoPort), netip.AddrPortFrom(lo, tlsPort)}
	proxied := path{r.s, netip.AddrPortFrom(mustLookup(b, r, "up.test"), echoPort), netip.AddrPortFrom(mustLookup(b, r, "pass.test"), tlsPort)}
	paths := []path{direct, proxied}
	// dialIn makes the socket in p's namespace (both paths pay the same namespace switch).
	dialIn := func(ctx context.Context, p path, a netip.AddrPort) (c net.Conn, err error) {
		err = linux.RunInNetNS(p.ns, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp4", a.String())
			return err
		})
		return c, err
	}
	client := func(p path, keepAlive bool) *http.Client {
		return &http.Client{Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return dialIn(ctx, p, p.tlsA) },
			TLSClientConfig:   &tls.Config{RootCAs: up.Pool},
			DisableKeepAlives: !keepAlive,
		}}
	}
	get := func(b *testing.B, c *http.Client, urlPath string) {
		resp, err := c.Get(fmt.Sprintf("https://pass.test:%d%s", tlsPort, urlPath))
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("GET %s: %d %v", urlPath, resp.StatusCode, err)
		}
	}
	// pairs runs once per path per iteration, alternately, and reports both medians.
	pairs := func(b *testing.B, once func(b *testing.B, i int) time.Duration, bytes int64) {
		var lat [2][]time.Duration
		for b.Loop() {
			for i := range paths {
				lat[i] = append(lat[i], once(b, i))
			}
		}
		d, p := median(lat[0]), median(lat[1])
		if bytes > 0 {
			b.ReportMetric(float64(bytes)/d.Seconds()/1e6, "direct-MB/s")
			b.ReportMetric(float64(bytes)/p.Seconds()/1e6, "proxied-MB/s")
			b.ReportMetric(100*d.Seconds()/p.Seconds(), "proxied-%")
			return
		}
		b.ReportMetric(float64(d.Microseconds()), "direct-µs")
		b.ReportMetric(float64(p.Microseconds()), "proxied-µs")
		b.ReportMetric(float64((p - d).Microseconds()), "added-µs")
	}
	b.Run("tcp-new-connection", func(b *testing.B) {
		pairs(b, func(b *testing.B, i int) time.Duration {
			t0 := time.Now()
			c, err := dialIn(context.Background(), paths[i], paths[i].echo)
			if err != nil {
				b.Fatal(err)
			}
			roundTrip(b, c, bufio.NewReader(c))
			d := time.Since(t0)
			c.Close()
			return d
		}, 0)
	})
	b.Run("https-new-connection", func(b *testing.B) {
		pairs(b, func(b *testing.B, i int) time.Duration {
			c := client(paths[i], false)
			t0 := time.Now()
			get(b, c, "/small")
			return time.Since(t0)
		}, 0)
	})
	b.Run("https-download-1MiB", func(b *testing.B) {
		clients := []*http.Client{client(direct, true), client(proxied, true)}
		for _, c := range clients {
			get(b, c, "/big") // connect outside the measurement
		}
		pairs(b, func(b *testing.B, i int) time.Duration {
			t0 := time.Now()
			get(b, clients[i], "/big")
			return time.Since(t0)
		}, int64(len(payload)))
	})
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
