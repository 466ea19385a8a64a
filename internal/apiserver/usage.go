package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/usage"
)

// Metering (issue 16): GET /v1/usage, and the count of API calls by key.

// UsageLedger reads the usage ledger (*store.Store through the daemon's adapter): one row
// per sandbox in [since, until) (zero since: from the beginning), of one API key's
// sandboxes when owner is not nil, and the API calls by key.
type UsageLedger interface {
	Usage(ctx context.Context, since, until time.Time, owner *string) ([]v1.UsageRow, map[string]int64, error)
}

// SetUsage enables GET /v1/usage on ledger and counts every API call into calls (either
// may be nil).
func (s *Server) SetUsage(ledger UsageLedger, calls *usage.Calls) {
	s.usageLedger, s.calls = ledger, calls
}

func (s *Server) usageRoutes() []route {
	return []route{{"GET /v1/usage", s.getUsage, byKey}}
}

// countCall counts one API call of caller c.
func (s *Server) countCall(c sandbox.Caller) {
	if s.calls != nil {
		s.calls.Add(c.APIKey)
	}
}

// getUsage serves GET /v1/usage?since=&until=&by=: the operator and admin keys see every
// key's usage, an API key its own (its sandboxes and its calls).
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) {
	if s.usageLedger == nil {
		writeError(w, fmt.Errorf("metering is not enabled on this daemon: %w", errdefs.ErrUnavailable))
		return
	}
	now := time.Now().UTC()
	q := r.URL.Query()
	since, err := usage.ParseTime(q.Get("since"), now)
	if err != nil {
		writeError(w, fmt.Errorf("since: %w: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	until, err := usage.ParseTime(q.Get("until"), now)
	if err != nil {
		writeError(w, fmt.Errorf("until: %w: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	if !until.IsZero() && !since.IsZero() && !until.After(since) {
		writeError(w, fmt.Errorf("until (%s) is not after since (%s): %w", until.Format(time.RFC3339), since.Format(time.RFC3339), errdefs.ErrInvalidArgument))
		return
	}
	by, err := usage.ParseBy(q.Get("by"))
	if err != nil {
		writeError(w, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	var owner *string
	if c := sandbox.CallerFrom(r.Context()); !c.Operator && !c.Admin { // admin keys: every key's (owners.go)
		owner = &c.APIKey
	}
	rows, calls, err := s.usageLedger.Usage(r.Context(), since, until, owner)
	if err != nil {
		writeError(w, err)
		return
	}
	grouped, err := usage.Group(rows, by)
	if err != nil {
		writeError(w, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	rep := v1.UsageReport{Until: until, By: by, Rows: grouped, APICalls: calls}
	if rep.Until.IsZero() {
		rep.Until = now
	}
	if rep.Rows == nil {
		rep.Rows = []v1.UsageRow{}
	}
	if !since.IsZero() {
		rep.Since = &since
	}
	writeJSON(w, http.StatusOK, rep)
}
