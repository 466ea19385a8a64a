package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/previews"
)

// TestPorts: port settings persist across a reopen, update in place, and go with their
// sandbox; a sandbox that does not exist has none stored.
func TestPorts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, newSB("a")); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPort(ctx, "a", previews.Setting{Port: 8080, Visibility: "token", Token: "t1"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPort(ctx, "a", previews.Setting{Port: 8080, Visibility: "public"}); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPort(ctx, "a", previews.Setting{Port: 3000, Visibility: "token", Token: "t2"}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddPort(ctx, "a", previews.Setting{Port: 3000, Visibility: "public"}); err != nil {
		t.Fatal(err) // kept: 3000 is a token port already
	}
	if err := st.AddPort(ctx, "a", previews.Setting{Port: 0, Visibility: "token", Token: "s1"}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddPort(ctx, "a", previews.Setting{Port: 0, Visibility: "token", Token: "s2"}); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := st.Port(ctx, "a", 0); p.Token != "s1" {
		t.Errorf("AddPort replaced a stored setting: %+v", p)
	}
	if err := st.DeletePort(ctx, "a", 0); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPort(ctx, "nope", previews.Setting{Port: 1, Visibility: "public"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("port of a missing sandbox: %v", err)
	}
	st.Close()
	if st, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ps, err := st.Ports(ctx, "a")
	if err != nil || len(ps) != 2 || ps[0] != (previews.Setting{Port: 3000, Visibility: "token", Token: "t2"}) || ps[1] != (previews.Setting{Port: 8080, Visibility: "public"}) {
		t.Fatalf("after reopen: %+v %v", ps, err)
	}
	if err := st.DeletePort(ctx, "a", 3000); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.Port(ctx, "a", 3000); ok || err != nil {
		t.Errorf("deleted port: %v %v", ok, err)
	}
	if p, ok, err := st.Port(ctx, "a", 8080); !ok || err != nil || p.Visibility != "public" {
		t.Errorf("port 8080: %+v %v %v", p, ok, err)
	}
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := st.db.QueryRow(`SELECT COUNT(*) FROM ports`).Scan(&n); err != nil || n != 0 {
		t.Errorf("ports left after the sandbox was deleted: %d %v", n, err)
	}
}
