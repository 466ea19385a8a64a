package apiserver

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// MaxTimeout is the longest sandbox timeout a request may ask for.
const MaxTimeout = 365 * 24 * time.Hour

// timeoutSeconds converts a request's timeout in seconds, refusing negative values and
// values beyond MaxTimeout (which would also overflow a time.Duration far above it).
// Zero stays zero: the caller decides what no timeout means.
func timeoutSeconds(field string, n int64) (time.Duration, error) {
	if n < 0 {
		return 0, fmt.Errorf("%s: %d: must not be negative: %w", field, n, errdefs.ErrInvalidArgument)
	}
	if n > int64(MaxTimeout/time.Second) {
		return 0, fmt.Errorf("%s: %d seconds: at most %d (365 days): %w", field, n, int64(MaxTimeout/time.Second), errdefs.ErrInvalidArgument)
	}
	return time.Duration(n) * time.Second, nil
}

// routeMethods are the methods the route table can serve.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods lists the methods some route (other than the catch-alls) serves for r's
// path: a request that reached a catch-all with another method gets 405 and this Allow
// list instead of 404.
func (s *Server) allowedMethods(r *http.Request) []string {
	var out []string
	for _, m := range routeMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" && pattern != "/v1/" {
			out = append(out, m)
		}
	}
	return out
}

// notAllowed answers 405 with an Allow header, through fail, when a route serves r's path
// with other methods; it reports whether it did.
func (s *Server) notAllowed(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, error)) bool {
	allow := s.allowedMethods(r)
	if len(allow) == 0 {
		return false
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	fail(w, fmt.Errorf("%s %s: this route takes %s: %w", r.Method, r.URL.Path, strings.Join(allow, ", "), errdefs.ErrMethodNotAllowed))
	return true
}
