// Package store is moat's durable state: sandboxes and their lifecycle events in SQLite
// (modernc.org/sqlite, no cgo). The database lives in the data directory, mode 0600.
// Every write is a transaction; a crash between two writes leaves the last committed
// state, which the daemon reconciles with the host when it starts.
package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Store is the SQLite-backed sandbox store. Safe for concurrent use, including by
// several processes on the same database file.
type Store struct {
	db *sql.DB
}

var _ sandbox.Store = (*Store)(nil)

const schema = `
CREATE TABLE IF NOT EXISTS sandboxes (
	id    TEXT PRIMARY KEY,
	slot  INTEGER NOT NULL UNIQUE,
	state TEXT NOT NULL,
	data  TEXT NOT NULL,
	token TEXT NOT NULL,
	owner TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS events (
	seq     INTEGER PRIMARY KEY AUTOINCREMENT,
	time    TEXT NOT NULL,
	sandbox TEXT NOT NULL,
	kind    TEXT NOT NULL,
	detail  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_sandbox ON events(sandbox, seq);
CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY,
	value INTEGER NOT NULL
);
`

// Open opens (creating if needed) the database at path.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	// The file is created 0600 before SQLite touches it; the WAL and SHM files follow
	// the database file's mode.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening state database: %w", err)
	}
	f.Close()
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening state database: %w", err)
	}
	db.SetMaxOpenConns(4)
	if _, err := db.Exec(schema + apiKeySchema + egressSchema + approvalSchema + auditSchema + usageSchema + sessionSchema); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating schema: %w", err)
	}
	if err := migrate(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating schema: %w", err)
	}
	if err := migrateNames(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating schema: %w", err)
	}
	if err := migrateApprovals(db); err != nil { // approvals.go
		db.Close()
		return nil, fmt.Errorf("migrating schema: %w", err)
	}
	if err := migrateOwners(db); err != nil { // owners.go
		db.Close()
		return nil, fmt.Errorf("migrating schema: %w", err)
	}
	if err := migratePorts(db); err != nil { // ports.go (previews)
		db.Close()
		return nil, fmt.Errorf("migrating schema: %w", err)
	}
	if err := migrateE2BBuilds(db); err != nil { // e2bbuilds.go
		db.Close()
		return nil, fmt.Errorf("migrating schema: %w", err)
	}
	return &Store{db: db}, nil
}

// migrate brings a database made by an older moat up to the schema: sandboxes gain an
// owner column, in which their sandboxes are the operator's (""), and API keys a max
// column, in which they have no maxima of their own.
func migrate(db *sql.DB) error {
	for _, c := range []struct{ table, column, def string }{
		{"sandboxes", "owner", `TEXT NOT NULL DEFAULT ''`},
		{"api_keys", "max", `TEXT NOT NULL DEFAULT '{}'`},
		{"egress", "user", `TEXT NOT NULL DEFAULT ''`}, // issue 15: the sandbox user of an entry
	} {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, c.table, c.column).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, err := db.Exec(`ALTER TABLE ` + c.table + ` ADD COLUMN ` + c.column + ` ` + c.def); err != nil {
				return err
			}
		}
	}
	return nil
}

// classifyFull gives SQLite's "database or disk is full" (the data filesystem has no room
// left) the class errdefs.ErrResourceExhausted and a message for the client; other errors
// pass unchanged.
func classifyFull(err error) error {
	err = classifyName(err)
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL {
		return fmt.Errorf("%w: the daemon's database cannot grow because its data filesystem is full (deleting sandboxes frees space): %w",
			err, errdefs.ErrResourceExhausted)
	}
	return err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Insert stores a new sandbox, allocating a free slot (round-robin). It sets sb.Slot.
func (s *Store) Insert(ctx context.Context, sb *sandbox.Sandbox) (err error) {
	defer func() { err = classifyFull(err) }()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inserting sandbox: %w", err)
	}
	defer tx.Rollback()
	// Slots go round: the next free slot after the last one handed out, so a deleted
	// sandbox's uid range is not reused at once (processes of a dying sandbox, files it
	// left anywhere, never meet a new owner of the same uids soon after).
	var last int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE((SELECT value FROM meta WHERE key = 'last_slot'), -1)`).Scan(&last); err != nil {
		return fmt.Errorf("allocating slot: %w", err)
	}
	used := map[int]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT slot FROM sandboxes`)
	if err != nil {
		return fmt.Errorf("allocating slot: %w", err)
	}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		used[n] = true
	}
	rows.Close()
	slot := -1
	for i := 1; i <= sandbox.MaxSlots; i++ {
		if c := (last + i) % sandbox.MaxSlots; !used[c] {
			slot = c
			break
		}
	}
	if slot < 0 {
		return fmt.Errorf("all %d sandbox slots are in use: %w", sandbox.MaxSlots, errdefs.ErrUnavailable)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES('last_slot', ?)
		ON CONFLICT(key) DO UPDATE SET value = excluded.value`, slot); err != nil {
		return fmt.Errorf("allocating slot: %w", err)
	}
	sb.Slot = slot
	data, err := json.Marshal(sb)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sandboxes(id, slot, state, data, token, owner) VALUES(?,?,?,?,?,?)`,
		sb.ID, sb.Slot, string(sb.State), string(data), sb.AccessToken, sb.Owner); err != nil {
		return fmt.Errorf("inserting sandbox %s: %w", sb.ID, err)
	}
	if err := addEvent(ctx, tx, sb.ID, "created", string(sb.State)); err != nil {
		return err
	}
	if err := usageInsert(ctx, tx, sb, time.Now()); err != nil { // usage.go
		return err
	}
	return tx.Commit()
}

