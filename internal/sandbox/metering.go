package sandbox

import (
	"context"
	"time"

	"github.com/moatdev/moat/internal/usage"
)

// Metering (issue 16): the daemon samples every live sandbox's cgroup into the usage
// ledger (Meter, every Config.MeterInterval), and down takes a final sample just before a
// container goes, so the CPU time of its last moments is not lost. State changes are
// charged by the store itself, in the transaction that records them.

// UsageLedger keeps the samples (*store.Store).
type UsageLedger interface {
	// RecordUsage applies one reading of sandbox id taken in state r.State.
	RecordUsage(ctx context.Context, id string, r usage.Reading) error
	// RecordSnapshots charges the snapshots that exist at at.
	RecordSnapshots(ctx context.Context, snaps []SnapshotUsage, at time.Time) error
}

// SnapshotUsage is what the ledger charges of a snapshot: its drive size, from when it was
// made, to the sandbox it was taken of.
type SnapshotUsage struct {
	ID, Sandbox string
	SizeBytes   int64
	CreatedAt   time.Time
}

// SetUsageLedger makes the manager sample into l (nil: no metering). Call before serving.
func (m *Manager) SetUsageLedger(l UsageLedger) { m.ledger = l }

// Meter samples every running or paused sandbox into the ledger. Each sample is taken
// under the sandbox's lock, so a stop cannot come between reading the counters and
// recording them.
func (m *Manager) Meter(ctx context.Context) {
	if m.ledger == nil {
		return
	}
	list, err := m.store.List(ctx)
	if err != nil {
		m.log.Error("listing sandboxes for metering", "err", err)
		return
	}
	for _, sb := range list {
		if sb.State != StateRunning && sb.State != StatePaused {
			continue
		}
		unlock := m.lock(sb.ID)
		if cur, err := m.store.Get(ctx, sb.ID); err == nil {
			m.meterLocked(ctx, cur)
		}
		unlock()
	}
	m.meterSnapshots(ctx)
}

// meterSnapshots charges the snapshots kept now (not a fork's transient one).
func (m *Manager) meterSnapshots(ctx context.Context) {
	snaps, err := m.ListSnapshots(WithCaller(ctx, Caller{Operator: true}))
	if err != nil {
		m.log.Debug("metering: listing snapshots", "err", err)
		return
	}
	out := make([]SnapshotUsage, 0, len(snaps))
	for _, sn := range snaps {
		out = append(out, SnapshotUsage{ID: sn.ID, Sandbox: sn.Sandbox, SizeBytes: sn.SizeBytes, CreatedAt: sn.CreatedAt})
	}
	if err := m.ledger.RecordSnapshots(context.WithoutCancel(ctx), out, time.Now()); err != nil {
		m.log.Error("metering: recording snapshots", "err", err)
	}
}

// meterLocked records one sample of sb (the caller holds its lock); a cgroup that cannot
// be read charges time only.
func (m *Manager) meterLocked(ctx context.Context, sb *Sandbox) {
	if m.ledger == nil || (sb.State != StateRunning && sb.State != StatePaused) {
		return
	}
	r := usage.Reading{At: time.Now(), State: string(sb.State), DriveBytes: sb.Limits.DiskBytes}
	if rt := m.runtimes[sb.Runtime]; rt != nil {
		if st, err := rt.Stats(ctx, sb.ID); err == nil {
			cpu, mem := st.CPUUsageNs, st.MemoryUsed
			r.CPUNs, r.MemBytes = &cpu, &mem
		} else {
			m.log.Debug("metering: reading the cgroup", "sandbox", sb.ID, "err", err)
		}
	}
	if err := m.ledger.RecordUsage(context.WithoutCancel(ctx), sb.ID, r); err != nil {
		m.log.Error("metering: recording a sample", "sandbox", sb.ID, "err", err)
	}
}

// meterFinal is the last sample of sandbox id before down stops its container.
func (m *Manager) meterFinal(ctx context.Context, id string) {
	if m.ledger == nil {
		return
	}
	if sb, err := m.store.Get(ctx, id); err == nil {
		m.meterLocked(ctx, sb)
	}
}
