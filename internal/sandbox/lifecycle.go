package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/initlog"
)

// Lifecycle moves of an existing sandbox: stop, start, pause, resume, delete.

// Stop stops a running or paused sandbox's processes and keeps its drive.
func (m *Manager) Stop(ctx context.Context, id string) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == StateStopped {
		return sb, nil
	}
	if err := checkTransition(id, sb.State, StateStopped); err != nil {
		return nil, err
	}
	return m.stopLocked(ctx, sb, "")
}

func (m *Manager) stopLocked(ctx context.Context, sb *Sandbox, reason string) (*Sandbox, error) {
	return m.stopFor(ctx, sb, reason, "")
}

// stopAfter stops sb (the caller holds its lock) where no caller can be told of a
// failure (a failed start, reconcile, expiry): what goes wrong is logged. stopFor has
// already recorded a failed teardown in the record's error.
func (m *Manager) stopAfter(ctx context.Context, sb *Sandbox, reason, by string) {
	if _, err := m.stopFor(ctx, sb, reason, by); err != nil {
		m.log.Error("recording a stopped sandbox", "sandbox", sb.ID, "reason", reason, "err", err)
	}
}

// event records an event of sandbox id; a failure is logged (the operation it records
// has happened either way).
func (m *Manager) event(ctx context.Context, id, kind, detail string) {
	if err := m.store.AddEvent(context.WithoutCancel(ctx), id, kind, detail); err != nil {
		m.log.Error("recording an event", "sandbox", id, "kind", kind, "err", err)
	}
}

// deleteLogged deletes sandbox id in the background of another operation (a failed
// fork or hand-over, a stale warm sandbox): a failure is logged.
func (m *Manager) deleteLogged(ctx context.Context, id, why string) {
	if err := m.Delete(context.WithoutCancel(ctx), id); err != nil {
		m.log.Error("deleting sandbox", "sandbox", id, "why", why, "err", err)
	}
}

// stopFor is stopLocked recording who stopped the sandbox (Sandbox.StopReason).
func (m *Manager) stopFor(ctx context.Context, sb *Sandbox, reason, by string) (*Sandbox, error) {
	downErr := m.down(sb.ID, sb.Runtime)
	if downErr != nil {
		m.log.Error("stopping sandbox", "sandbox", sb.ID, "err", downErr)
	}
	return m.store.Update(context.WithoutCancel(ctx), sb.ID, func(s *Sandbox) error {
		s.State = StateStopped
		s.Error = reason
		s.StopReason = by
		if downErr != nil {
			s.Error = strings.TrimSpace(reason + " teardown: " + downErr.Error())
		}
		return nil
	})
}

// Start brings a stopped sandbox back with its drive.
func (m *Manager) Start(ctx context.Context, id string) (*Sandbox, error) {
	defer m.busy()() // the warm pools wait (pool.go)
	unlock := m.lock(id)
	defer unlock()
	return m.startLocked(ctx, id)
}

func (m *Manager) startLocked(ctx context.Context, id string) (*Sandbox, error) {
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == StateRunning {
		return sb, nil
	}
	if err := checkTransition(id, sb.State, StateCreating); err != nil {
		return nil, err
	}
	tmpl, err := m.storage.Template(ctx, sb.Template)
	if err != nil {
		return nil, err
	}
	m.layerGC.RLock() // until the record names the layer (snapshot.go)
	extra, repoLayer, err := m.repoLayerOf(ctx, sb)
	if err != nil {
		m.layerGC.RUnlock()
		return nil, err
	}
	_, err = m.store.Update(ctx, id, func(s *Sandbox) error {
		s.State = StateCreating
		s.Error = ""
		s.RepoLayer = repoLayer
		return nil
	})
	m.layerGC.RUnlock()
	if err != nil {
		return nil, err
	}
	if err := m.up(ctx, sb, tmpl, extra); err != nil {
		m.stopAfter(ctx, sb, err.Error(), "")
		return nil, fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	return m.store.Update(ctx, id, func(s *Sandbox) error {
		s.State = StateRunning
		s.OOMCounter, s.PidsCounter = 0, 0
		if s.Timeout > 0 {
			exp := time.Now().UTC().Add(s.Timeout)
			s.ExpiresAt = &exp
		}
		return nil
	})
}

// Pause freezes a running sandbox's processes; Resume thaws them.
func (m *Manager) Pause(ctx context.Context, id string) (*Sandbox, error) {
	return m.freeze(ctx, id, StatePaused)
}

// Resume thaws a paused sandbox.
func (m *Manager) Resume(ctx context.Context, id string) (*Sandbox, error) {
	return m.freeze(ctx, id, StateRunning)
}

func (m *Manager) freeze(ctx context.Context, id string, to State) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == to {
		return sb, nil
	}
	if err := checkTransition(id, sb.State, to); err != nil {
		return nil, err
	}
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return nil, fmt.Errorf("runtime %s unavailable: %w", sb.Runtime, errdefs.ErrUnavailable)
	}
	op := rt.Pause
	if to == StateRunning {
		op = rt.Resume
	}
	if err := op(ctx, id); err != nil {
		return nil, fmt.Errorf("%s sandbox %s: %w", map[State]string{StatePaused: "pausing", StateRunning: "resuming"}[to], id, err)
	}
	return m.store.Update(ctx, id, func(s *Sandbox) error { s.State, s.StopReason = to, ""; return nil })
}

