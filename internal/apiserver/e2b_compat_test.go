package apiserver

import (
	"errors"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

func TestParseE2BListFilter(t *testing.T) {
	f, err := parseE2BListFilter(query())
	if err != nil || !f.desc || !f.startedAfter.IsZero() || f.template != "" {
		t.Errorf("no query: %+v %v, want newest first and no filter", f, err)
	}
	f, err = parseE2BListFilter(query("order", "asc", "startedAfter", "2026-12-01T12:00:00.123Z", "template", "base"))
	if err != nil || f.desc || !f.startedAfter.Equal(t0.Add(123*time.Millisecond)) || f.template != "base" {
		t.Errorf("asc, startedAfter, template: %+v %v", f, err)
	}
	for _, bad := range [][]string{{"order", "newest"}, {"startedAfter", "yesterday"}, {"startedAfter", "1733050000"}} {
		if _, err := parseE2BListFilter(query(bad...)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%v: %v, want invalid argument", bad, err)
		}
	}

	sb := &sandbox.Sandbox{CreatedAt: t0, Template: "debian", TemplateAlias: "base"}
	for _, tc := range []struct {
		f    e2bListFilter
		want bool
	}{
		{e2bListFilter{}, true},
		{e2bListFilter{startedAfter: t0}, true}, // at or after
		{e2bListFilter{startedAfter: t0.Add(time.Millisecond)}, false},
		{e2bListFilter{startedAfter: t0.Add(-time.Hour)}, true},
		{e2bListFilter{template: "base"}, true},
		{e2bListFilter{template: "debian"}, true},
		{e2bListFilter{template: "host"}, false},
	} {
		if got := tc.f.matches(sb); got != tc.want {
			t.Errorf("%+v matches = %v, want %v", tc.f, got, tc.want)
		}
	}
}

// e2bConnectDeadline: a sandbox that never had a timeout (native) keeps no deadline
// unless the request names one — resumed or not.
func TestE2BConnectDeadline(t *testing.T) {
	now := t0
	soon, later := now.Add(time.Minute), now.Add(time.Hour)
	for _, tc := range []struct {
		name     string
		resumed  bool
		expires  *time.Time
		timeout  time.Duration
		asked    time.Duration
		wantD    time.Duration
		wantMove bool
	}{
		{"native running, nothing asked", false, nil, 0, 0, 0, false},
		{"native resumed, nothing asked", true, nil, 0, 0, 0, false},
		{"native running, asked", false, nil, 0, 2 * time.Minute, 2 * time.Minute, true},
		{"native resumed, asked", true, nil, 0, 2 * time.Minute, 2 * time.Minute, true},
		{"e2b resumed (pause cleared the deadline)", true, nil, 5 * time.Minute, 0, 5 * time.Minute, true},
		{"e2b running, deadline sooner than now+timeout", false, &soon, 5 * time.Minute, 0, 5 * time.Minute, true},
		{"e2b running, deadline later: never earlier", false, &later, 5 * time.Minute, 0, 5 * time.Minute, false},
		{"e2b running, asked longer", false, &later, 5 * time.Minute, 2 * time.Hour, 2 * time.Hour, true},
	} {
		d, move := e2bConnectDeadline(tc.resumed, tc.expires, tc.timeout, tc.asked, now)
		if move != tc.wantMove || move && d != tc.wantD {
			t.Errorf("%s: %s %v, want %s %v", tc.name, d, move, tc.wantD, tc.wantMove)
		}
	}
}

func TestMetricsRange(t *testing.T) {
	start, end, err := metricsRange(query("start", "100", "end", "200"))
	if err != nil || start.Unix() != 100 || end.Unix() != 200 {
		t.Errorf("100..200: %v %v %v", start, end, err)
	}
	if s, e, err := metricsRange(query()); err != nil || !s.IsZero() || !e.IsZero() {
		t.Errorf("none: %v %v %v", s, e, err)
	}
	for _, bad := range [][]string{{"start", "x"}, {"end", "-1"}, {"start", "200", "end", "100"}, {"start", "1.5"}} {
		if _, _, err := metricsRange(query(bad...)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%v: %v, want invalid argument", bad, err)
		}
	}
	at := time.Unix(150, 600_000_000)
	for _, tc := range []struct {
		s, e int64 // 0: open
		want bool
	}{{0, 0, true}, {150, 150, true}, {100, 149, false}, {151, 0, false}, {0, 150, true}, {0, 149, false}} {
		var s, e time.Time
		if tc.s != 0 {
			s = time.Unix(tc.s, 0)
		}
		if tc.e != 0 {
			e = time.Unix(tc.e, 0)
		}
		if got := inRange(at, s, e); got != tc.want {
			t.Errorf("inRange(150.6, %d, %d) = %v, want %v", tc.s, tc.e, got, tc.want)
		}
	}
}

// FuzzE2BQueries: the list filter and the metrics range read client strings without panic,
// refusing only as invalid arguments; an accepted range is ordered and an accepted
// startedAfter is a real time.
func FuzzE2BQueries(f *testing.F) {
	f.Add("desc", "2026-12-01T12:00:00.123Z", "base", "100", "200")
	f.Add("asc", "", "", "", "")
	f.Add("x", "2026-13-01T00:00:00Z", "", "-1", "1e3")
	f.Add("", "2026-12-01T12:00:00+01:00", "snap-x", "99999999999999999999", "0")
	f.Fuzz(func(t *testing.T, order, after, tmpl, start, end string) {
		lf, err := parseE2BListFilter(query("order", order, "startedAfter", after, "template", tmpl))
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("list filter error %v is not invalid argument", err)
		}
		if err == nil && (lf.template != tmpl || after == "" && !lf.startedAfter.IsZero()) {
			t.Fatalf("list filter %+v from %q %q", lf, after, tmpl)
		}
		s, e, err := metricsRange(query("start", start, "end", end))
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("metrics range error %v is not invalid argument", err)
			}
			return
		}
		if !s.IsZero() && !e.IsZero() && e.Before(s) {
			t.Fatalf("accepted range %v..%v ends before it starts", s, e)
		}
	})
}
