package store

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// API keys' owner names and admin flags (issue 17 part 3; sandbox/owners.go). A sandbox's
// owner name and visibility are in its record (data); these are the keys'.

// migrateOwners gives API keys the owner column ("": no owner name) and the admin column
// (0: the key uses only its own and team sandboxes).
func migrateOwners(db *sql.DB) error {
	for _, c := range []struct{ column, def string }{
		{"owner", `TEXT NOT NULL DEFAULT ''`},
		{"admin", `INTEGER NOT NULL DEFAULT 0`},
	} {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM pragma_table_info('api_keys') WHERE name = ?`, c.column).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, err := db.Exec(`ALTER TABLE api_keys ADD COLUMN ` + c.column + ` ` + c.def); err != nil {
				return err
			}
		}
	}
	return nil
}

// KeyOwner is an API key's owner name and admin flag.
type KeyOwner struct {
	Name  string
	Admin bool
}

// SetAPIKeyOwner gives key id the owner name (sandbox.CheckOwnerName) and admin flag o;
// errdefs.ErrNotFound when there is no such key. Sandboxes the key created before keep
// the owner name they recorded.
func (s *Store) SetAPIKeyOwner(ctx context.Context, id string, o KeyOwner) error {
	if err := sandbox.CheckOwnerName(o.Name); err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET owner = ?, admin = ? WHERE id = ?`, o.Name, o.Admin, id)
	if err != nil {
		return fmt.Errorf("storing the owner of API key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("API key %q: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// APIKeyOwners returns every key's owner name and admin flag, by key id.
func (s *Store) APIKeyOwners(ctx context.Context) (map[string]KeyOwner, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, owner, admin FROM api_keys`)
	if err != nil {
		return nil, fmt.Errorf("reading API key owners: %w", err)
	}
	defer rows.Close()
	out := map[string]KeyOwner{}
	for rows.Next() {
		var id string
		var o KeyOwner
		if err := rows.Scan(&id, &o.Name, &o.Admin); err != nil {
			return nil, err
		}
		out[id] = o
	}
	return out, rows.Err()
}

// keyOwner reads key id's owner name and admin flag.
func keyOwner(ctx context.Context, q querier, id string) (KeyOwner, error) {
	var o KeyOwner
	if err := q.QueryRowContext(ctx, `SELECT owner, admin FROM api_keys WHERE id = ?`, id).Scan(&o.Name, &o.Admin); err != nil {
		return KeyOwner{}, fmt.Errorf("reading the owner of API key %s: %w", id, err)
	}
	return o, nil
}
