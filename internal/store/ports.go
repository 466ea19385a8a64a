package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/previews"
)

// portSchema: one row per sandbox port opened beyond the default (private) for previews
// (issue 17). Port 0 is the sandbox-wide traffic token of an E2B sandbox created with
// network.allowPublicTraffic false. Rows go with their sandbox (ON DELETE CASCADE; the
// store opens SQLite with foreign_keys on).
const portSchema = `CREATE TABLE IF NOT EXISTS ports (
	sandbox    TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
	port       INTEGER NOT NULL,
	visibility TEXT NOT NULL,
	token      TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (sandbox, port)
);`

// migratePorts creates the ports table. Idempotent.
func migratePorts(db *sql.DB) error {
	if _, err := db.Exec(portSchema); err != nil {
		return fmt.Errorf("ports table: %w", err)
	}
	return nil
}

// Ports returns the stored settings of sandbox id's ports, by port.
func (s *Store) Ports(ctx context.Context, id string) ([]previews.Setting, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT port, visibility, token FROM ports WHERE sandbox = ? ORDER BY port`, id)
	if err != nil {
		return nil, fmt.Errorf("reading ports of %s: %w", id, err)
	}
	defer rows.Close()
	var out []previews.Setting
	for rows.Next() {
		var p previews.Setting
		if err := rows.Scan(&p.Port, &p.Visibility, &p.Token); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Port returns the stored setting of one port; ok false when none is stored (private).
func (s *Store) Port(ctx context.Context, id string, port int) (p previews.Setting, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT port, visibility, token FROM ports WHERE sandbox = ? AND port = ?`, id, port).
		Scan(&p.Port, &p.Visibility, &p.Token)
	if errors.Is(err, sql.ErrNoRows) {
		return previews.Setting{}, false, nil
	}
	if err != nil {
		return previews.Setting{}, false, fmt.Errorf("reading port %d of %s: %w", port, id, err)
	}
	return p, true, nil
}

// SetPort stores a port's setting; a sandbox that does not exist is errdefs.ErrNotFound.
func (s *Store) SetPort(ctx context.Context, id string, p previews.Setting) (err error) {
	defer func() { err = classifyFull(err) }()
	_, err = s.db.ExecContext(ctx, `INSERT INTO ports(sandbox, port, visibility, token) VALUES(?,?,?,?)
		ON CONFLICT(sandbox, port) DO UPDATE SET visibility = excluded.visibility, token = excluded.token`,
		id, p.Port, p.Visibility, p.Token)
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("storing port %d of %s: %w", p.Port, id, err)
	}
	return nil
}

// AddPort stores a port's setting unless one is stored; a sandbox that does not exist is
// errdefs.ErrNotFound.
func (s *Store) AddPort(ctx context.Context, id string, p previews.Setting) (err error) {
	defer func() { err = classifyFull(err) }()
	_, err = s.db.ExecContext(ctx, `INSERT INTO ports(sandbox, port, visibility, token) VALUES(?,?,?,?) ON CONFLICT(sandbox, port) DO NOTHING`,
		id, p.Port, p.Visibility, p.Token)
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("storing port %d of %s: %w", p.Port, id, err)
	}
	return nil
}

// DeletePort forgets a port's setting (it is private again, its token revoked). Idempotent.
func (s *Store) DeletePort(ctx context.Context, id string, port int) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM ports WHERE sandbox = ? AND port = ?`, id, port); err != nil {
		return fmt.Errorf("deleting port %d of %s: %w", port, id, err)
	}
	return nil
}
