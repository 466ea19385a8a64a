package store

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestE2BBuilds: records are replaced by id, survive reopening the database, come back
// oldest first, and only the newest keep are kept.
func TestE2BBuilds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		id := fmt.Sprintf("b%d", i)
		if err := s.PutE2BBuild(ctx, id, "app", "building", t0.Add(time.Duration(i)*time.Minute), []byte(`{"v":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutE2BBuild(ctx, "b4", "app", "ready", t0.Add(4*time.Minute), []byte(`{"v":"b4 ready"}`)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.E2BBuilds(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"v":"b2"}`, `{"v":"b3"}`, `{"v":"b4 ready"}`}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("record %d: %s, want %s", i, got[i], want[i])
		}
	}
	var status string
	if err := s.db.QueryRow(`SELECT status FROM e2b_builds WHERE id = 'b4'`).Scan(&status); err != nil || status != "ready" {
		t.Errorf("status column of b4: %q %v", status, err)
	}
	if all, _ := s.E2BBuilds(ctx, 100); len(all) != 3 {
		t.Errorf("after pruning to 3: %d records", len(all))
	}
}
