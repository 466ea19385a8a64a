package sandbox

import "context"

// checkedStore is the store as the Manager uses it: every Update that changes a record's
// state is checked against the lifecycle table (CanTransition) inside the same update, so
// no code path can move a sandbox where the table does not allow, whatever its own checks.
type checkedStore struct{ Store }

func (c checkedStore) Update(ctx context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error) {
	return c.Store.Update(ctx, id, func(s *Sandbox) error {
		from := s.State
		if err := fn(s); err != nil {
			return err
		}
		if s.State != from {
			return checkTransition(id, from, s.State)
		}
		return nil
	})
}
