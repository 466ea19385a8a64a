package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Timeouts: expiry of sandboxes past their deadline, and moving a deadline.

// Expire stops every running sandbox whose timeout has passed. The daemon calls it
// periodically.
func (m *Manager) Expire(ctx context.Context, now time.Time) {
	list, err := m.store.List(ctx)
	if err != nil {
		m.log.Error("listing sandboxes for expiry", "err", err)
		return
	}
	for _, sb := range list {
		if sb.Warm || sb.ExpiresAt == nil || now.Before(*sb.ExpiresAt) || (sb.State != StateRunning && sb.State != StatePaused) {
			continue
		}
		m.expire(ctx, sb.ID, now)
	}
}

// expire acts on one sandbox's timeout under its lock, after checking again that the
// deadline has passed (a concurrent SetTimeout may have moved it) and that the sandbox is
// running or paused.
func (m *Manager) expire(ctx context.Context, id string, now time.Time) {
	unlock := m.lock(id)
	cur, err := m.store.Get(ctx, id)
	if err != nil || cur.ExpiresAt == nil || now.Before(*cur.ExpiresAt) || (cur.State != StateRunning && cur.State != StatePaused) {
		unlock()
		return
	}
	m.log.Info("sandbox timeout reached", "sandbox", id, "on_timeout", cur.OnTimeout)
	switch cur.OnTimeout {
	case OnTimeoutDelete:
		unlock() // Delete takes the lock itself
		if err := m.Delete(ctx, id); err != nil {
			m.log.Error("deleting sandbox at its timeout", "sandbox", id, "err", err)
		}
		return
	case OnTimeoutPause:
		// Frozen, with no deadline until someone resumes it.
		if cur.State == StateRunning {
			if err := m.runtimes[cur.Runtime].Pause(ctx, id); err != nil {
				m.log.Error("pausing sandbox at its timeout", "sandbox", id, "err", err)
				m.stopAfter(ctx, cur, "timeout reached; pausing failed: "+err.Error(), "")
				break
			}
		}
		if _, err := m.store.Update(ctx, id, func(s *Sandbox) error {
			if s.State != StateRunning && s.State != StatePaused {
				return fmt.Errorf("sandbox %s became %s: %w", id, s.State, errdefs.ErrConflict)
			}
			s.State, s.ExpiresAt, s.StopReason = StatePaused, nil, StopTimeout
			return nil
		}); err != nil {
			m.log.Error("recording a sandbox paused at its timeout", "sandbox", id, "err", err)
		}
	default:
		m.stopAfter(ctx, cur, "timeout reached", StopTimeout)
	}
	unlock()
}

// SetTimeout makes sandbox id's timeout end d from now (d ≤ 0: no deadline); a later
// start counts d again.
func (m *Manager) SetTimeout(ctx context.Context, id string, d time.Duration) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	return m.store.Update(ctx, id, func(s *Sandbox) error {
		if s.Warm || s.State == StateDeleting {
			return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
		}
		if d <= 0 {
			s.ExpiresAt = nil
			return nil
		}
		exp := time.Now().UTC().Add(d)
		s.Timeout, s.ExpiresAt = d, &exp
		return nil
	})
}
