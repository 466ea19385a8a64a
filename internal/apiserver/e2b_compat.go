package apiserver

// Details of the E2B API that E2B's own tests found moat answering differently (issue 13
// item 11): the list's default order and its startedAfter and template filters, the
// metrics' start/end range, and what a connect does to the deadline of a sandbox that has
// none. Pure functions, used by e2b.go.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// e2bListFilter is what GET /v2/sandboxes filters and sorts by besides metadata and state.
type e2bListFilter struct {
	desc         bool      // newest first: E2B's default; order=asc is oldest first
	startedAfter time.Time // zero: any
	template     string    // "": any
}

// parseE2BListFilter reads order (asc or desc, default desc), startedAfter (RFC 3339, the
// SDK sends toISOString()) and template. Pure.
func parseE2BListFilter(get func(string) string) (e2bListFilter, error) {
	f := e2bListFilter{desc: true, template: get("template")}
	switch o := get("order"); o {
	case "", "desc":
	case "asc":
		f.desc = false
	default:
		return f, fmt.Errorf("order %q: want asc or desc: %w", o, errdefs.ErrInvalidArgument)
	}
	if v := get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, fmt.Errorf("startedAfter %q: want an RFC 3339 time (e.g. 2026-12-01T12:00:00Z): %w", v, errdefs.ErrInvalidArgument)
		}
		f.startedAfter = t
	}
	return f, nil
}

// matches: started at or after startedAfter, and of template (its E2B name, e.g. base, or
// the moat template it maps to). Pure.
func (f e2bListFilter) matches(sb *sandbox.Sandbox) bool {
	if !f.startedAfter.IsZero() && sb.CreatedAt.Before(f.startedAfter) {
		return false
	}
	return f.template == "" || f.template == e2bTemplateID(sb) || f.template == sb.Template
}

// e2bConnectDeadline decides what a connect does to a sandbox's deadline, from whether it
// resumed the sandbox, its deadline (expires, nil: none), its timeout (0: it never had
// one: a native sandbox made without) and the timeout the request asked for (0: none).
// A sandbox that never had a timeout gets one only when the request names it; otherwise
// a resumed sandbox gets its timeout again from now, and a running one's deadline only
// moves later. Pure.
func e2bConnectDeadline(resumed bool, expires *time.Time, timeout, asked time.Duration, now time.Time) (time.Duration, bool) {
	d := timeout
	if asked > 0 {
		d = asked
	}
	switch {
	case d <= 0:
		return 0, false
	case resumed:
		return d, true
	case expires == nil:
		return d, asked > 0
	}
	return d, now.Add(d).After(*expires)
}

// metricsRange reads GET /sandboxes/{id}/metrics' start and end (Unix seconds, as the SDK
// sends them; either may be absent). Pure.
func metricsRange(get func(string) string) (start, end time.Time, err error) {
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"start", &start}, {"end", &end}} {
		v := get(p.name)
		if v == "" {
			continue
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 || n > 1<<40 {
			return time.Time{}, time.Time{}, fmt.Errorf("%s %q: want Unix seconds: %w", p.name, v, errdefs.ErrInvalidArgument)
		}
		*p.t = time.Unix(n, 0)
	}
	if !start.IsZero() && !end.IsZero() && end.Before(start) {
		return time.Time{}, time.Time{}, fmt.Errorf("end %d is before start %d: %w", end.Unix(), start.Unix(), errdefs.ErrInvalidArgument)
	}
	return start, end, nil
}

// inRange says whether a sample taken at t belongs to [start, end] at the second precision
// of the query (a zero bound is open). Pure.
func inRange(t, start, end time.Time) bool {
	s := t.Unix()
	return (start.IsZero() || s >= start.Unix()) && (end.IsZero() || s <= end.Unix())
}
