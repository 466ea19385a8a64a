package metrics

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metricName finds the metric names a PromQL expression of the dashboard uses.
var metricName = regexp.MustCompile(`\b(?:moat|go|process)_[a-zA-Z0-9_]+`)

// TestDashboardNames: every metric the Grafana dashboard in docs/ queries is in a scrape
// of a registry where each family has been observed (histograms by their _bucket, _count
// and _sum series).
func TestDashboardNames(t *testing.T) {
	data, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var dash any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	walk(dash)
	if len(exprs) < 20 {
		t.Fatalf("found %d queries in the dashboard; the walk is broken", len(exprs))
	}
	m := New(prometheus.NewRegistry(), Sources{
		Sandboxes: func(context.Context) (map[StateRuntime]int, error) {
			return map[StateRuntime]int{{"running", "runc"}: 1}, nil
		},
		Approvals: func(context.Context) (map[KindState]int, error) {
			return map[KindState]int{{"network", "pending"}: 1}, nil
		},
		Pools: func() []Pool { return []Pool{{Runtime: "runc", Template: "host", Want: 2}} },
	})
	m.APIRequest("GET /v1/sandboxes", 500, time.Millisecond, "internal")
	m.SandboxCreated("native", true, time.Second)
	m.Exec("native", true, time.Second)
	m.ProxyConn(false, false, "", "no allow rule matches")
	m.EgressDecision("http", false, "", "no HTTP rule for x allows GET /")
	m.DNSQuery(true)
	m.CredentialInjected()
	// A collect error, so that family is in the scrape too.
	m2 := New(prometheus.NewRegistry(), Sources{Sandboxes: func(context.Context) (map[StateRuntime]int, error) {
		return nil, context.DeadlineExceeded
	}})
	fams := scrape(t, m)
	for k, v := range scrape(t, m2) {
		if fams[k] == nil {
			fams[k] = v
		}
	}
	names := map[string]bool{}
	for _, e := range exprs {
		for _, n := range metricName.FindAllString(e, -1) {
			names[n] = true
		}
	}
	for n := range names {
		if fams[n] != nil {
			continue
		}
		found := false
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(n, suf); ok && fams[base] != nil && fams[base].GetType() == dto.MetricType_HISTOGRAM {
				found = true
			}
		}
		if !found {
			t.Errorf("the dashboard queries %s, which no scrape has", n)
		}
	}
	t.Logf("%d queries, %d metric names checked", len(exprs), len(names))
}
