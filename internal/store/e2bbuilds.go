package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// E2B template builds (docs/e2b-templates.md): the API server's record of each build —
// status, log entries, the failing step, who asked — as JSON in data, so that a daemon
// restart still answers the SDK's status polls. The columns order and prune.
const e2bBuildSchema = `CREATE TABLE IF NOT EXISTS e2b_builds (
	id       TEXT PRIMARY KEY,
	template TEXT NOT NULL,
	status   TEXT NOT NULL,
	created  TEXT NOT NULL,
	data     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS e2b_builds_created ON e2b_builds(created);
`

// migrateE2BBuilds creates the e2b_builds table. Idempotent.
func migrateE2BBuilds(db *sql.DB) error {
	if _, err := db.Exec(e2bBuildSchema); err != nil {
		return fmt.Errorf("e2b_builds table: %w", err)
	}
	return nil
}

// PutE2BBuild stores (or replaces) build id's record.
func (s *Store) PutE2BBuild(ctx context.Context, id, template, status string, created time.Time, data []byte) (err error) {
	defer func() { err = classifyFull(err) }()
	if _, err := s.db.ExecContext(ctx, `INSERT INTO e2b_builds(id, template, status, created, data) VALUES(?,?,?,?,?)
		ON CONFLICT(id) DO UPDATE SET status = excluded.status, data = excluded.data`,
		id, template, status, created.UTC().Format(time.RFC3339Nano), string(data)); err != nil {
		return fmt.Errorf("storing E2B build %s: %w", id, err)
	}
	return nil
}

// E2BBuilds returns the records of the keep newest builds, oldest first, and deletes the
// older ones.
func (s *Store) E2BBuilds(ctx context.Context, keep int) ([][]byte, error) {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM e2b_builds WHERE id NOT IN
		(SELECT id FROM e2b_builds ORDER BY created DESC, id DESC LIMIT ?)`, keep); err != nil {
		return nil, fmt.Errorf("pruning E2B builds: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT data FROM e2b_builds ORDER BY created, id`)
	if err != nil {
		return nil, fmt.Errorf("reading E2B builds: %w", err)
	}
	defer rows.Close()
	var out [][]byte
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		out = append(out, []byte(data))
	}
	return out, rows.Err()
}
