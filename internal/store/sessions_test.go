package store

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// TestConsoleSessions: a session acts as its API key across a reopen of the database
// (a daemon restart), is stored only hashed, ends at sign-out, at expiry and when its key
// is deleted.
func TestConsoleSessions(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	key, k, err := st.CreateAPIKey(ctx, nil, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	id, csrf, err := st.CreateSession(ctx, key, time.Hour)
	if err != nil || len(id) != 64 || len(csrf) != 64 || id == csrf {
		t.Fatalf("CreateSession = %q, %q, %v", id, csrf, err)
	}
	var stored int
	if err := st.db.QueryRow(`SELECT count(*) FROM console_sessions WHERE id_hash = ? OR key_hash = ? OR instr(id_hash || key_hash, ?) > 0`, id, key, id).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the session id or the API key is stored in the clear (%d rows, %v)", stored, err)
	}
	st.Close()
	if st, err = Open(path); err != nil { // a daemon restart
		t.Fatal(err)
	}
	defer st.Close()
	c, gotCSRF, err := st.SessionCaller(ctx, id)
	if err != nil || c.APIKey != k.ID || gotCSRF != csrf {
		t.Fatalf("SessionCaller after reopen = %+v, %q, %v; want key %s", c, gotCSRF, err, k.ID)
	}
	unauth := func(what, id string) {
		t.Helper()
		if _, _, err := st.SessionCaller(ctx, id); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("%s: SessionCaller err = %v, want unauthenticated", what, err)
		}
	}
	unauth("unknown session", strings.Repeat("0", 64))
	unauth("the CSRF token as a session id", csrf)

	// sign-out
	if err := st.DeleteSession(ctx, id); err != nil {
		t.Fatal(err)
	}
	unauth("signed out", id)

	// expiry
	old, _, err := st.CreateSession(ctx, key, -time.Second)
	if err != nil {
		t.Fatal(err)
	}
	unauth("expired", old)

	// a deleted key ends its sessions
	live, _, err := st.CreateSession(ctx, key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	unauth("API key deleted", live)
}
