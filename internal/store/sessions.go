package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// sessionSchema holds the web console's sign-in sessions (internal/apiserver/session.go).
// A session is stored by the SHA-256 of its id (the cookie's value), so a copy of the
// database does not sign anyone in; it names its API key by the key's hash, so deleting
// the key ends its sessions (SessionCaller finds no key). Kept in SQLite so sessions
// survive a daemon restart.
const sessionSchema = `
CREATE TABLE IF NOT EXISTS console_sessions (
	id_hash  TEXT PRIMARY KEY,
	key_hash TEXT NOT NULL,
	csrf     TEXT NOT NULL,
	created  TEXT NOT NULL,
	expires  INTEGER NOT NULL
);`

// CreateSession starts a console session for API key (its raw value, already
// authenticated by the caller) lasting ttl. It returns the session's id, to be sent once
// as a cookie and never stored, and its CSRF token. Expired sessions are swept here.
func (s *Store) CreateSession(ctx context.Context, key string, ttl time.Duration) (id, csrf string, err error) {
	id, csrf = randomHex(32), randomHex(32)
	now := time.Now().UTC()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM console_sessions WHERE expires <= ?`, now.Unix()); err != nil {
		return "", "", fmt.Errorf("sweeping console sessions: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO console_sessions(id_hash, key_hash, csrf, created, expires) VALUES(?,?,?,?,?)`,
		hashKey(id), hashKey(key), csrf, now.Format(time.RFC3339Nano), now.Add(ttl).Unix()); err != nil {
		return "", "", fmt.Errorf("storing console session: %w", err)
	}
	return id, csrf, nil
}

// SessionCaller returns who session id acts as (its API key's Caller, as Authenticate
// gives it) and the session's CSRF token. An unknown or expired session, or one whose API
// key was deleted, is an errdefs.ErrUnauthenticated error (and is deleted).
func (s *Store) SessionCaller(ctx context.Context, id string) (sandbox.Caller, string, error) {
	var keyHash, csrf string
	var expires int64
	err := s.db.QueryRowContext(ctx, `SELECT key_hash, csrf, expires FROM console_sessions WHERE id_hash = ?`, hashKey(id)).Scan(&keyHash, &csrf, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return sandbox.Caller{}, "", fmt.Errorf("the console session has ended; sign in again: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return sandbox.Caller{}, "", fmt.Errorf("reading console session: %w", err)
	}
	if time.Now().Unix() >= expires {
		_ = s.DeleteSession(ctx, id)
		return sandbox.Caller{}, "", fmt.Errorf("the console session has expired; sign in again: %w", errdefs.ErrUnauthenticated)
	}
	c, err := s.callerByHash(ctx, keyHash)
	if errors.Is(err, errdefs.ErrUnauthenticated) { // the key was deleted
		_ = s.DeleteSession(ctx, id)
		return sandbox.Caller{}, "", fmt.Errorf("the console session's API key was deleted: %w", errdefs.ErrUnauthenticated)
	}
	return c, csrf, err
}

// DeleteSession ends session id (signing out). Deleting an unknown session is no error.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM console_sessions WHERE id_hash = ?`, hashKey(id)); err != nil {
		return fmt.Errorf("deleting console session: %w", err)
	}
	return nil
}

// randomHex returns n random bytes, hex-encoded.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b)
}
