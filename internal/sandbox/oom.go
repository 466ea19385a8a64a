package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// WatchOOM records the OOM kills of running and paused sandboxes that the daemon has not
// seen yet (noteOOM). The daemon calls it every second; each sandbox costs one read of a
// small cgroup file.
func (m *Manager) WatchOOM(ctx context.Context) {
	list, err := m.store.List(ctx)
	if err != nil {
		m.log.Error("listing sandboxes for OOM kills", "err", err)
		return
	}
	for _, sb := range list {
		if sb.State == StateRunning || sb.State == StatePaused {
			m.noteOOM(ctx, sb)
		}
	}
}

// errSeen aborts a record update whose OOM kills someone else recorded first.
var errSeen = errors.New("OOM kills already recorded")

// noteOOM compares sandbox sb's OOM-kill counter (its container's memory cgroup) with the
// last one recorded and, when it grew, records the new kills: the record's OOMKills,
// LastOOMAt and OOMCounter, and an "oom_kill" event saying how many. It returns how many
// kills were new, and the record's LastOOMAt after it (recorded by this call or, when the
// OOM watch got there first, by the watch: sb may be older than the store).
func (m *Manager) noteOOM(ctx context.Context, sb *Sandbox) (uint64, *time.Time) {
	last := sb.LastOOMAt
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return 0, last
	}
	n, err := rt.OOMKills(ctx, sb.ID)
	if err != nil || n <= sb.OOMCounter {
		return 0, last
	}
	now := time.Now().UTC()
	var added, total uint64
	_, err = m.store.Update(ctx, sb.ID, func(s *Sandbox) error {
		last = s.LastOOMAt
		if n <= s.OOMCounter {
			return errSeen
		}
		added = n - s.OOMCounter
		s.OOMCounter, s.OOMKills, s.LastOOMAt = n, s.OOMKills+added, &now
		total, last = s.OOMKills, &now
		return nil
	})
	if err != nil {
		if !errors.Is(err, errSeen) {
			m.log.Error("recording OOM kills", "sandbox", sb.ID, "err", err)
		}
		return 0, last
	}
	detail := fmt.Sprintf("count=%d total=%d memory_limit=%d", added, total, sb.Limits.MemoryBytes)
	if err := m.store.AddEvent(ctx, sb.ID, "oom_kill", detail); err != nil {
		m.log.Error("recording OOM kills", "sandbox", sb.ID, "err", err)
	}
	m.log.Warn("the OOM killer killed processes in a sandbox", "sandbox", sb.ID, "count", added, "total", total)
	return added, last
}
