package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
)

// sandboxView prints what a process in a sandbox sees of its set-up: its environment
// (sorted), identity, limits and the files moat writes (trust store, resolver, hosts).
// The interception CA differs per sandbox: it is summarised by its subject's shape and
// by whether the bundle is the system's roots plus it.
const sandboxView = `
echo "== env"; env | sort
echo "== id"; id; pwd; umask; ulimit -n -u
echo "== status"; grep -E '^(Cap|Seccomp|NoNewPrivs)' /proc/self/status
echo "== /etc/moat"; ls -l /etc/moat 2>&1 | awk '{print $1, $3, $4, $NF}'
if [ -e /etc/moat/ca.pem ]; then
  openssl x509 -noout -subject -in /etc/moat/ca.pem
  cat /etc/ssl/certs/ca-certificates.crt /etc/moat/ca.pem | cmp - /etc/moat/ca-bundle.pem && echo "bundle = system + CA"
fi
for f in /etc/hosts /etc/resolv.conf /etc/hostname; do echo "== $f"; cat $f; done
echo "== hostname"; hostname
`

// TestWarmMatchesCold: a sandbox handed over from the warm pool is set up exactly like
// one built for the same request: the same environment for the default user and root
// (the trust variables included), the same trust files, resolver and hosts files; and
// HTTPS to a host under an HTTP rule (moat terminates its TLS) works from it with curl
// and Python, as the upstream's log shows.
func TestWarmMatchesCold(t *testing.T) {
	in := newInternet(t)
	port, caFile := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("l7 %s %s", r.Method, r.URL.Path)
		fmt.Fprintf(w, "served %s\n", r.URL.Path)
	}), "api.test")
	configure := func(c *daemon.Config) {
		in.configure(c)
		c.EgressHosts["api.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
		c.EgressCA = caFile
	}
	warmEnv := newEnvWith(t, func(c *daemon.Config) { configure(c); c.Warm = map[string]int{"runc": 1} })
	coldEnv := newEnvWith(t, configure)
	testutil.WaitFor(t, 60*time.Second, "the warm pool to fill", func() bool { return len(warmEnv.warmIDs()) == 1 })
	warm := warmEnv.warmIDs()[0]

	req := v1.CreateSandboxRequest{
		Env:    map[string]string{"OWNER": "me"},
		Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {HTTP: []string{"api.test GET /allowed/"}}}},
	}
	// The client's create, not e.create: the pool serves the default disk size.
	pooled, err := warmEnv.c.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if pooled.ID != warm {
		t.Fatalf("the create did not claim warm sandbox %s (got %s)", warm, pooled.ID)
	}
	cold, err := coldEnv.c.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	sameView(t, warmEnv, pooled.ID, coldEnv, cold.ID, "SSL_CERT_FILE=/etc/moat/ca-bundle.pem", "bundle = system + CA")

	// HTTPS to the inspected host, through moat's TLS termination.
	base := fmt.Sprintf("https://api.test:%d/allowed/", port)
	if out := warmEnv.mustSh(pooled.ID, "curl -sS --max-time 10 "+base+"curl"); !strings.Contains(out, "served /allowed/curl") {
		t.Errorf("curl from the pooled sandbox: %q", out)
	}
	py := `python3 -c 'import urllib.request; print(urllib.request.urlopen("` + base + `python", timeout=10).read().decode())'`
	if out := warmEnv.mustSh(pooled.ID, py); !strings.Contains(out, "served /allowed/python") {
		t.Errorf("python from the pooled sandbox: %q", out)
	}
	for _, p := range []string{"curl", "python"} {
		if !in.log.contains("l7 GET /allowed/" + p) {
			t.Errorf("the upstream did not receive the %s request: %v", p, in.log.all())
		}
	}
}

// lineDiff lists the lines of want missing from got (-) and those of got missing from
// want (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}

// TestWarmMatchesColdTemplate is TestWarmMatchesCold for a template that is not the host's
// ("debian", the test's tools image), under every runtime: the sandbox a create claims
// from the template's pool is set up exactly like one built for the same request.
func TestWarmMatchesColdTemplate(t *testing.T) {
	rts := runtimesUnderTest(t)
	warmEnv := newEnvWith(t, func(c *daemon.Config) {
		c.Warm = map[string]int{}
		for _, rt := range rts {
			c.Warm[rt+":debian"] = 1
		}
	})
	coldEnv := newEnv(t)
	importToolsImage(t, warmEnv, "debian", "v1")
	importToolsImage(t, coldEnv, "debian", "v1")
	for _, rt := range rts {
		warmEnv.run(rt, func(t *testing.T, _ *env) {
			testutil.WaitFor(t, 90*time.Second, "the warm pool to fill", func() bool { return len(warmEnv.warmOf(rt)) == 1 })
			warm := warmEnv.warmOf(rt)[0]
			req := v1.CreateSandboxRequest{
				Runtime: rt, Template: "debian",
				Env:    map[string]string{"OWNER": "me"},
				Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {HTTP: []string{"api.test GET /allowed/"}}}},
			}
			pooled, err := warmEnv.c.Create(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if pooled.ID != warm || warmEnv.poolStat(rt, "debian").Hits != 1 {
				t.Fatalf("the create did not claim warm sandbox %s (got %s; %+v)", warm, pooled.ID, warmEnv.poolStat(rt, "debian"))
			}
			cold, err := coldEnv.c.Create(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			sameView(t, warmEnv, pooled.ID, coldEnv, cold.ID, "SSL_CERT_FILE=/etc/moat/ca-bundle.pem", "OWNER=me", "== /etc/hosts")
			for _, e := range []*env{warmEnv, coldEnv} {
				for _, id := range []string{pooled.ID, cold.ID} {
					_ = e.c.Delete(context.Background(), id)
				}
			}
		})
	}
}

// sameView fails t unless pooled sandbox pid (in pe) and cold sandbox cid (in ce) show the
// same sandboxView as the default user and as root (each one's own ID replaced), and the
// cold one's view holds every want (else the comparison would prove nothing).
func sameView(t *testing.T, pe *env, pid string, ce *env, cid string, want ...string) {
	t.Helper()
	view := func(e *env, id, user string) string {
		r := e.sh(id, user, sandboxView)
		if r.code != 0 {
			t.Fatalf("view of %s as %q: %+v", id, user, r)
		}
		// Per-sandbox values: the sandbox's ID (the CA's subject names it).
		return strings.ReplaceAll(r.stdout, id, "<id>")
	}
	for _, user := range []string{"", "root"} {
		p, c := view(pe, pid, user), view(ce, cid, user)
		if p != c {
			t.Errorf("as %q, the pooled sandbox differs from a cold one:\n%s", user, lineDiff(c, p))
		}
		for _, w := range want {
			if !strings.Contains(c, w) {
				t.Errorf("the cold sandbox's view has no %q (the comparison proves nothing):\n%s", w, c)
			}
		}
	}
}
