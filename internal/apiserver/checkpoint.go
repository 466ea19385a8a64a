package apiserver

import (
	"context"
	"fmt"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Checkpoints is the surface of checkpoints (memory where the runtime can, otherwise a
// filesystem snapshot). Implemented by *sandbox.Manager, found on the Snapshots given to
// SetSnapshots.
type Checkpoints interface {
	Checkpoint(ctx context.Context, id, name string) (*sandbox.CheckpointResult, error)
}

func (s *Server) checkpointRoutes() []route {
	return []route{{"POST /v1/sandboxes/{id}/checkpoint", s.checkpoint, byKey}}
}

// ToAPICheckpoint converts a checkpoint result to its wire form.
func ToAPICheckpoint(c *sandbox.CheckpointResult) v1.Checkpoint {
	return v1.Checkpoint{Method: c.Method, Reason: c.Reason, Note: c.Note, Snapshot: ToAPISnapshot(c.Snapshot), TookMS: ms(c.Took)}
}

func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	cp, ok := s.snaps.(Checkpoints)
	if !ok {
		writeError(w, fmt.Errorf("checkpoints are not available: %w", errdefs.ErrNotImplemented))
		return
	}
	var req v1.CheckpointRequest
	if err := DecodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	res, err := cp.Checkpoint(r.Context(), r.PathValue("id"), req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, ToAPICheckpoint(res))
}