// Delete removes a sandbox. The record turns "deleting" at once; the teardown (container,
// mounts, network, drive) runs in the background, and a daemon that dies meanwhile
// finishes it on its next start. Wait blocks until background deletions are done.
//
// Deleting frees space, so it works also when the data filesystem is full (possible when
// the daemon overcommits drives): if the database cannot record the deletion, the sandbox
// is torn down and its drive removed first, and then the deletion is recorded.
func (m *Manager) Delete(ctx context.Context, id string) error {
	return m.deleteIf(ctx, id, nil)
}

// deleteIf is Delete of a sandbox whose record cond (when not nil) accepts under the
// sandbox's lock; cond's error is returned and nothing is deleted then (names.go).
func (m *Manager) deleteIf(ctx context.Context, id string, cond func(*Sandbox) error) error {
	unlock := m.lock(id)
	m.meterFinal(ctx, id) // metering.go: the last sample while the record still says running
	markDeleting := func() (*Sandbox, error) {
		return m.store.Update(ctx, id, func(s *Sandbox) error {
			if s.State == StateDeleting {
				return nil
			}
			if cond != nil {
				if err := cond(s); err != nil {
					return err
				}
			}
			if err := checkTransition(s.ID, s.State, StateDeleting); err != nil {
				return err
			}
			s.State = StateDeleting
			return nil
		})
	}
	sb, err := markDeleting()
	if errors.Is(err, errdefs.ErrResourceExhausted) {
		m.log.Warn("data filesystem full: freeing the sandbox's drive before recording its deletion", "sandbox", id, "err", err)
		if cur, gerr := m.store.Get(ctx, id); gerr == nil && checkTransition(id, cur.State, StateDeleting) == nil && (cond == nil || cond(cur) == nil) {
			if derr := m.down(id, cur.Runtime); derr != nil {
				m.log.Error("deleting sandbox on a full data filesystem: teardown", "sandbox", id, "err", derr)
			} else if derr := m.storage.DeleteDrive(context.WithoutCancel(ctx), id); derr != nil {
				m.log.Error("deleting sandbox on a full data filesystem: drive", "sandbox", id, "err", derr)
			}
		}
		sb, err = markDeleting()
		// The drive's blocks come back only when its loop device lets go of the unlinked
		// file, a moment after the lazy unmount: try again for a while.
		for wait := time.Now().Add(10 * time.Second); errors.Is(err, errdefs.ErrResourceExhausted) && time.Now().Before(wait) && ctx.Err() == nil; {
			time.Sleep(100 * time.Millisecond)
			sb, err = markDeleting()
		}
	}
	unlock()
	if err != nil {
		return err
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		m.finishDelete(sb)
	}()
	return nil
}

// finishDelete removes a deleting sandbox: container, mounts, network, drive, record. A
// teardown that fails is retried in the background with backoff (retryDelete) until it
// succeeds or the manager closes; a daemon that stops meanwhile finishes it when it starts
// again (Reconcile).
func (m *Manager) finishDelete(sb *Sandbox) {
	unlock := m.lock(sb.ID)
	err := m.remove(sb)
	unlock()
	if err != nil {
		m.log.Error("deleting sandbox; retrying", "sandbox", sb.ID, "err", err)
		m.retryDelete(sb)
		return
	}
	if sb.RepoLayer != nil {
		m.collectLayers(context.Background()) // its repository layer may be unused now (snapshot.go)
	}
}

// retryDelete retries remove for sb in the background, backing off from 1 s to 30 s,
// until it succeeds or the manager closes.
func (m *Manager) retryDelete(sb *Sandbox) {
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		for attempt := 1; ; attempt++ {
			select {
			case <-m.done:
				return
			case <-time.After(deleteBackoff(attempt)):
			}
			unlock := m.lock(sb.ID)
			err := m.remove(sb)
			unlock()
			if err == nil {
				m.log.Info("deleted sandbox after retrying", "sandbox", sb.ID, "attempts", attempt+1)
				return
			}
			m.log.Warn("deleting sandbox failed again", "sandbox", sb.ID, "attempt", attempt+1, "err", err)
		}
	}()
}

// deleteBackoff is the wait before the given retry (1, 2, …) of a failed deletion.
func deleteBackoff(attempt int) time.Duration {
	return min(time.Second<<min(attempt-1, 5), 30*time.Second)
}

// remove is one attempt at removing everything of sandbox sb, in an order that keeps what
// is left findable: teardown (down), then the drive, then the record. It is idempotent;
// the caller holds the sandbox's lock.
func (m *Manager) remove(sb *Sandbox) error {
	if err := m.down(sb.ID, sb.Runtime); err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	ctx := context.Background()
	if err := m.storage.DeleteDrive(ctx, sb.ID); err != nil {
		return fmt.Errorf("drive: %w", err)
	}
	m.egress.Forget(sb.ID)
	_ = initlog.Remove(m.LogPath(sb.ID))
	if err := m.store.Delete(ctx, sb.ID); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// destroy removes every trace of a sandbox that never became usable (a failed or
// interrupted create). The caller holds the sandbox's lock. The record turns "deleting"
// first, so what a failed teardown leaves is retried (finishDelete) and never shows up as
// a sandbox someone could start.
func (m *Manager) destroy(id string) {
	ctx := context.Background()
	sb, err := m.store.Update(ctx, id, func(s *Sandbox) error { s.State = StateDeleting; return nil })
	if err != nil {
		m.log.Error("cleaning up failed sandbox", "sandbox", id, "err", err)
		sb = &Sandbox{ID: id}
	}
	if err := m.remove(sb); err != nil {
		m.log.Error("cleaning up failed sandbox; retrying", "sandbox", id, "err", err)
		m.retryDelete(sb)
	}
}
