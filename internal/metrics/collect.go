package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector reads state that lives elsewhere at scrape time: sandboxes by state and
// runtime, approvals by kind and state, warm pools.
type stateCollector struct{ src Sources }

var (
	descSandboxes = prometheus.NewDesc("moat_sandboxes", "Sandbox records by state and runtime (read from the store at scrape time).", []string{"state", "runtime"}, nil)
	descApprovals = prometheus.NewDesc("moat_approvals", "Approvals by kind and state (read from the store at scrape time).", []string{"kind", "state"}, nil)
	descPoolReady = prometheus.NewDesc("moat_warm_pool_ready", "Warm sandboxes ready, by runtime and template.", []string{"runtime", "template"}, nil)
	descPoolWant  = prometheus.NewDesc("moat_warm_pool_target", "Warm sandboxes wanted, by runtime and template.", []string{"runtime", "template"}, nil)
	descPoolHits  = prometheus.NewDesc("moat_warm_pool_hits_total", "Creates served from a warm pool.", []string{"runtime", "template"}, nil)
	descPoolMiss  = prometheus.NewDesc("moat_warm_pool_misses_total", "Creates that fit a warm pool and found it empty.", []string{"runtime", "template"}, nil)
	descPoolFail  = prometheus.NewDesc("moat_warm_pool_handover_failures_total", "Warm hand-overs that failed (the create went cold).", []string{"runtime", "template"}, nil)
	descScrapeErr = prometheus.NewDesc("moat_metrics_collect_errors_total", "Scrape-time collections that failed in this scrape, by source.", []string{"source"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descApprovals, descPoolReady, descPoolWant, descPoolHits, descPoolMiss, descPoolFail, descScrapeErr} {
		ch <- d
	}
}

// knownStates are always reported (0 when none), so a dashboard shows a flat line rather
// than no data.
var knownStates = []string{"creating", "running", "paused", "stopped", "deleting"}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fail := func(source string, err error) {
		if c.src.Log != nil {
			c.src.Log.Warn("metrics: collecting", "source", source, "err", err)
		}
		ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, 1, source)
	}
	if f := c.src.Sandboxes; f != nil {
		counts, err := f(ctx)
		if err != nil {
			fail("sandboxes", err)
		} else {
			seen := map[StateRuntime]bool{}
			for k, n := range counts {
				seen[k] = true
				ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(n), k.State, k.Runtime)
			}
			for _, st := range knownStates {
				if k := (StateRuntime{st, ""}); !seen[k] && !anyState(counts, st) {
					ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, 0, st, "")
				}
			}
		}
	}
	if f := c.src.Approvals; f != nil {
		counts, err := f(ctx)
		if err != nil {
			fail("approvals", err)
		} else {
			for k, n := range counts {
				ch <- prometheus.MustNewConstMetric(descApprovals, prometheus.GaugeValue, float64(n), k.Kind, k.State)
			}
		}
	}
	if f := c.src.Pools; f != nil {
		for _, p := range f() {
			ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(p.Ready), p.Runtime, p.Template)
			ch <- prometheus.MustNewConstMetric(descPoolWant, prometheus.GaugeValue, float64(p.Want), p.Runtime, p.Template)
			ch <- prometheus.MustNewConstMetric(descPoolHits, prometheus.CounterValue, float64(p.Hits), p.Runtime, p.Template)
			ch <- prometheus.MustNewConstMetric(descPoolMiss, prometheus.CounterValue, float64(p.Misses), p.Runtime, p.Template)
			ch <- prometheus.MustNewConstMetric(descPoolFail, prometheus.CounterValue, float64(p.Failed), p.Runtime, p.Template)
		}
	}
}

func anyState(counts map[StateRuntime]int, st string) bool {
	for k := range counts {
		if k.State == st {
			return true
		}
	}
	return false
}
