package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/testutil"
)

// scraper fetches /metrics over the daemon's unix socket or a TCP address.
type scraper struct {
	client *http.Client
	url    string
	token  string
}

func unixScraper(sock string) scraper {
	return scraper{url: "http://moat/metrics", client: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
}

// get returns the status and body of one scrape.
func (s scraper) get(t testing.TB) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url, nil)
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", s.url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// families scrapes and parses with the Prometheus text parser.
func (s scraper) families(t testing.TB) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	code, body := s.get(t)
	if code != http.StatusOK {
		t.Fatalf("scrape %s: %d %s", s.url, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return fams, body
}

// sample is the value of the series of family name whose labels include want (a
// histogram's sample count); ok is false when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	total, found := 0.0, false
next:
	for _, m := range f.Metric {
		for k, v := range want {
			match := false
			for _, lp := range m.Label {
				match = match || lp.GetName() == k && lp.GetValue() == v
			}
			if !match {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total, found
}

// TestMetrics runs a real daemon and scrapes /metrics: the families exist and move with
// what happens (a create, an exec, a blocked connection, a credential injection, an API
// error), who may scrape (the unix socket; TCP only with the metrics token), and the
// canary secret used through a credential binding is nowhere in the output.
func TestMetrics(t *testing.T) {
	const canary = "metrics-canary-7d41c0ffee9b2a55"
	const token = "metrics-token-0123456789abcdef"
	in := newInternet(t)
	up := testutil.NewUpstreamCA(t, "api.test")
	caFile := upstreamCAFile(t, up)
	port := tlsServe(t, up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("cred path=%s auth=%s", r.URL.Path, r.Header.Get("Authorization"))
		fmt.Fprintln(w, "ok")
	}))
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) {
		in.configure(c)
		extra, _ := egress.ParseHosts([]byte("127.0.0.4 api.test\n"))
		for k, v := range extra {
			c.EgressHosts[k] = v
		}
		c.EgressCA = caFile
		c.Listen = addr
		c.MetricsToken = []byte(token)
	})
	ctx := context.Background()
	sock := unixScraper(filepath.Join(e.runDir, "moat.sock"))

	e.run("access", func(t *testing.T, e *env) {
		key, err := e.c.CreateAPIKey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tcp := scraper{client: http.DefaultClient, url: "http://" + addr + "/metrics"}
		for _, c := range []struct {
			name, token string
			want        int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"wrong token", "metrics-token-0123456789abcdeX", http.StatusUnauthorized},
			{"an API key is not the metrics token", key.Key, http.StatusUnauthorized},
			{"the metrics token", token, http.StatusOK},
		} {
			tcp.token = c.token
			if code, body := tcp.get(t); code != c.want {
				t.Errorf("TCP scrape, %s: %d, want %d (%.200s)", c.name, code, c.want, body)
			}
		}
		if code, _ := sock.get(t); code != http.StatusOK {
			t.Errorf("unix socket scrape: %d", code)
		}
	})

	before, _ := sock.families(t)
	for _, name := range []string{
		"moat_sandboxes", "moat_api_request_duration_seconds", "moat_dns_queries_total",
		"moat_credential_injections_total", "go_goroutines", "go_gc_duration_seconds",
		"process_cpu_seconds_total", "process_resident_memory_bytes",
	} {
		if before[name] == nil {
			t.Errorf("family %s missing from the first scrape", name)
		}
	}
	createsBefore, _ := sample(before, "moat_sandbox_create_duration_seconds", map[string]string{"outcome": "ok"})
	runningBefore, _ := sample(before, "moat_sandboxes", map[string]string{"state": "running"})

	if err := e.c.SetSecret(ctx, "API_TOKEN", canary, &v1.SecretScope{Hosts: []string{fmt.Sprintf("api.test:%d", port)}}); err != nil {
		t.Fatal(err)
	}
	sb := e.create(v1.CreateSandboxRequest{
		Runtime:     "runc",
		Policy:      &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"api.test", "allowed.test"}}}},
		Credentials: []v1.Credential{{Secret: "API_TOKEN", Hosts: []string{fmt.Sprintf("api.test:%d", port)}}},
	})
	// A credential injected, a blocked direct connection, an allowed and a refused name.
	e.mustSh(sb.ID, fmt.Sprintf(`curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://api.test:%d/x`, port))
	if !in.log.contains("auth=Bearer " + canary) {
		t.Fatalf("the upstream did not get the secret: %v", in.log.all())
	}
	e.sh(sb.ID, "", "timeout 5 bash -c 'exec 3<>/dev/tcp/192.0.2.7/80' ; getent hosts denied.test; getent hosts allowed.test; true")
	e.d.Egress.Flush()
	if _, err := e.c.Get(ctx, "sb-does-not-exist"); err == nil {
		t.Fatal("get of a missing sandbox succeeded")
	}

	after, body := sock.families(t)
	for _, c := range []struct {
		what, name string
		labels     map[string]string
		min        float64
	}{
		{"creates", "moat_sandbox_create_duration_seconds", map[string]string{"outcome": "ok"}, createsBefore + 1},
		{"running sandboxes", "moat_sandboxes", map[string]string{"state": "running"}, runningBefore + 1},
		{"running runc sandboxes", "moat_sandboxes", map[string]string{"state": "running", "runtime": "runc"}, 1},
		{"execs", "moat_exec_duration_seconds", map[string]string{"api": "native", "outcome": "ok"}, 2},
		{"blocked direct IP", "moat_egress_connections_total", map[string]string{"verdict": "blocked", "reason": "direct_ip"}, 1},
		{"allowed connections", "moat_egress_connections_total", map[string]string{"verdict": "allowed"}, 1},
		{"refused DNS", "moat_dns_queries_total", map[string]string{"verdict": "blocked"}, 1},
		{"allowed DNS", "moat_dns_queries_total", map[string]string{"verdict": "allowed"}, 1},
		{"injections", "moat_credential_injections_total", nil, 1},
		{"not_found errors", "moat_api_errors_total", map[string]string{"class": "not_found"}, 1},
		{"create route", "moat_api_request_duration_seconds", map[string]string{"route": "POST /v1/sandboxes", "code": "201"}, 1},
	} {
		if got, _ := sample(after, c.name, c.labels); got < c.min {
			t.Errorf("%s: %s%v = %v, want ≥ %v", c.what, c.name, c.labels, got, c.min)
		}
	}
	// Labels are route patterns, never sandbox ids.
	if strings.Contains(body, sb.ID) {
		t.Errorf("the scrape names sandbox %s: labels must be bounded", sb.ID)
	}
	for _, s := range []string{canary, token} {
		if strings.Contains(body, s) {
			t.Errorf("the scrape holds %q", s)
		}
	}
	if t.Failed() || os.Getenv("MOAT_METRICS_DUMP") != "" {
		os.Stderr.WriteString(body)
	}

	// Deleted: the gauge is read from the store at scrape time, so it drops at once.
	if err := e.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams, _ := sock.families(t)
		if n, _ := sample(fams, "moat_sandboxes", map[string]string{"state": "running", "runtime": "runc"}); n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running gauge did not drop after the delete")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMetricsWarmPool: a create served from a warm pool moves the hit counter, and the
