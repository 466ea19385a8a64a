package apiserver

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Observer is told of every API request (metrics.go in internal/metrics implements it;
// nil: none). route is the route table's pattern, never a path: labels stay bounded.
type Observer interface {
	APIRequest(route string, code int, d time.Duration, errClass string)
	SandboxCreated(api string, ok bool, d time.Duration)
	Exec(api string, ok bool, d time.Duration)
}

// metricsConfig is the /metrics endpoint (SetMetrics).
type metricsConfig struct {
	handler http.Handler // nil: no /metrics
	token   []byte       // nil: TCP scrapes only from loopback addresses
	obs     Observer
}

// SetMetrics serves h at GET /metrics and reports requests to obs. Who may scrape: the
// unix socket always; on TCP listeners, with a token, a request bearing it
// (Authorization: Bearer <token>) from any address, and without one only a loopback
// peer. API keys do not open /metrics: it is operator data across every key's sandboxes.
func (s *Server) SetMetrics(h http.Handler, token []byte, obs Observer) {
	s.metrics = metricsConfig{handler: h, token: token, obs: obs}
}

// MetricsAccess decides whether a TCP scrape may proceed: nil, or an error of class
// ErrUnauthenticated (no or a wrong token) or ErrPermissionDenied (no token configured
// and a non-loopback peer).
func MetricsAccess(token []byte, remoteAddr, authorization string) error {
	if len(token) > 0 {
		given, ok := strings.CutPrefix(authorization, "Bearer ")
		if !ok || given == "" {
			return fmt.Errorf("/metrics needs the metrics token (Authorization: Bearer <token>): %w", errdefs.ErrUnauthenticated)
		}
		if subtle.ConstantTimeCompare([]byte(given), token) != 1 {
			return fmt.Errorf("wrong metrics token: %w", errdefs.ErrUnauthenticated)
		}
		return nil
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Unmap().IsLoopback() {
		return fmt.Errorf("/metrics is served to loopback peers only unless the daemon has a metrics token (moat serve --metrics-token FILE): %w", errdefs.ErrPermissionDenied)
	}
	return nil
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request, socket bool) {
	if s.metrics.handler == nil {
		writeError(w, fmt.Errorf("metrics are not enabled on this daemon: %w", errdefs.ErrNotFound))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, fmt.Errorf("%s /metrics: %w", r.Method, errdefs.ErrMethodNotAllowed))
		return
	}
	if !socket {
		if err := MetricsAccess(s.metrics.token, r.RemoteAddr, r.Header.Get("Authorization")); err != nil {
			writeError(w, err)
			return
		}
	}
	s.metrics.handler.ServeHTTP(w, r)
}

// routeOf is the label a request is counted under: its route pattern, or the E2B
// gateway's fixed names.
func (s *Server) routeOf(r *http.Request) string {
	switch {
	case r.Header.Get(e2bSandboxHeader) != "":
		return "e2b envd gateway"
	case r.URL.Path == "/files" && r.URL.Query().Get("signature") != "":
		return "e2b signed files"
	case r.URL.Path == "/metrics":
		return "GET /metrics"
	case s.isPreview(r): // previews.go
		return "preview"
	}
	_, p := s.mux.Handler(r)
	return p
}

// instrument wraps the gated API: each request's route, status, duration and error class
// go to the observer, and process starts and creates to their histograms.
func (s *Server) instrument(h http.Handler) http.Handler {
	obs := s.metrics.obs
	if obs == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := s.routeOf(r)
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		h.ServeHTTP(rec, r)
		d := time.Since(start)
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		obs.APIRequest(route, code, d, rec.class)
		ok := code < 400
		switch {
		case route == "POST /v1/sandboxes":
			obs.SandboxCreated("native", ok, d)
		case route == "POST /sandboxes":
			obs.SandboxCreated("e2b", ok, d)
		case strings.HasSuffix(r.URL.Path, "/process.Process/Start"):
			api := "native"
			if strings.HasPrefix(route, "e2b") {
				api = "e2b"
			}
			obs.Exec(api, ok, d)
		}
	})
}

// statusRecorder notes the status written and the error class writeError gave it.
type statusRecorder struct {
	http.ResponseWriter
	code  int
	class string
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Flush keeps streaming (envd output) streaming; Unwrap lets http.ResponseController
// reach the connection (hijack for upgrades, deadlines).
func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// noteErrorClass tells an instrumenting writer the class of the error being answered.
func noteErrorClass(w http.ResponseWriter, class string) {
	if r, ok := w.(*statusRecorder); ok && r.class == "" {
		r.class = class
	}
}
