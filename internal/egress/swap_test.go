package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/testutil"
)

// TestBoundHostEveryPort: a binding for bound.test:P1 makes moat terminate TLS to
// bound.test on every port. On P2, which the binding does not name, nothing is injected
// (the upstream gets the placeholder) and what the upstream serves back, the value in
// any encoding, reaches the sandbox scrubbed; plain HTTP there is read and scrubbed too,
// and a protocol moat cannot read is refused. The injection on P1 goes into Authorization
// only.
func TestBoundHostEveryPort(t *testing.T) {
	const secret = "real/secret+0f3c9a7e=5b1d"
	ph := "moat-placeholder-" + strings.Repeat("cd", 24)
	up := testutil.NewUpstreamCA(t, "bound.test")
	var mu sync.Mutex
	var log []string
	handler := func(port string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			log = append(log, fmt.Sprintf("%s %s auth=%s other=%s body=%s", port, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("X-Other"), body))
			mu.Unlock()
			// It knows its credential, and serves it back in every common encoding.
			for _, e := range []string{secret, url.QueryEscape(secret), hex.EncodeToString([]byte(secret)),
				base64.StdEncoding.EncodeToString([]byte("x-access-token:" + secret)),
				base64.RawURLEncoding.EncodeToString([]byte("a:" + secret + "\n"))} {
				fmt.Fprintln(w, e)
				w.Header().Add("X-Echo", e)
			}
		}
	}
	listen := func(h http.Handler, tlsOn bool) int {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		if tlsOn {
			srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{up.Cert}}
			go srv.ServeTLS(ln, "", "")
		} else {
			go srv.Serve(ln)
		}
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port
	}
	p1 := listen(handler("p1"), true)
	p2 := listen(handler("p2"), true)
	p3 := listen(handler("p3"), false)
	lineEcho, _ := echoServer(t)

	dir := t.TempDir()
	store, err := secrets.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put("TOK", secrets.NewValue(secret), nil, &secrets.Scope{Hosts: []string{fmt.Sprintf("bound.test:%d", p1)}}); err != nil {
		t.Fatal(err)
	}
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	r := newRigWith(t, egress.Hosts{"bound.test": lo}, policy.Single(policy.Rules{Allow: []string{"bound.test"}}),
		[]sandbox.Credential{{Secret: "TOK", Hosts: []string{fmt.Sprintf("bound.test:%d", p1)}, Placeholder: ph}},
		func(c *egress.Config) { c.Secrets, c.CADir, c.RootCAs = store, dir+"/ca", up.Pool })
	ip := mustLookup(t, r, "bound.test")
	roots := up.Pool.Clone()
	roots.AppendCertsFromPEM([]byte(r.caPEM))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (c net.Conn, err error) {
			_, port, _ := net.SplitHostPort(addr)
			err = linux.RunInNetNS(r.s, func() (err error) {
				var d net.Dialer
				c, err = d.DialContext(ctx, "tcp4", net.JoinHostPort(ip.String(), port))
				return err
			})
			return c, err
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
	get := func(rawURL string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", rawURL, strings.NewReader("token="+ph))
		req.Header.Set("Authorization", "Bearer "+ph)
		req.Header.Set("X-Other", ph)
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", rawURL, err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d %s", rawURL, res.StatusCode, body)
		}
		return fmt.Sprint(res.Header) + string(body)
	}
	for _, u := range []string{
		fmt.Sprintf("https://bound.test:%d/p1?q=%s", p1, ph),
		fmt.Sprintf("https://bound.test:%d/p2?q=%s", p2, ph),
		fmt.Sprintf("http://bound.test:%d/p3?q=%s", p3, ph),
	} {
		got := get(u)
		for _, e := range []string{secret, url.QueryEscape(secret), hex.EncodeToString([]byte(secret)),
			base64.StdEncoding.EncodeToString([]byte("x-access-token:" + secret)),
			base64.RawURLEncoding.EncodeToString([]byte("a:" + secret + "\n"))[4:30]} {
			if strings.Contains(got, e) {
				t.Errorf("%s: the sandbox got %q in\n%s", u, e, got)
			}
		}
		if !strings.Contains(got, ph) {
			t.Errorf("%s: the echo does not carry the placeholder:\n%s", u, got)
		}
	}
	mu.Lock()
	want := []string{
		fmt.Sprintf("p1 /p1?q=%s auth=Bearer %s other=%s body=token=%s", ph, secret, ph, ph),
		fmt.Sprintf("p2 /p2?q=%s auth=Bearer %s other=%s body=token=%s", ph, ph, ph, ph),
		fmt.Sprintf("p3 /p3?q=%s auth=Bearer %s other=%s body=token=%s", ph, ph, ph, ph),
	}
	if strings.Join(log, "\n") != strings.Join(want, "\n") {
		t.Errorf("the upstreams saw\n%s\nwant\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
	mu.Unlock()

	// A protocol moat cannot read, to another port of the bound host, is refused.
	c := r.dial(t, netip.AddrPortFrom(ip, lineEcho))
	defer c.Close()
	io.WriteString(c, "hello\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Errorf("a line protocol to bound.test:%d got an answer: %q", lineEcho, line)
	}
}