// pool's ready gauge follows the pool.
func TestMetricsWarmPool(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.Warm = map[string]int{"runc:host": 1} })
	sock := unixScraper(filepath.Join(e.runDir, "moat.sock"))
	pool := map[string]string{"runtime": "runc", "template": "host"}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		fams, _ := sock.families(t)
		if n, _ := sample(fams, "moat_warm_pool_ready", pool); n >= 1 {
			if want, _ := sample(fams, "moat_warm_pool_target", pool); want != 1 {
				t.Errorf("moat_warm_pool_target = %v, want 1", want)
			}
			if hits, ok := sample(fams, "moat_warm_pool_hits_total", pool); !ok || hits != 0 {
				t.Errorf("hits before any create = %v (present %v), want 0", hits, ok)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the warm pool was never reported ready")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Default limits: what a warm pool serves.
	if _, err := e.c.Create(context.Background(), v1.CreateSandboxRequest{Runtime: "runc"}); err != nil {
		t.Fatal(err)
	}
	fams, _ := sock.families(t)
	hits, _ := sample(fams, "moat_warm_pool_hits_total", pool)
	misses, _ := sample(fams, "moat_warm_pool_misses_total", pool)
	if hits != 1 || misses != 0 {
		t.Errorf("after a warm create: hits %v misses %v, want 1 and 0", hits, misses)
	}
}
