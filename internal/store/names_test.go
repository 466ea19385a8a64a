package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// TestUpgradeFromMain opens a state database made by moat at bb1eb46 (main before names and
// labels; testdata/state-main-bb1eb46.db, written by that commit's store.Open and Insert:
// one sandbox of the operator, one of an API key) and checks that the sandboxes read as
// before, without names or labels, that new sandboxes take names and labels, and that names
// are unique per owner from then on. A second open (the next daemon start) changes nothing.
func TestUpgradeFromMain(t *testing.T) {
	ctx := context.Background()
	src, err := os.ReadFile("testdata/state-main-bb1eb46.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "moat.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		st, err := Open(path)
		if err != nil {
			t.Fatalf("open %d: %v", round, err)
		}
		list, err := st.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			if len(list) != 2 || list[0].ID != "sb-0000000000a1" || list[1].ID != "sb-0000000000b2" {
				t.Fatalf("old sandboxes: %+v", list)
			}
			a, b := list[0], list[1]
			if a.Name != "" || a.Labels != nil || a.Metadata["k"] != "v" || a.Owner != "" || a.AccessToken != "tok1" || a.State != sandbox.StateStopped {
				t.Errorf("old operator sandbox read as %+v", a)
			}
			if b.Owner != "key-01020304" || b.Runtime != "runsc" || b.Name != "" {
				t.Errorf("old key sandbox read as %+v", b)
			}
			// An old record updated by the new moat keeps its data and may be renamed.
			if _, err := st.Update(ctx, a.ID, func(s *sandbox.Sandbox) error { s.Name = "old"; return nil }); err != nil {
				t.Fatal(err)
			}
			named := newSB("sb-0000000000c3")
			named.Name, named.Labels = "web", map[string]string{"team": "x"}
			if err := st.Insert(ctx, named); err != nil {
				t.Fatal(err)
			}
		}
		// The operator's names are taken for the operator only.
		dup := newSB("sb-0000000000d4")
		dup.Name = "web"
		if err := st.Insert(ctx, dup); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("round %d: a second operator sandbox named web: %v, want ErrAlreadyExists", round, err)
		}
		dup.Name = "old"
		if err := st.Insert(ctx, dup); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("round %d: a new sandbox with the upgraded one's name: %v, want ErrAlreadyExists", round, err)
		}
		if _, err := st.Update(ctx, "sb-0000000000b2", func(s *sandbox.Sandbox) error { s.Name = "web"; return nil }); err != nil {
			t.Errorf("round %d: the key's sandbox may be named like the operator's: %v", round, err)
		}
		other := newSB("sb-0000000000e5")
		other.Name, other.Owner = "web", "key-01020304"
		if err := st.Insert(ctx, other); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("round %d: a second sandbox of the key named web: %v, want ErrAlreadyExists", round, err)
		}
		got, err := st.Get(ctx, "sb-0000000000c3")
		if err != nil || got.Name != "web" || got.Labels["team"] != "x" {
			t.Errorf("round %d: named sandbox read as %+v, %v", round, got, err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNameFreedOnDelete checks that a deleted sandbox's name can be used again.
func TestNameFreedOnDelete(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := newSB("a")
	a.Name = "n"
	if err := st.Insert(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	b := newSB("b")
	b.Name = "n"
	if err := st.Insert(ctx, b); err != nil {
		t.Fatalf("reusing a deleted sandbox's name: %v", err)
	}
	// Unnamed sandboxes never clash.
	for _, id := range []string{"c", "d"} {
		if err := st.Insert(ctx, newSB(id)); err != nil {
			t.Fatal(err)
		}
	}
}
