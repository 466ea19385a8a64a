package store

import (
	"context"
	"fmt"

	"github.com/moatdev/moat/internal/metrics"
)

// CountSandboxes counts sandbox records by state and runtime, for /metrics at scrape
// time (one grouped query: no record is decoded).
func (s *Store) CountSandboxes(ctx context.Context) (map[metrics.StateRuntime]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT state, COALESCE(json_extract(data, '$.runtime'), ''), count(*) FROM sandboxes GROUP BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("counting sandboxes: %w", err)
	}
	defer rows.Close()
	out := map[metrics.StateRuntime]int{}
	for rows.Next() {
		var k metrics.StateRuntime
		var n int
		if err := rows.Scan(&k.State, &k.Runtime, &n); err != nil {
			return nil, fmt.Errorf("counting sandboxes: %w", err)
		}
		out[k] += n
	}
	return out, rows.Err()
}

// CountApprovals counts approvals by kind and state, for /metrics at scrape time.
func (s *Store) CountApprovals(ctx context.Context) (map[metrics.KindState]int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT kind, state, count(*) FROM approvals GROUP BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("counting approvals: %w", err)
	}
	defer rows.Close()
	out := map[metrics.KindState]int{}
	for rows.Next() {
		var k metrics.KindState
		var n int
		if err := rows.Scan(&k.Kind, &k.State, &n); err != nil {
			return nil, fmt.Errorf("counting approvals: %w", err)
		}
		out[k] += n
	}
	return out, rows.Err()
}