// Update runs fn on the current record of id inside a transaction and stores the result.
// fn may return an error to abort. The record's UpdatedAt is set. When the state changed,
// a transition event is recorded.
func (s *Store) Update(ctx context.Context, id string, fn func(*sandbox.Sandbox) error) (_ *sandbox.Sandbox, err error) {
	defer func() { err = classifyFull(err) }()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	defer tx.Rollback()
	sb, err := get(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	before, owner, warm := sb.State, sb.Owner, sb.Warm
	if err := fn(sb); err != nil {
		return nil, err
	}
	sb.UpdatedAt = time.Now().UTC()
	data, err := json.Marshal(sb)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET state = ?, data = ?, owner = ? WHERE id = ?`,
		string(sb.State), string(data), sb.Owner, id); err != nil {
		return nil, fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	if sb.State != before {
		detail := string(before) + " -> " + string(sb.State)
		if sb.Error != "" && sb.State == sandbox.StateStopped {
			detail += ": " + sb.Error
		}
		if err := addEvent(ctx, tx, id, "transition", detail); err != nil {
			return nil, err
		}
	}
	if sb.State != before || sb.Owner != owner || sb.Warm != warm {
		if err := usageUpdate(ctx, tx, sb, before, time.Now()); err != nil { // usage.go
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	return sb, nil
}

// Get returns the sandbox id or an ErrNotFound-class error.
func (s *Store) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return get(ctx, s.db, id)
}

// List returns every sandbox, oldest first.
func (s *Store) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT data, token, owner FROM sandboxes`)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	defer rows.Close()
	var out []*sandbox.Sandbox
	for rows.Next() {
		var data, token, owner string
		if err := rows.Scan(&data, &token, &owner); err != nil {
			return nil, err
		}
		sb, err := decode(data, token, owner)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b *sandbox.Sandbox) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Delete removes the sandbox's record and records a "deleted" event. Deleting an
// unknown id is not an error.
func (s *Store) Delete(ctx context.Context, id string) (err error) {
	defer func() { err = classifyFull(err) }()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("deleting sandbox %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		if err := addEvent(ctx, tx, id, "deleted", ""); err != nil {
			return err
		}
		if err := usageDelete(ctx, tx, id, time.Now()); err != nil { // usage.go
			return err
		}
	}
	return tx.Commit()
}

// Event is one recorded lifecycle event.
type Event struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	Kind    string    `json:"kind"`
	Detail  string    `json:"detail"`
}

// Events returns the events of sandbox id, oldest first.
func (s *Store) Events(ctx context.Context, id string) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT seq, time, sandbox, kind, detail FROM events WHERE sandbox = ? ORDER BY seq`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var t string
		if err := rows.Scan(&e.Seq, &t, &e.Sandbox, &e.Kind, &e.Detail); err != nil {
			return nil, err
		}
		e.Time, _ = time.Parse(time.RFC3339Nano, t)
		out = append(out, e)
	}
	return out, rows.Err()
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func get(ctx context.Context, q querier, id string) (*sandbox.Sandbox, error) {
	var data, token, owner string
	err := q.QueryRowContext(ctx, `SELECT data, token, owner FROM sandboxes WHERE id = ?`, id).Scan(&data, &token, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("reading sandbox %s: %w", id, err)
	}
	return decode(data, token, owner)
}

func decode(data, token, owner string) (*sandbox.Sandbox, error) {
	var sb sandbox.Sandbox
	if err := json.Unmarshal([]byte(data), &sb); err != nil {
		return nil, fmt.Errorf("decoding sandbox record: %w", err)
	}
	sb.AccessToken, sb.Owner = token, owner
	return &sb, nil
}

func addEvent(ctx context.Context, tx *sql.Tx, id, kind, detail string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO events(time, sandbox, kind, detail) VALUES(?,?,?,?)`,
		time.Now().UTC().Format(time.RFC3339Nano), id, kind, detail)
	if err != nil {
		return fmt.Errorf("recording event: %w", err)
	}
	return appendAudit(ctx, tx, id, kind, detail) // every event is an audit record too (audit.go)
}

