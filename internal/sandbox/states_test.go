package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// memStore is a Store of records in memory (tests).
type memStore struct{ m map[string]Sandbox }

func (s *memStore) Insert(_ context.Context, sb *Sandbox) error { s.m[sb.ID] = *sb; return nil }
func (s *memStore) Update(_ context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error) {
	cur, ok := s.m[id]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	if err := fn(&cur); err != nil {
		return nil, err
	}
	s.m[id] = cur
	return &cur, nil
}
func (s *memStore) Get(_ context.Context, id string) (*Sandbox, error) {
	cur, ok := s.m[id]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	return &cur, nil
}
func (s *memStore) List(context.Context) ([]*Sandbox, error)               { return nil, nil }
func (s *memStore) Delete(_ context.Context, id string) error              { delete(s.m, id); return nil }
func (s *memStore) AddEvent(context.Context, string, string, string) error { return nil }

// TestCheckedStore: an update that moves a record where the lifecycle table does not allow
// fails with ErrConflict and leaves the record as it was; allowed moves and updates that
// keep the state pass.
func TestCheckedStore(t *testing.T) {
	ctx := context.Background()
	all := []State{StateCreating, StateRunning, StatePaused, StateStopped, StateDeleting}
	for _, from := range all {
		for _, to := range all {
			st := checkedStore{&memStore{m: map[string]Sandbox{"sb-1": {ID: "sb-1", State: from}}}}
			_, err := st.Update(ctx, "sb-1", func(s *Sandbox) error { s.State, s.Error = to, "changed"; return nil })
			cur, _ := st.Get(ctx, "sb-1")
			switch ok := from == to || CanTransition(from, to); {
			case ok && (err != nil || cur.State != to):
				t.Errorf("%s → %s: %v, state %s", from, to, err, cur.State)
			case !ok && (!errors.Is(err, errdefs.ErrConflict) || cur.State != from || cur.Error != ""):
				t.Errorf("%s → %s was let through: %v, record %+v", from, to, err, cur)
			}
		}
	}
	if CanTransition(StateDeleting, StateRunning) || !StateDeleting.Known() || State("gone").Known() {
		t.Error("the table: deleting is final, and only the five states are known")
	}
}

// TestTraitsOf: runsc has its own kernel and fixed limits; runc, crun and an unknown name
// are containers on the shared kernel.
func TestTraitsOf(t *testing.T) {
	for _, c := range []struct {
		rt          string
		own, fixed  bool
		isolationIn string
	}{
		{"runsc", true, true, "gVisor"},
		{"runc", false, false, "shared kernel"},
		{"crun", false, false, "shared kernel"},
		{"", false, false, "shared kernel"},
	} {
		tr := TraitsOf(c.rt)
		if tr.OwnKernel != c.own || tr.FixedLimits != c.fixed || !strings.Contains(tr.Isolation, c.isolationIn) {
			t.Errorf("TraitsOf(%q) = %+v", c.rt, tr)
		}
	}
}
