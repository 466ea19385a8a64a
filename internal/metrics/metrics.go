// Package metrics is moat's Prometheus instrumentation: one Metrics value holds every
// family on a registry passed in (never the global default one), and is what the API
// server, the sandbox manager and the egress manager are given as their observers. Every
// method is nil-safe: a nil *Metrics observes nothing. State that already lives somewhere
// (sandboxes by state and runtime, approvals by kind and state, warm pools) is read at
// scrape time by collectors, never cached in counters that could drift.
//
// Labels are bounded: route patterns (never sandbox ids or paths), errdefs classes,
// verdicts and reason classes from fixed tables, runtimes and states.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Source is what the scrape-time collectors read. Any method may be left nil in
// Sources (that family is then absent).
type Sources struct {
	// Sandboxes counts sandbox records by state and runtime (from the store).
	Sandboxes func(ctx context.Context) (map[StateRuntime]int, error)
	// Approvals counts approvals by kind and state (from the store).
	Approvals func(ctx context.Context) (map[KindState]int, error)
	// Pools reports the warm pools' sizes and their hit and miss counters.
	Pools func() []Pool
	// Log receives collection errors (nil: discarded).
	Log *slog.Logger
}

// StateRuntime keys the sandboxes gauge.
type StateRuntime struct{ State, Runtime string }

// KindState keys the approvals gauge.
type KindState struct{ Kind, State string }

// Pool is one warm pool as the collector sees it.
type Pool struct {
	Runtime, Template    string
	Want, Ready          int
	Hits, Misses, Failed int64
}

// Metrics holds moat's metric families. The zero value is not usable; a nil *Metrics is
// (it observes nothing).
type Metrics struct {
	reg *prometheus.Registry

	apiSeconds    *prometheus.HistogramVec
	apiErrors     *prometheus.CounterVec
	createSeconds *prometheus.HistogramVec
	execSeconds   *prometheus.HistogramVec
	proxyConns    *prometheus.CounterVec
	httpRequests  *prometheus.CounterVec
	dnsQueries    *prometheus.CounterVec
	injections    *prometheus.CounterVec
}

// Latency buckets: API requests and exec starts are mostly milliseconds; creates are
// tens of milliseconds (warm) to seconds (cold, runsc).
var (
	apiBuckets    = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	createBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 16, 32, 64}
)

// New registers moat's families, the Go runtime and process collectors and the
// scrape-time collectors of src on reg.
func New(reg *prometheus.Registry, src Sources) *Metrics {
	m := &Metrics{
		reg: reg,
		apiSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "moat_api_request_duration_seconds", Help: "API requests by route pattern, method and status code.", Buckets: apiBuckets,
		}, []string{"route", "code"}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_api_errors_total", Help: "Errors answered at the API edge, by error class (errdefs).",
		}, []string{"class"}),
		createSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "moat_sandbox_create_duration_seconds", Help: "Sandbox creates through the API (native, e2b), by outcome (ok, error): the whole request.", Buckets: createBuckets,
		}, []string{"api", "outcome"}),
		execSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "moat_exec_duration_seconds", Help: "Process starts through envd (native and E2B), whole request including streamed output, by outcome.", Buckets: createBuckets,
		}, []string{"api", "outcome"}),
		proxyConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_egress_connections_total", Help: "Connections decided by the egress proxy, by verdict (allowed, blocked, ask) and reason class.",
		}, []string{"verdict", "reason"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_egress_decisions_total", Help: "HTTP-rule and git-gate decisions, by protocol, verdict and reason class.",
		}, []string{"proto", "verdict", "reason"}),
		dnsQueries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_dns_queries_total", Help: "DNS queries answered by sandboxes' resolvers, by verdict.",
		}, []string{"verdict"}),
		injections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "moat_credential_injections_total", Help: "Credentials injected into sandboxes' requests by the egress proxy.",
		}, []string{}),
	}
	reg.MustRegister(m.apiSeconds, m.apiErrors, m.createSeconds, m.execSeconds, m.proxyConns,
		m.httpRequests, m.dnsQueries, m.injections,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&stateCollector{src: src})
	// Counters with no labels (or known ones) exist from the start: a dashboard's rate()
	// sees 0, not "no data".
	m.injections.WithLabelValues()
	for _, v := range []string{"allowed", "blocked"} {
		m.dnsQueries.WithLabelValues(v)
	}
	return m
}

// Handler serves the registry in the Prometheus text format (or OpenMetrics when asked).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// APIRequest records one API request: its route pattern (as registered in the route
// table; "" for none), status code, duration and, for an error answer, its class.
func (m *Metrics) APIRequest(route string, code int, d time.Duration, errClass string) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	m.apiSeconds.WithLabelValues(route, statusText(code)).Observe(d.Seconds())
	if errClass != "" {
		m.apiErrors.WithLabelValues(errClass).Inc()
	}
}

// Exec records one process start through envd (api: "native" or "e2b").
func (m *Metrics) Exec(api string, ok bool, d time.Duration) {
	if m == nil {
		return
	}
	m.execSeconds.WithLabelValues(api, outcome(ok)).Observe(d.Seconds())
}

// SandboxCreated records one create through the API (api: "native" or "e2b").
func (m *Metrics) SandboxCreated(api string, ok bool, d time.Duration) {
	if m == nil {
		return
	}
	m.createSeconds.WithLabelValues(api, outcome(ok)).Observe(d.Seconds())
}

// ProxyConn records one connection decided by the egress proxy.
func (m *Metrics) ProxyConn(allowed, ask bool, rule, reason string) {
	if m == nil {
		return
	}
	m.proxyConns.WithLabelValues(Verdict(allowed, ask), ReasonClass(rule, reason)).Inc()
}

// EgressDecision records an HTTP-rule or git-gate decision (proto "http" or "git").
func (m *Metrics) EgressDecision(proto string, allowed bool, rule, reason string) {
	if m == nil {
		return
	}
	if proto != "http" && proto != "git" {
		proto = "other"
	}
	m.httpRequests.WithLabelValues(proto, Verdict(allowed, false), ReasonClass(rule, reason)).Inc()
}

// DNSQuery records one DNS query a sandbox's resolver answered.
func (m *Metrics) DNSQuery(allowed bool) {
	if m == nil {
		return
	}
	m.dnsQueries.WithLabelValues(Verdict(allowed, false)).Inc()
}

// CredentialInjected records one credential injected into a request.
func (m *Metrics) CredentialInjected() {
	if m == nil {
		return
	}
	m.injections.WithLabelValues().Inc()
}

func outcome(ok bool) string {
	if ok {
		return "ok"
	}
	return "error"
}

// statusText is the code label: the number, from a fixed set (anything odd is "other").
func statusText(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	const digits = "0123456789"
	return string([]byte{digits[code/100], digits[code/10%10], digits[code%10]})
}