const apiKeySchema = `CREATE TABLE IF NOT EXISTS api_keys (
	id      TEXT PRIMARY KEY,
	hash    TEXT NOT NULL UNIQUE,
	created TEXT NOT NULL,
	max     TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS api_key_secrets (
	key_id TEXT NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
	secret TEXT NOT NULL,
	PRIMARY KEY (key_id, secret)
);`

// APIKey describes a stored key; the key itself is never stored, only its SHA-256.
type APIKey struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	// Secrets are the secrets the key may bind (its grants), sorted.
	Secrets []string `json:"secrets"`
	// Max are the key's maxima of its sandboxes' limits (zero fields: none of its own).
	Max sandbox.Limits `json:"max"`
}

// CreateAPIKey makes a new key of the form e2b_<40 hex> (the shape the E2B SDKs accept),
// granted the named secrets and with the given maxima, stores its hash and returns the key.
// The key cannot be recovered later.
func (s *Store) CreateAPIKey(ctx context.Context, secrets []string, max sandbox.Limits) (string, APIKey, error) {
	var raw [20]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", APIKey{}, err
	}
	key := "e2b_" + hex.EncodeToString(raw[:])
	k := APIKey{ID: "key-" + hex.EncodeToString(raw[:4]), Created: time.Now().UTC(), Max: max}
	maxJSON, err := json.Marshal(max)
	if err != nil {
		return "", APIKey{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", APIKey{}, fmt.Errorf("storing API key: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO api_keys(id, hash, created, max) VALUES(?,?,?,?)`,
		k.ID, hashKey(key), k.Created.Format(time.RFC3339Nano), string(maxJSON)); err != nil {
		return "", APIKey{}, fmt.Errorf("storing API key: %w", err)
	}
	if k.Secrets, err = setGrants(ctx, tx, k.ID, secrets); err != nil {
		return "", APIKey{}, err
	}
	if err := tx.Commit(); err != nil {
		return "", APIKey{}, fmt.Errorf("storing API key: %w", err)
	}
	return key, k, nil
}

// setGrants makes secrets (deduplicated) the grants of key id, and returns them sorted.
func setGrants(ctx context.Context, tx *sql.Tx, id string, secrets []string) ([]string, error) {
	if _, err := tx.ExecContext(ctx, `DELETE FROM api_key_secrets WHERE key_id = ?`, id); err != nil {
		return nil, fmt.Errorf("storing the grants of API key %s: %w", id, err)
	}
	out := slices.Compact(slices.Sorted(slices.Values(secrets)))
	for _, name := range out {
		if _, err := tx.ExecContext(ctx, `INSERT INTO api_key_secrets(key_id, secret) VALUES(?,?)`, id, name); err != nil {
			return nil, fmt.Errorf("storing the grants of API key %s: %w", id, err)
		}
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// SetAPIKeySecrets makes secrets the grants of the key with the given id, replacing those
// it had; errdefs.ErrNotFound when there is no such key.
func (s *Store) SetAPIKeySecrets(ctx context.Context, id string, secrets []string) (APIKey, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return APIKey{}, err
	}
	defer tx.Rollback()
	k, err := getAPIKey(ctx, tx, id)
	if err != nil {
		return APIKey{}, err
	}
	if k.Secrets, err = setGrants(ctx, tx, id, secrets); err != nil {
		return APIKey{}, err
	}
	return k, tx.Commit()
}

// SetAPIKeyMax makes max the maxima of the key with the given id (zero fields: none of its
// own); errdefs.ErrNotFound when there is no such key. Sandboxes the key created before
// keep their limits; its next creates are bounded by max.
func (s *Store) SetAPIKeyMax(ctx context.Context, id string, max sandbox.Limits) (APIKey, error) {
	maxJSON, err := json.Marshal(max)
	if err != nil {
		return APIKey{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return APIKey{}, err
	}
	defer tx.Rollback()
	k, err := getAPIKey(ctx, tx, id)
	if err != nil {
		return APIKey{}, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET max = ? WHERE id = ?`, string(maxJSON), id); err != nil {
		return APIKey{}, fmt.Errorf("storing the maxima of API key %s: %w", id, err)
	}
	k.Max = max
	if k.Secrets, err = keyGrants(ctx, tx, id); err != nil {
		return APIKey{}, err
	}
	return k, tx.Commit()
}

