package store

import (
	"context"
	"fmt"
	"time"

	"github.com/moatdev/moat/internal/egress"
)

var _ egress.Journal = (*Store)(nil)

const egressSchema = `CREATE TABLE IF NOT EXISTS egress (
	seq      INTEGER PRIMARY KEY AUTOINCREMENT,
	sandbox  TEXT NOT NULL,
	time     TEXT NOT NULL,
	phase    TEXT NOT NULL,
	proto    TEXT NOT NULL,
	name     TEXT NOT NULL,
	addr     TEXT NOT NULL,
	port     INTEGER NOT NULL,
	allowed  INTEGER NOT NULL,
	rule     TEXT NOT NULL,
	reason   TEXT NOT NULL,
	upstream TEXT NOT NULL,
	up       INTEGER NOT NULL,
	down     INTEGER NOT NULL,
	duration INTEGER NOT NULL,
	open     INTEGER NOT NULL,
	error    TEXT NOT NULL,
	user     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS egress_sandbox ON egress(sandbox, seq);
`

// WriteEgress inserts adds (setting their Seq) and updates finished entries by Seq, in
// one transaction.
func (s *Store) WriteEgress(ctx context.Context, adds []*egress.Entry, finished []egress.Entry) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("writing egress log: %w", err)
	}
	defer tx.Rollback()
	for _, e := range adds {
		res, err := tx.ExecContext(ctx, `INSERT INTO egress(sandbox, time, phase, proto, name, addr, port, allowed, rule, reason, upstream, up, down, duration, open, error, user)
			VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			e.Sandbox, e.Time.UTC().Format(time.RFC3339Nano), e.Phase, e.Proto, e.Name, e.Addr, e.Port, e.Allowed,
			e.Rule, e.Reason, e.Upstream, e.Up, e.Down, int64(e.Duration), e.Open, e.Error, e.User)
		if err != nil {
			return fmt.Errorf("writing egress log: %w", err)
		}
		if e.Seq, err = res.LastInsertId(); err != nil {
			return fmt.Errorf("writing egress log: %w", err)
		}
	}
	for _, e := range finished {
		_, err := tx.ExecContext(ctx, `UPDATE egress SET upstream = ?, up = ?, down = ?, duration = ?, open = ?, error = ? WHERE seq = ?`,
			e.Upstream, e.Up, e.Down, int64(e.Duration), e.Open, e.Error, e.Seq)
		if err != nil {
			return fmt.Errorf("writing egress log: %w", err)
		}
	}
	return tx.Commit()
}

// Egress returns up to limit entries of sandbox id's egress log with seq > after, oldest
// first (limit ≤ 0: all).
func (s *Store) Egress(ctx context.Context, id string, after int64, limit int) ([]egress.Entry, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.db.QueryContext(ctx, `SELECT seq, sandbox, time, phase, proto, name, addr, port, allowed, rule, reason, upstream, up, down, duration, open, error, user
		FROM egress WHERE sandbox = ? AND seq > ? ORDER BY seq LIMIT ?`, id, after, limit)
	if err != nil {
		return nil, fmt.Errorf("reading egress log: %w", err)
	}
	defer rows.Close()
	var out []egress.Entry
	for rows.Next() {
		var e egress.Entry
		var t string
		var dur int64
		if err := rows.Scan(&e.Seq, &e.Sandbox, &t, &e.Phase, &e.Proto, &e.Name, &e.Addr, &e.Port, &e.Allowed,
			&e.Rule, &e.Reason, &e.Upstream, &e.Up, &e.Down, &dur, &e.Open, &e.Error, &e.User); err != nil {
			return nil, fmt.Errorf("reading egress log: %w", err)
		}
		e.Time, _ = time.Parse(time.RFC3339Nano, t)
		e.Duration = time.Duration(dur)
		out = append(out, e)
	}
	return out, rows.Err()
}

// CloseOpenEgress marks every entry still open as closed: after a daemon restart no
// connection of an earlier run is open.
func (s *Store) CloseOpenEgress(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `UPDATE egress SET open = 0, error = 'the daemon stopped' WHERE open = 1`)
	return err
}
