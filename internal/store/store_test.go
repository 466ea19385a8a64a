package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

func newSB(id string) *sandbox.Sandbox {
	now := time.Now().UTC()
	return &sandbox.Sandbox{ID: id, State: sandbox.StateCreating, CreatedAt: now, UpdatedAt: now, AccessToken: "tok-" + id}
}

func TestSlotsAndLifecycle(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, id := range []string{"a", "b", "c"} {
		sb := newSB(id)
		if err := st.Insert(ctx, sb); err != nil {
			t.Fatal(err)
		}
		if sb.Slot != i {
			t.Errorf("%s got slot %d, want %d", id, sb.Slot, i)
		}
	}
	if err := st.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	d := newSB("d")
	if err := st.Insert(ctx, d); err != nil {
		t.Fatal(err)
	}
	if d.Slot != 3 {
		t.Errorf("a freed slot was reused at once: got %d, want 3", d.Slot)
	}
	got, err := st.Get(ctx, "d")
	if err != nil || got.AccessToken != "tok-d" || got.Slot != 3 {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := st.Get(ctx, "b"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleted: %v", err)
	}
	if _, err := st.Update(ctx, "a", func(s *sandbox.Sandbox) error { s.State = sandbox.StateRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	evs, err := st.Events(ctx, "a")
	if err != nil || len(evs) != 2 || evs[1].Detail != "creating -> running" {
		t.Errorf("events: %+v %v", evs, err)
	}
	boom := errors.New("boom")
	if _, err := st.Update(ctx, "a", func(s *sandbox.Sandbox) error { s.State = sandbox.StateStopped; return boom }); !errors.Is(err, boom) {
		t.Errorf("aborted update: %v", err)
	}
	if a, _ := st.Get(ctx, "a"); a.State != sandbox.StateRunning {
		t.Errorf("aborted update was stored: %s", a.State)
	}
	list, _ := st.List(ctx)
	if len(list) != 3 || list[0].ID != "a" || list[2].ID != "d" {
		t.Errorf("list order: %v", list)
	}
}

// TestConcurrentInsert: concurrent creators (goroutines and separate connections, as two
// moat processes would be) never share a slot.
func TestConcurrentInsert(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	st1, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st1.Close()
	st2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	var wg sync.WaitGroup
	slots := make(chan int, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := st1
			if i%2 == 1 {
				st = st2
			}
			sb := newSB(string(rune('A'+i%26)) + time.Now().Format("150405.000000000") + string(rune('a'+i/26)))
			if err := st.Insert(ctx, sb); err != nil {
				t.Error(err)
				return
			}
			slots <- sb.Slot
		}()
	}
	wg.Wait()
	close(slots)
	seen := map[int]bool{}
	for s := range slots {
		if seen[s] {
			t.Errorf("slot %d allocated twice", s)
		}
		seen[s] = true
	}
	if len(seen) != 40 {
		t.Errorf("%d slots", len(seen))
	}
}

func TestAPIKeys(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key, k, err := st.CreateAPIKey(ctx, nil, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != 44 || key[:4] != "e2b_" {
		t.Errorf("key shape %q", key)
	}
	if c, err := st.Authenticate(ctx, key); err != nil || c.APIKey != k.ID || c.Operator || len(c.Secrets) != 0 {
		t.Errorf("valid key: %+v, %v (want its id, no grants)", c, err)
	}
	if _, err := st.Authenticate(ctx, key+"0"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("wrong key: %v", err)
	}
	var stored int
	_ = st.db.QueryRow(`SELECT COUNT(*) FROM api_keys WHERE hash = ?`, key).Scan(&stored)
	if stored != 0 {
		t.Errorf("key stored in clear")
	}
	if err := st.DeleteAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Authenticate(ctx, key); err == nil {
		t.Errorf("deleted key accepted")
	}
	if err := st.DeleteAPIKey(ctx, k.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}
}

// TestAPIKeyGrants: a key is granted exactly the secrets it is created or set with, other
// keys' grants are not its own, and deleting a key drops its grants.
func TestAPIKeyGrants(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keyA, a, err := st.CreateAPIKey(ctx, []string{"B_TOKEN", "A_TOKEN", "B_TOKEN"}, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	keyB, b, err := st.CreateAPIKey(ctx, []string{"C_TOKEN"}, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.Secrets, ",") != "A_TOKEN,B_TOKEN" {
		t.Errorf("created with %v", a.Secrets)
	}
	grants := func(key string) string {
		c, err := st.Authenticate(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(c.Secrets, ",")
	}
	if g := grants(keyA); g != "A_TOKEN,B_TOKEN" {
		t.Errorf("key A grants %q", g)
	}
	if g := grants(keyB); g != "C_TOKEN" {
		t.Errorf("key B grants %q", g)
	}
	if k, err := st.SetAPIKeySecrets(ctx, a.ID, []string{"C_TOKEN"}); err != nil || strings.Join(k.Secrets, ",") != "C_TOKEN" || !k.Created.Equal(a.Created) {
		t.Errorf("SetAPIKeySecrets = %+v, %v", k, err)
	}
	if g := grants(keyA); g != "C_TOKEN" {
		t.Errorf("key A grants %q after the change", g)
	}
	if _, err := st.SetAPIKeySecrets(ctx, a.ID, nil); err != nil {
		t.Fatal(err)
	}
	if g := grants(keyA); g != "" {
		t.Errorf("key A grants %q after revoking all", g)
	}
	if _, err := st.SetAPIKeySecrets(ctx, "key-nope", []string{"A_TOKEN"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("grant to an unknown key: %v", err)
	}
	list, err := st.ListAPIKeys(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListAPIKeys = %+v, %v", list, err)
	}
	for _, k := range list {
		if want := map[string]string{a.ID: "", b.ID: "C_TOKEN"}[k.ID]; strings.Join(k.Secrets, ",") != want || k.Secrets == nil {
			t.Errorf("listed %s with %#v, want %q", k.ID, k.Secrets, want)
		}
	}
	if err := st.DeleteAPIKey(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	var rows int
	_ = st.db.QueryRow(`SELECT COUNT(*) FROM api_key_secrets`).Scan(&rows)
	if rows != 0 {
		t.Errorf("%d grants left after deleting the keys' grants and key", rows)
	}
}

// TestOwner: a sandbox's owner is kept in its own column, read back by Get and List, set by
// Update (a warm sandbox handed over); a database of an older moat gains the column, its
// sandboxes the operator's.
func TestOwner(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	// The table as moat made it before owners.
	if _, err := db.Exec(`CREATE TABLE sandboxes (id TEXT PRIMARY KEY, slot INTEGER NOT NULL UNIQUE, state TEXT NOT NULL, data TEXT NOT NULL, token TEXT NOT NULL);
		INSERT INTO sandboxes VALUES('old', 0, 'running', '{"id":"old","state":"running"}', 'tok-old')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if sb, err := st.Get(ctx, "old"); err != nil || sb.Owner != "" || sb.AccessToken != "tok-old" {
		t.Fatalf("an old record: %+v, %v", sb, err)
	}
	a := newSB("a")
	a.Owner = "key-a"
	if err := st.Insert(ctx, a); err != nil {
		t.Fatal(err)
	}
	if sb, err := st.Get(ctx, "a"); err != nil || sb.Owner != "key-a" {
		t.Fatalf("Get: %+v, %v", sb, err)
	}
	var data string
	if err := st.db.QueryRow(`SELECT data FROM sandboxes WHERE id = 'a'`).Scan(&data); err != nil || strings.Contains(data, "key-a") {
		t.Errorf("the owner is in the record's data too: %s (%v)", data, err)
	}
	if _, err := st.Update(ctx, "old", func(sb *sandbox.Sandbox) error { sb.Owner = "key-b"; return nil }); err != nil {
		t.Fatal(err)
	}
	list, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{}
	for _, sb := range list {
		owners[sb.ID] = sb.Owner
	}
	if owners["a"] != "key-a" || owners["old"] != "key-b" {
		t.Errorf("List: owners %v", owners)
	}
	st.Close()
	// Opening again leaves a migrated database as it is.
	if st, err = Open(path); err != nil {
		t.Fatal(err)
	}
	if sb, err := st.Get(ctx, "old"); err != nil || sb.Owner != "key-b" {
		t.Errorf("after reopening: %+v, %v", sb, err)
	}
}

// TestAPIKeyMaxima: a key's maxima are stored with it, returned by Authenticate (so creates
// over the key are bounded by them), listed, and replaced by SetAPIKeyMax; the grants stay.
func TestAPIKeyMaxima(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	max := sandbox.Limits{CPUs: 0.5, MemoryBytes: 1 << 30, Pids: 64, DiskBytes: 2 << 30}
	key, k, err := st.CreateAPIKey(ctx, []string{"A"}, max)
	if err != nil || k.Max != max {
		t.Fatalf("create: %+v %v", k, err)
	}
	if c, err := st.Authenticate(ctx, key); err != nil || c.Max != max {
		t.Errorf("authenticate: %+v %v, want maxima %+v", c, err, max)
	}
	lower := sandbox.Limits{Pids: 32}
	if k, err := st.SetAPIKeyMax(ctx, k.ID, lower); err != nil || k.Max != lower || !slices.Equal(k.Secrets, []string{"A"}) {
		t.Errorf("set: %+v %v", k, err)
	}
	if list, err := st.ListAPIKeys(ctx); err != nil || len(list) != 1 || list[0].Max != lower {
		t.Errorf("list: %+v %v", list, err)
	}
	if c, _ := st.Authenticate(ctx, key); c.Max != lower {
		t.Errorf("authenticate after set: %+v", c.Max)
	}
	if _, err := st.SetAPIKeyMax(ctx, "key-nope", lower); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown key: %v", err)
	}
}

// TestAPIKeyMaxMigration: a database made before keys had maxima gains the column, its
// keys without maxima of their own.
func TestAPIKeyMaxMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "moat.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := st.CreateAPIKey(context.Background(), nil, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.Exec(`ALTER TABLE api_keys DROP COLUMN max`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if c, err := st.Authenticate(context.Background(), key); err != nil || c.Max != (sandbox.Limits{}) {
		t.Errorf("an older key: %+v %v", c, err)
	}
}

// TestEgressUserMigration: an egress table from before issue 15 gains the user column;
// its entries read back with no user, new ones with theirs.
func TestEgressUserMigration(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "moat.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteEgress(ctx, []*egress.Entry{{Sandbox: "sb-1", Proto: "tcp", Name: "old.test", Time: time.Now()}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.Exec(`ALTER TABLE egress DROP COLUMN user`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.WriteEgress(ctx, []*egress.Entry{{Sandbox: "sb-1", Proto: "tcp", Name: "new.test", User: "alice", Time: time.Now()}}, nil); err != nil {
		t.Fatal(err)
	}
	list, err := st.Egress(ctx, "sb-1", 0, 0)
	if err != nil || len(list) != 2 || list[0].User != "" || list[1].User != "alice" || list[1].Name != "new.test" {
		t.Errorf("entries: %+v %v", list, err)
	}
}
