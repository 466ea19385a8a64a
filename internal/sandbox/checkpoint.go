package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// MemorySupport says whether a runtime can checkpoint a moat sandbox's processes (memory,
// registers, open files) to disk and restore them, and if not, why and what would fix it.
type MemorySupport struct {
	OK     bool   `json:"ok"`
	Reason string `json:"reason"`
	Fix    string `json:"fix,omitempty"`
}

// Checkpointer is implemented by runtimes that can tell whether they checkpoint memory on
// this host (internal/runtime's OCI driver). A runtime without it cannot.
type Checkpointer interface {
	MemoryCheckpoint(ctx context.Context) MemorySupport
}

// Checkpoint methods.
const (
	// CheckpointMemory: the processes' memory image and the drive snapshot (not built yet:
	// no runtime on the hosts moat was tested on can checkpoint a moat sandbox).
	CheckpointMemory = "memory"
	// CheckpointFilesystem: a filesystem snapshot only; the processes are not kept.
	CheckpointFilesystem = "filesystem"
)

// CheckpointNote is what a filesystem checkpoint's caller is told about what it lacks.
const CheckpointNote = "processes and memory were not saved, only the filesystem: `moat restore ID SNAPSHOT` or `moat create --from SNAPSHOT` start the sandbox's processes afresh"

// CheckpointResult is the answer of a checkpoint: how it was made, why not with memory, and
// the snapshot holding it.
type CheckpointResult struct {
	Method   string    `json:"method"`
	Reason   string    `json:"reason,omitempty"` // why not "memory"
	Note     string    `json:"note,omitempty"`
	Snapshot *Snapshot `json:"snapshot"`
	Took     time.Duration
}

// MemorySupportOf asks rt whether it can checkpoint memory here.
func MemorySupportOf(ctx context.Context, rt Runtime) MemorySupport {
	c, ok := rt.(Checkpointer)
	if !ok {
		return MemorySupport{Reason: fmt.Sprintf("runtime %s: moat has no memory checkpoint for it", rt.Name())}
	}
	return c.MemoryCheckpoint(ctx)
}

// checkpointMethod decides how a checkpoint is made from what the runtime supports. Pure.
// A memory checkpoint needs both the runtime's support and moat's restore of a container
// from its image into a sandbox's namespaces, drive and network, which is not built: with
// no runtime here able to checkpoint a moat sandbox it could not be tested (notes/ckpt.md).
// Until it is, every checkpoint is a filesystem one, with the runtime's reason when it has
// one.
func checkpointMethod(runtime string, s MemorySupport) (method, reason string) {
	if !s.OK {
		return CheckpointFilesystem, runtime + ": " + s.Reason
	}
	return CheckpointFilesystem, runtime + ": the runtime can checkpoint memory here (" + s.Reason + "), but moat's restore of a sandbox from a memory image is not built yet"
}

// Checkpoint saves sandbox id's state as snapshot named name: with its processes' memory
// where the runtime can (see checkpointMethod), otherwise its filesystem only, saying why.
// The sandbox keeps its state (a running sandbox keeps running).
func (m *Manager) Checkpoint(ctx context.Context, id, name string) (*CheckpointResult, error) {
	t0 := time.Now()
	sb, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	rt, ok := m.runtimes[sb.Runtime]
	if !ok {
		return nil, fmt.Errorf("sandbox %s: runtime %s is not available: %w", id, sb.Runtime, errdefs.ErrUnavailable)
	}
	method, reason := checkpointMethod(sb.Runtime, MemorySupportOf(ctx, rt))
	m.at("checkpoint-decided")
	sn, err := m.TakeSnapshot(ctx, id, name)
	if err != nil {
		return nil, err
	}
	m.event(context.WithoutCancel(ctx), id, "checkpoint", method+" "+sn.ID+": "+reason)
	return &CheckpointResult{Method: method, Reason: reason, Note: CheckpointNote, Snapshot: sn, Took: time.Since(t0)}, nil
}

// MemorySupport says, for each runtime of the manager, whether it can checkpoint a
// sandbox's memory on this host (for `moat doctor`).
func (m *Manager) MemorySupport(ctx context.Context) map[string]MemorySupport {
	out := make(map[string]MemorySupport, len(m.runtimes))
	for name, rt := range m.runtimes {
		out[name] = MemorySupportOf(ctx, rt)
	}
	return out
}

// MemoryRestoreBuilt reports whether moat restores sandboxes from memory images (see
// checkpointMethod): not yet.
const MemoryRestoreBuilt = false
