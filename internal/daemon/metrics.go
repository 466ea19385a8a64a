package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/moatdev/moat/internal/metrics"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/store"
)

// newMetrics builds the daemon's metrics on a registry of its own: the API server, the
// egress manager observe into it, and its collectors read the store and the warm pools
// at scrape time. GET /metrics serves it (apiserver/metrics.go: the unix socket; TCP
// with cfg.MetricsToken, or from loopback without one).
func (d *Daemon) newMetrics(st *store.Store) *metrics.Metrics {
	return metrics.New(prometheus.NewRegistry(), metrics.Sources{
		Sandboxes: st.CountSandboxes,
		Approvals: st.CountApprovals,
		Pools: func() []metrics.Pool {
			if d.Manager == nil {
				return nil
			}
			return poolsOf(d.Manager.PoolStats())
		},
		Log: d.log.With("component", "metrics"),
	})
}

func poolsOf(stats []sandbox.PoolStat) []metrics.Pool {
	out := make([]metrics.Pool, len(stats))
	for i, p := range stats {
		out[i] = metrics.Pool{Runtime: p.Runtime, Template: p.Template, Want: p.Want, Ready: p.Ready, Hits: p.Hits, Misses: p.Misses, Failed: p.Failed}
	}
	return out
}
