package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Snapshots is the surface of snapshots, restore and fork. Implemented by
// *sandbox.Manager. (E2B's createSnapshot/listSnapshots/deleteSnapshot,
// Sandbox.create(snapshotId) and fork(count) map onto these one to one.)
type Snapshots interface {
	TakeSnapshot(ctx context.Context, id, name string) (*sandbox.Snapshot, error)
	ListSnapshots(ctx context.Context) ([]*sandbox.Snapshot, error)
	GetSnapshot(ctx context.Context, id string) (*sandbox.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	Restore(ctx context.Context, id, snap string) (*sandbox.Sandbox, error)
	Fork(ctx context.Context, id string, o sandbox.ForkOptions) (*sandbox.ForkReport, error)
}

// SetSnapshots enables the snapshot routes (before the server is used).
func (s *Server) SetSnapshots(sn Snapshots) { s.snaps = sn }

func (s *Server) snapshotRoutes() []route {
	return []route{
		{"POST /v1/sandboxes/{id}/snapshot", s.takeSnapshot, byKey},
		{"POST /v1/sandboxes/{id}/restore", s.restoreSnapshot, byKey},
		{"POST /v1/sandboxes/{id}/fork", s.forkSandbox, byKey},
		{"GET /v1/snapshots", s.listSnapshots, byKey},
		{"GET /v1/snapshots/{snap}", s.getSnapshot, byKey},
		{"DELETE /v1/snapshots/{snap}", s.deleteSnapshot, byKey},
	}
}

func (s *Server) snapsOrError(w http.ResponseWriter) bool {
	if s.snaps == nil {
		writeError(w, fmt.Errorf("snapshots are not available: %w", errdefs.ErrNotImplemented))
		return false
	}
	return true
}

// ToAPISnapshot converts a snapshot record to its wire form.
func ToAPISnapshot(sn *sandbox.Snapshot) v1.Snapshot {
	out := v1.Snapshot{
		ID: sn.ID, Name: sn.Name, Sandbox: sn.Sandbox, Parent: sn.Parent, Template: sn.Template, Runtime: sn.Runtime,
		Repo: sn.Repo, CreatedAt: sn.CreatedAt, SizeBytes: sn.SizeBytes, Method: sn.Method,
	}
	if sn.RepoLayer != nil {
		out.RepoLayer = sn.RepoLayer.ID
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (s *Server) takeSnapshot(w http.ResponseWriter, r *http.Request) {
	if !s.snapsOrError(w) {
		return
	}
	var req v1.SnapshotRequest
	if err := DecodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	t0 := time.Now()
	sn, err := s.snaps.TakeSnapshot(r.Context(), r.PathValue("id"), req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	out := ToAPISnapshot(sn)
	out.TookMS = ms(time.Since(t0))
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	if !s.snapsOrError(w) {
		return
	}
	list, err := s.snaps.ListSnapshots(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]v1.Snapshot, 0, len(list))
	for _, sn := range list {
		out = append(out, ToAPISnapshot(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	if !s.snapsOrError(w) {
		return
	}
	sn, err := s.snaps.GetSnapshot(r.Context(), r.PathValue("snap"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ToAPISnapshot(sn))
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if !s.snapsOrError(w) {
		return
	}
	if err := s.snaps.DeleteSnapshot(r.Context(), r.PathValue("snap")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	if !s.snapsOrError(w) {
		return
	}
	var req v1.RestoreRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Snapshot == "" {
		writeError(w, fmt.Errorf("snapshot is required: %w", errdefs.ErrInvalidArgument))
		return
	}
	sb, err := s.snaps.Restore(r.Context(), r.PathValue("id"), req.Snapshot)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ToAPI(sb))
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) {
	if !s.snapsOrError(w) {
		return
	}
	req := v1.ForkRequest{Count: 1}
	if err := DecodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	t0 := time.Now()
	rep, err := s.snaps.Fork(r.Context(), r.PathValue("id"), sandbox.ForkOptions{Count: req.Count, Lazy: req.Lazy})
	if err != nil {
		writeError(w, err)
		return
	}
	out := v1.ForkReport{Parent: rep.Parent, Inherited: rep.Inherited, Renewed: rep.Renewed, TookMS: ms(time.Since(t0))}
	for _, f := range rep.Forks {
		out.Forks = append(out.Forks, ToAPI(f))
	}
	writeJSON(w, http.StatusCreated, out)
}
