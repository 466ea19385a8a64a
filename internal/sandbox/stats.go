package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Observing a sandbox (issue 13 item 8): `moat stats` (Usage) and the pids-limit events of
// `moat events` (WatchPids). The OOM kills are oom.go's.

// PidsStats are a container's task figures from its pids cgroup.
type PidsStats struct {
	Current uint64 // tasks now
	Limit   uint64 // the pids limit (0: none)
	// LimitHits counts the forks refused at the limit since the container started (the
	// cgroup's pids.events "max"; 0 where the runtime cannot tell).
	LimitHits uint64
}

// PidsCounter is a Runtime that reads its containers' pids cgroup (runtime.OCI). A runtime
// without it reports no pids.
type PidsCounter interface {
	Pids(ctx context.Context, id string) (PidsStats, error)
}

// NetCounters are the bytes and packets a sandbox sent and received over its link, since
// its network was set up (each start).
type NetCounters struct {
	RxBytes, TxBytes     uint64
	RxPackets, TxPackets uint64
}

// NetCounter is a Network that counts a sandbox's traffic (netns.Manager). Without it,
// Usage reports no network figures.
type NetCounter interface {
	Counters(ctx context.Context, id string) (NetCounters, error)
}

// Usage is one `moat stats` sample of a running (or paused) sandbox.
type Usage struct {
	Metric
	CPUUsageNs uint64 // cumulative CPU time of its processes (this run)
	Pids       *PidsStats
	Net        *NetCounters
}

// Usage samples sandbox id: CPU over DefaultSampleWindow, memory, drive (Sample), tasks and
// network counters. A sandbox that is not running or paused is ErrConflict; figures a
// runtime or network cannot give are left out (nil), not errors.
func (m *Manager) Usage(ctx context.Context, id string) (Usage, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return Usage{}, err
	}
	if sb.State != StateRunning && sb.State != StatePaused {
		return Usage{}, fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrConflict)
	}
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return Usage{}, fmt.Errorf("runtime %s unavailable: %w", sb.Runtime, errdefs.ErrUnavailable)
	}
	var u Usage
	if u.Metric, err = Sample(ctx, rt, id, filepath.Join(m.paths(id).dir, "drive"), 0); err != nil {
		return Usage{}, err
	}
	if st, err := rt.Stats(ctx, id); err == nil {
		u.CPUUsageNs = st.CPUUsageNs
	}
	if pc, ok := rt.(PidsCounter); ok {
		if p, err := pc.Pids(ctx, id); err == nil {
			u.Pids = &p
		} else {
			m.log.Debug("stats: pids", "sandbox", id, "err", err)
		}
	}
	if nc, ok := m.network.(NetCounter); ok {
		if n, err := nc.Counters(ctx, id); err == nil {
			u.Net = &n
		} else {
			m.log.Debug("stats: network counters", "sandbox", id, "err", err)
		}
	}
	return u, nil
}

// WatchPids records, as "pids_limit" events, the forks that failed at a running sandbox's
// pids limit since the daemon last looked (the pids cgroup's "max" counter; runtimes that
// cannot tell, runsc, report none). The daemon calls it with WatchOOM, every second; each
// sandbox costs one read of a small cgroup file.
func (m *Manager) WatchPids(ctx context.Context) {
	list, err := m.store.List(ctx)
	if err != nil {
		m.log.Error("listing sandboxes for pids-limit events", "err", err)
		return
	}
	for _, sb := range list {
		if sb.State == StateRunning || sb.State == StatePaused {
			m.notePids(ctx, sb)
		}
	}
}

// errPidsSeen aborts a record update whose limit hits someone else recorded first.
var errPidsSeen = errors.New("pids-limit hits already recorded")

// notePids records sandbox sb's new pids-limit hits: the record's PidsLimitHits and
// PidsCounter and a "pids_limit" event. It returns how many were new.
func (m *Manager) notePids(ctx context.Context, sb *Sandbox) uint64 {
	pc, ok := m.runtimes[sb.Runtime].(PidsCounter)
	if !ok || TraitsOf(sb.Runtime).OwnKernel {
		return 0
	}
	p, err := pc.Pids(ctx, sb.ID)
	if err != nil || p.LimitHits <= sb.PidsCounter {
		return 0
	}
	now := time.Now().UTC()
	var added, total uint64
	_, err = m.store.Update(ctx, sb.ID, func(s *Sandbox) error {
		if p.LimitHits <= s.PidsCounter {
			return errPidsSeen
		}
		added = p.LimitHits - s.PidsCounter
		s.PidsCounter, s.PidsLimitHits, s.LastPidsLimitAt = p.LimitHits, s.PidsLimitHits+added, &now
		total = s.PidsLimitHits
		return nil
	})
	if err != nil {
		if !errors.Is(err, errPidsSeen) {
			m.log.Error("recording pids-limit hits", "sandbox", sb.ID, "err", err)
		}
		return 0
	}
	detail := fmt.Sprintf("forks_refused=%d total=%d pids_limit=%d", added, total, p.Limit)
	if err := m.store.AddEvent(ctx, sb.ID, "pids_limit", detail); err != nil {
		m.log.Error("recording pids-limit hits", "sandbox", sb.ID, "err", err)
	}
	m.log.Warn("a sandbox reached its pids limit", "sandbox", sb.ID, "forks_refused", added, "total", total)
	return added
}
