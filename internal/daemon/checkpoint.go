package daemon

import (
	"context"
	"slices"

	"github.com/moatdev/moat/internal/doctor"
	"github.com/moatdev/moat/internal/sandbox"
)

// checkpointChecks are the doctor's lines about memory checkpoints, one per runtime.
func checkpointChecks(ctx context.Context, m *sandbox.Manager) []doctor.Check {
	support := m.MemorySupport(ctx)
	names := make([]string, 0, len(support))
	for n := range support {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]doctor.Check, 0, len(names))
	for _, n := range names {
		s := support[n]
		out = append(out, doctor.MemoryCheckpoint(doctor.MemoryCheckpointFacts{
			Runtime: n, RuntimeCan: s.OK, Reason: s.Reason, Fix: s.Fix, Built: sandbox.MemoryRestoreBuilt,
		}))
	}
	return out
}
