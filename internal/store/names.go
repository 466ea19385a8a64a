package store

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/moatdev/moat/internal/errdefs"
)

// namesSchema makes sandbox names (sandbox.Sandbox.Name, kept in the record's JSON) unique
// per owner. It is an index on an expression of the existing columns, so a database made
// by an older moat needs no new column: the index is built over its records, which have no
// names (NULL, never equal), when it is first opened by this moat. Idempotent.
const namesSchema = `CREATE UNIQUE INDEX IF NOT EXISTS sandboxes_name
	ON sandboxes(owner, json_extract(data, '$.name'))
	WHERE json_extract(data, '$.name') IS NOT NULL;`

// migrateNames adds the names index (namesSchema).
func migrateNames(db *sql.DB) error {
	if _, err := db.Exec(namesSchema); err != nil {
		return fmt.Errorf("sandbox names index: %w", err)
	}
	return nil
}

// classifyName gives the unique-name violation (two sandboxes of one owner with one name,
// when two creates race past the manager's check) the class errdefs.ErrAlreadyExists;
// other errors pass unchanged.
func classifyName(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE && strings.Contains(se.Error(), "sandboxes_name") {
		return fmt.Errorf("the sandbox name is taken by another of your sandboxes: %w", errdefs.ErrAlreadyExists)
	}
	return err
}
