package store

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// TestAPIKeyOwner: a key's owner name and admin flag are stored, returned by Authenticate
// and APIKeyOwners, survive reopening, and a bad name or unknown key is refused; a
// database from before owners (no columns) gains them, its keys with no owner and not
// admin. A sandbox's owner name and visibility survive reopening too.
func TestAPIKeyOwner(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	keyA, a, err := st.CreateAPIKey(ctx, nil, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	keyB, b, err := st.CreateAPIKey(ctx, nil, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetAPIKeyOwner(ctx, a.ID, KeyOwner{Name: "alice", Admin: true}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetAPIKeyOwner(ctx, b.ID, KeyOwner{Name: "bad\x1bname"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a bad owner name: %v", err)
	}
	if err := st.SetAPIKeyOwner(ctx, "key-nope", KeyOwner{Name: "x"}); !errdefs.IsNotFound(err) {
		t.Errorf("an unknown key: %v", err)
	}
	sb := newSB("s1")
	sb.Owner, sb.OwnerName, sb.Visibility = a.ID, "alice", sandbox.VisibilityTeam
	if err := st.Insert(ctx, sb); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if c, err := st.Authenticate(ctx, keyA); err != nil || c.Name != "alice" || !c.Admin || c.APIKey != a.ID {
		t.Errorf("key A: %+v %v", c, err)
	}
	if c, err := st.Authenticate(ctx, keyB); err != nil || c.Name != "" || c.Admin {
		t.Errorf("key B: %+v %v", c, err)
	}
	owners, err := st.APIKeyOwners(ctx)
	if err != nil || owners[a.ID] != (KeyOwner{"alice", true}) || owners[b.ID] != (KeyOwner{}) {
		t.Errorf("owners: %+v %v", owners, err)
	}
	got, err := st.Get(ctx, "s1")
	if err != nil || got.Owner != a.ID || got.OwnerName != "alice" || got.Visibility != sandbox.VisibilityTeam {
		t.Errorf("the sandbox after reopening: %+v %v", got, err)
	}

	// An older database: no owner or admin column.
	for _, col := range []string{"owner", "admin"} {
		if _, err := st.db.Exec(`ALTER TABLE api_keys DROP COLUMN ` + col); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	if st, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if c, err := st.Authenticate(ctx, keyA); err != nil || c.Name != "" || c.Admin {
		t.Errorf("key A after the migration: %+v %v", c, err)
	}
}