// getAPIKey reads key id's creation time and maxima (not its grants).
func getAPIKey(ctx context.Context, tx *sql.Tx, id string) (APIKey, error) {
	k := APIKey{ID: id}
	var created, max string
	err := tx.QueryRowContext(ctx, `SELECT created, max FROM api_keys WHERE id = ?`, id).Scan(&created, &max)
	if errors.Is(err, sql.ErrNoRows) {
		return APIKey{}, fmt.Errorf("API key %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return APIKey{}, err
	}
	k.Created, _ = time.Parse(time.RFC3339Nano, created)
	if err := json.Unmarshal([]byte(max), &k.Max); err != nil {
		return APIKey{}, fmt.Errorf("reading the maxima of API key %s: %w", id, err)
	}
	return k, nil
}

// keyGrants returns the grants of key id, sorted (none: empty, not nil).
func keyGrants(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, id string) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT secret FROM api_key_secrets WHERE key_id = ? ORDER BY secret`, id)
	if err != nil {
		return nil, fmt.Errorf("reading the grants of API key %s: %w", id, err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, rows.Err()
}

// Authenticate returns the caller key stands for: its id, grants and maxima. A key that is
// not stored is an ErrUnauthenticated-class error.
func (s *Store) Authenticate(ctx context.Context, key string) (sandbox.Caller, error) {
	return s.callerByHash(ctx, hashKey(key))
}

// callerByHash is Authenticate of the key whose hash is hash (sessions.go keeps the hash).
func (s *Store) callerByHash(ctx context.Context, hash string) (sandbox.Caller, error) {
	var id, max string
	err := s.db.QueryRowContext(ctx, `SELECT id, max FROM api_keys WHERE hash = ?`, hash).Scan(&id, &max)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Caller{}, fmt.Errorf("invalid API key: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return sandbox.Caller{}, err
	}
	c := sandbox.Caller{APIKey: id}
	// One query at a time: a query whose rows stay open holds one of the pool's few
	// connections, and queries made while it is open need another (concurrent callers
	// holding every connection would each wait for one forever).
	if c.Secrets, err = keyGrants(ctx, s.db, id); err != nil {
		return sandbox.Caller{}, err
	}
	if len(c.Secrets) == 0 {
		c.Secrets = nil
	}
	if c.Approver, err = isApprover(ctx, s.db, id); err != nil { // approvals.go
		return sandbox.Caller{}, fmt.Errorf("reading the approver permission of API key %s: %w", id, err)
	}
	o, err := keyOwner(ctx, s.db, id) // owners.go
	if err != nil {
		return sandbox.Caller{}, err
	}
	c.Name, c.Admin = o.Name, o.Admin
	if err := json.Unmarshal([]byte(max), &c.Max); err != nil {
		return sandbox.Caller{}, fmt.Errorf("reading the maxima of API key %s: %w", id, err)
	}
	return c, nil
}

// grants returns every key's grants, sorted, by key id.
func (s *Store) grants(ctx context.Context) (map[string][]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT key_id, secret FROM api_key_secrets ORDER BY key_id, secret`)
	if err != nil {
		return nil, fmt.Errorf("reading API key grants: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, err
		}
		out[id] = append(out[id], name)
	}
	return out, rows.Err()
}

// ListAPIKeys lists the stored keys (ids, creation times, grants and maxima).
func (s *Store) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	grants, err := s.grants(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT id, created, max FROM api_keys ORDER BY created`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []APIKey
	for rows.Next() {
		var k APIKey
		var t, max string
		if err := rows.Scan(&k.ID, &t, &max); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(max), &k.Max); err != nil {
			return nil, fmt.Errorf("reading the maxima of API key %s: %w", k.ID, err)
		}
		k.Created, _ = time.Parse(time.RFC3339Nano, t)
		k.Secrets = grants[k.ID]
		if k.Secrets == nil {
			k.Secrets = []string{}
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// DeleteAPIKey removes the key with the given id, and its grants.
func (s *Store) DeleteAPIKey(ctx context.Context, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM api_key_secrets WHERE key_id = ?`, id); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM api_keys WHERE id = ?`, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("API key %q: %w", id, errdefs.ErrNotFound)
	}
	return tx.Commit()
}

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// AddEvent records an event of sandbox id (e.g. a credential use) outside any lifecycle
// change.
func (s *Store) AddEvent(ctx context.Context, id, kind, detail string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := addEvent(ctx, tx, id, kind, detail); err != nil {
		return err
	}
	return tx.Commit()
}
