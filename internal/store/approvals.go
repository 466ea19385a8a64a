package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/errdefs"
)

var _ approvals.Store = (*Store)(nil)

// approvalSchema: one row per approval, its record as JSON in data; the columns filter.
// Approvals outlive their sandbox (the record of who allowed what).
const approvalSchema = `CREATE TABLE IF NOT EXISTS approvals (
	id       TEXT PRIMARY KEY,
	kind     TEXT NOT NULL,
	sandbox  TEXT NOT NULL,
	state    TEXT NOT NULL,
	created  TEXT NOT NULL,
	data     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_state ON approvals(state, created);
CREATE INDEX IF NOT EXISTS approvals_sandbox ON approvals(sandbox, created);
`

// migrateApprovals gives API keys the approver column (0: may not decide approvals).
func migrateApprovals(db *sql.DB) error {
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM pragma_table_info('api_keys') WHERE name = 'approver'`).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		if _, err := db.Exec(`ALTER TABLE api_keys ADD COLUMN approver INTEGER NOT NULL DEFAULT 0`); err != nil {
			return err
		}
	}
	return nil
}

// InsertApproval stores a new approval.
func (s *Store) InsertApproval(ctx context.Context, a approvals.Approval) (err error) {
	defer func() { err = classifyFull(err) }()
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO approvals(id, kind, sandbox, state, created, data) VALUES(?,?,?,?,?,?)`,
		a.ID, a.Kind, a.Sandbox, a.State, a.CreatedAt.UTC().Format(time.RFC3339Nano), string(data)); err != nil {
		return fmt.Errorf("storing approval %s: %w", a.ID, err)
	}
	return nil
}

func getApproval(ctx context.Context, q querier, id string) (approvals.Approval, error) {
	var data string
	err := q.QueryRowContext(ctx, `SELECT data FROM approvals WHERE id = ?`, id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return approvals.Approval{}, fmt.Errorf("approval %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return approvals.Approval{}, fmt.Errorf("reading approval %s: %w", id, err)
	}
	var a approvals.Approval
	if err := json.Unmarshal([]byte(data), &a); err != nil {
		return approvals.Approval{}, fmt.Errorf("reading approval %s: %w", id, err)
	}
	return a, nil
}

// GetApproval returns approval id (errdefs.ErrNotFound if none).
func (s *Store) GetApproval(ctx context.Context, id string) (approvals.Approval, error) {
	return getApproval(ctx, s.db, id)
}

// ListApprovals returns the approvals f selects, oldest first.
func (s *Store) ListApprovals(ctx context.Context, f approvals.Filter) ([]approvals.Approval, error) {
	q := `SELECT data FROM approvals WHERE (?1 = '' OR state = ?1) AND (?2 = '' OR sandbox = ?2) AND (?3 = '' OR kind = ?3) ORDER BY created, id`
	rows, err := s.db.QueryContext(ctx, q, f.State, f.Sandbox, f.Kind)
	if err != nil {
		return nil, fmt.Errorf("listing approvals: %w", err)
	}
	defer rows.Close()
	out := []approvals.Approval{}
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		var a approvals.Approval
		if err := json.Unmarshal([]byte(data), &a); err != nil {
			return nil, fmt.Errorf("listing approvals: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// UpdateApproval runs fn on approval id's current record in a transaction and stores the
// result (its id, kind, sandbox and creation time are kept).
func (s *Store) UpdateApproval(ctx context.Context, id string, fn func(*approvals.Approval) error) (_ approvals.Approval, err error) {
	defer func() { err = classifyFull(err) }()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return approvals.Approval{}, fmt.Errorf("updating approval %s: %w", id, err)
	}
	defer tx.Rollback()
	a, err := getApproval(ctx, tx, id)
	if err != nil {
		return approvals.Approval{}, err
	}
	next := a
	if err := fn(&next); err != nil {
		return approvals.Approval{}, err
	}
	next.ID, next.Kind, next.Sandbox, next.CreatedAt = a.ID, a.Kind, a.Sandbox, a.CreatedAt
	data, err := json.Marshal(next)
	if err != nil {
		return approvals.Approval{}, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE approvals SET state = ?, data = ? WHERE id = ?`, next.State, string(data), id); err != nil {
		return approvals.Approval{}, fmt.Errorf("updating approval %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return approvals.Approval{}, fmt.Errorf("updating approval %s: %w", id, err)
	}
	return next, nil
}

// SetAPIKeyApprover gives key id the approver permission (or takes it away): such a key
// may decide approvals of sandboxes it neither owns nor asked about.
func (s *Store) SetAPIKeyApprover(ctx context.Context, id string, approver bool) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET approver = ? WHERE id = ?`, approver, id)
	if err != nil {
		return fmt.Errorf("storing the approver permission of API key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("API key %q: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// APIKeyApprovers returns the ids of the keys with the approver permission.
func (s *Store) APIKeyApprovers(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM api_keys WHERE approver != 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// isApprover says whether key id has the approver permission.
func isApprover(ctx context.Context, q querier, id string) (bool, error) {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT approver FROM api_keys WHERE id = ?`, id).Scan(&n); err != nil {
		return false, err
	}
	return n != 0, nil
}
