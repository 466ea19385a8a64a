package daemon_test

import (
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/testutil"
)

// TestCredentialReflection (issue 10, item 2): a bound host that keeps request data and
// serves it back cannot be used to read the secret. The sandbox puts its placeholder in
// Authorization, in another header, the query string and the body: the upstream's log
// has the value in Authorization only and the placeholder everywhere else. The upstream
// then serves the value it stored back, raw, URL-escaped, hex and base64 (three
// alignments inside a longer run, both alphabets), in headers and body, plain and
// gzipped, on the bound port and on another port of the same host: the sandbox sees no
// form of the value.
func TestCredentialReflection(t *testing.T) {
	const secret = "keep/secret+0f3c9a7e=5b1d~77"
	in := newInternet(t)
	up := testutil.NewUpstreamCA(t, "keep.test")
	var mu sync.Mutex
	stored := ""
	handler := func(port string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			in.log.add("keep port=%s path=%s q=%s other=%s auth=%s body=%s", port, r.URL.Path, r.URL.Query().Get("q"),
				r.Header.Get("X-Other"), r.Header.Get("Authorization"), body)
			mu.Lock()
			defer mu.Unlock()
			if r.URL.Path == "/store" {
				stored = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
				return
			}
			var b strings.Builder
			for i, f := range reflectedForms(stored) {
				fmt.Fprintf(&b, "form%d=%s\n", i, f)
				w.Header().Add("X-Form", f)
			}
			if strings.HasSuffix(r.URL.Path, ".gz") {
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				io.WriteString(zw, b.String())
				zw.Close()
				return
			}
			io.WriteString(w, b.String())
		}
	}
	bound := tlsServe(t, up, handler("bound"))
	other := tlsServe(t, up, handler("other"))
	hosts := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hosts, []byte("127.0.0.4 keep.test\n"), 0o644)
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		data, _ := os.ReadFile(hosts)
		extra, _ := egress.ParseHosts(data)
		for k, v := range extra {
			c.EgressHosts[k] = v
		}
		c.EgressCA = upstreamCAFile(t, up)
	})
	ctx := context.Background()
	scope := &v1.SecretScope{Hosts: []string{fmt.Sprintf("keep.test:%d", bound)}}
	if err := e.c.SetSecret(ctx, "KEEP_TOKEN", secret, scope); err != nil {
		t.Fatal(err)
	}
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{
				Runtime:     rt,
				Policy:      &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"keep.test"}}}},
				Credentials: []v1.Credential{{Secret: "KEEP_TOKEN", Hosts: []string{fmt.Sprintf("keep.test:%d", bound)}}},
			})
			ph := strings.TrimSpace(e.mustSh(sb.ID, `echo "$KEEP_TOKEN"`))
			if !strings.HasPrefix(ph, "moat-placeholder-") {
				t.Fatalf("KEEP_TOKEN inside = %q", ph)
			}
			e.mustSh(sb.ID, fmt.Sprintf(`curl -sS --max-time 10 -H "Authorization: Bearer $KEEP_TOKEN" -H "X-Other: $KEEP_TOKEN" --data "body=$KEEP_TOKEN" "https://keep.test:%d/store?q=$KEEP_TOKEN"`, bound))
			want := fmt.Sprintf("keep port=bound path=/store q=%s other=%s auth=Bearer %s body=body=%s", ph, ph, secret, ph)
			if !in.log.contains(want) {
				t.Errorf("the upstream's log lacks %q: %q", want, in.log.all())
			}
			for _, l := range in.log.all() {
				if strings.Contains(strings.Replace(l, " auth=Bearer "+secret+" ", " ", 1), secret) {
					t.Errorf("the value reached the upstream outside Authorization: %q", l)
				}
			}
			for _, u := range []string{
				fmt.Sprintf("https://keep.test:%d/reflect", bound),
				fmt.Sprintf("https://keep.test:%d/reflect.gz", bound),
				fmt.Sprintf("https://keep.test:%d/reflect", other),
				fmt.Sprintf("https://keep.test:%d/reflect.gz", other),
			} {
				out := e.mustSh(sb.ID, fmt.Sprintf(`curl -sS --max-time 10 --compressed -D - %s`, u))
				if !strings.Contains(out, "form0="+ph+"\n") {
					t.Errorf("%s: the raw echo is not the placeholder:\n%s", u, out)
				}
				for i, f := range reflectedForms(secret) {
					if strings.Contains(out, f) {
						t.Errorf("%s: form %d of the value (%q) reached the sandbox:\n%s", u, i, f, out)
					}
				}
				for _, f := range base64Pieces(secret) {
					if strings.Contains(out, f) {
						t.Errorf("%s: the base64 of the value (%q) reached the sandbox:\n%s", u, f, out)
					}
				}
			}
		})
	}
}

// reflectedForms is what the test's upstream serves back of a credential v.
func reflectedForms(v string) []string {
	forms := []string{v, url.QueryEscape(v), url.PathEscape(v), hex.EncodeToString([]byte(v)), strings.ToUpper(hex.EncodeToString([]byte(v)))}
	for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		forms = append(forms, e.EncodeToString([]byte(v)))
		// In a longer run, in each of the three alignments (git's Basic credentials are
		// base64("x-access-token:" + token)).
		for _, pre := range []string{"x-access-token:", "a:", "ab:"} {
			forms = append(forms, e.EncodeToString([]byte(pre+v+"\n")))
		}
	}
	return forms
}

// base64Pieces are, for each alignment and alphabet, 12 characters from the middle of the
// base64 of v inside a longer run: characters that v alone determines, which must not reach
// the sandbox in any form of reflectedForms.
func base64Pieces(v string) []string {
	var out []string
	for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for _, pre := range []string{"x-access-token:", "a:", "ab:"} {
			run := e.EncodeToString([]byte(pre + v + "\n"))
			start := (len(pre) + 2) / 3 * 4 // the first character after pre's groups
			out = append(out, run[start:start+12])
		}
	}
	return out
}
