package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestReasonClass(t *testing.T) {
	for _, c := range []struct{ rule, reason, want string }{
		{"", "no allow rule matches", "no_rule"},
		{"", "default deny", "no_rule"},
		{"", "no policy", "no_rule"},
		{"*.example.com", "denied by rule *.example.com", "deny_rule"},
		{"pypi.org", "matches allow rule pypi.org", "allow_rule"},
		{"net deny-all", "net deny-all denies every connection", "deny_all"},
		{"net allow-all", "net allow-all allows what no deny rule denies", "allow_all"},
		{"", "direct IP connections are not allowed; name the host or add a CIDR rule", "direct_ip"},
		{"", "IP literal", "direct_ip"},
		{"ask-all", "no rule allows it and the sandbox asks (--ask): held for approval", "ask"},
		{"user bob", "user bob's own rules: no allow rule matches", "user_rule"},
		{"http GET api.test/x", "matches HTTP rule GET api.test/x", "http_rule"},
		{"", "no HTTP rule for api.test allows POST /x", "http_rule"},
		{"invalid", "receive-pack repo: bad", "git_invalid"},
		{"", "invalid host name", "invalid"},
		{"", "reverse lookup of an address with no name", "reverse_lookup"},
		{"", "", "none"},
		{"x", "some new reason nobody classified", "other"},
	} {
		if got := ReasonClass(c.rule, c.reason); got != c.want {
			t.Errorf("ReasonClass(%q, %q) = %q, want %q", c.rule, c.reason, got, c.want)
		}
	}
}

// FuzzReasonClass: whatever a sandbox makes the reasons say (host names end up in them),
// the label is one of the fixed classes.
func FuzzReasonClass(f *testing.F) {
	f.Add("", "no allow rule matches")
	f.Add("user x", "denied by rule evil.example")
	valid := map[string]bool{"none": true, "other": true}
	for _, c := range reasonClasses {
		valid[c.class] = true
	}
	f.Fuzz(func(t *testing.T, rule, reason string) {
		if got := ReasonClass(rule, reason); !valid[got] {
			t.Fatalf("ReasonClass(%q, %q) = %q: not a fixed class", rule, reason, got)
		}
	})
}

func TestNilSafe(t *testing.T) {
	var m *Metrics
	m.APIRequest("x", 200, time.Millisecond, "")
	m.Exec("native", true, time.Millisecond)
	m.SandboxCreated("runc", true, time.Millisecond)
	m.ProxyConn(false, false, "", "no allow rule matches")
	m.EgressDecision("http", true, "", "")
	m.DNSQuery(true)
	m.CredentialInjected()
}

// scrape serves m once and parses it with the Prometheus text parser.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("parsing the scrape: %v\n%s", err, rec.Body)
	}
	return fams
}

func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for k, v := range labels {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestScrape(t *testing.T) {
	counts := map[StateRuntime]int{{"running", "runc"}: 3, {"stopped", "runsc"}: 1}
	m := New(prometheus.NewRegistry(), Sources{
		Sandboxes: func(context.Context) (map[StateRuntime]int, error) { return counts, nil },
		Approvals: func(context.Context) (map[KindState]int, error) {
			return nil, errors.New("database is locked")
		},
		Pools: func() []Pool {
			return []Pool{{Runtime: "runc", Template: "host", Want: 2, Ready: 1, Hits: 5, Misses: 2}}
		},
	})
	m.APIRequest("POST /v1/sandboxes", 201, 30*time.Millisecond, "")
	m.APIRequest("GET /v1/sandboxes/{id}", 404, time.Millisecond, "not_found")
	m.SandboxCreated("native", true, time.Second)
	m.Exec("e2b", true, time.Second)
	m.ProxyConn(false, false, "", "no allow rule matches")
	m.DNSQuery(false)
	m.CredentialInjected()
	m.CredentialInjected()
	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"moat_sandboxes", map[string]string{"state": "running", "runtime": "runc"}, 3},
		{"moat_sandboxes", map[string]string{"state": "paused"}, 0},
		{"moat_api_request_duration_seconds", map[string]string{"route": "POST /v1/sandboxes", "code": "201"}, 1},
		{"moat_api_errors_total", map[string]string{"class": "not_found"}, 1},
		{"moat_sandbox_create_duration_seconds", map[string]string{"api": "native", "outcome": "ok"}, 1},
		{"moat_exec_duration_seconds", map[string]string{"api": "e2b"}, 1},
		{"moat_egress_connections_total", map[string]string{"verdict": "blocked", "reason": "no_rule"}, 1},
		{"moat_dns_queries_total", map[string]string{"verdict": "blocked"}, 1},
		{"moat_dns_queries_total", map[string]string{"verdict": "allowed"}, 0},
		{"moat_credential_injections_total", nil, 2},
		{"moat_warm_pool_hits_total", map[string]string{"runtime": "runc", "template": "host"}, 5},
		{"moat_warm_pool_misses_total", map[string]string{"runtime": "runc", "template": "host"}, 2},
		{"moat_metrics_collect_errors_total", map[string]string{"source": "approvals"}, 1},
	} {
		if got, ok := value(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_resident_memory_bytes", "process_cpu_seconds_total"} {
		if fams[name] == nil {
			t.Errorf("family %s missing", name)
		}
	}
	// Collected at scrape time: a change in the store shows in the next scrape.
	counts = map[StateRuntime]int{{"running", "runc"}: 4}
	if got, _ := value(scrape(t, m), "moat_sandboxes", map[string]string{"state": "running", "runtime": "runc"}); got != 4 {
		t.Errorf("after the store changed: running = %v, want 4", got)
	}
}
