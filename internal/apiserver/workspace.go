package apiserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Workspaces is the surface of `moat diff` and `moat export`: a sandbox's /workspace
// against the commit its --repo layer was made from. Implemented in internal/daemon.
type Workspaces interface {
	Diff(ctx context.Context, id string) (v1.WorkspaceDiff, error)
	// Patch writes the patch (git diff format, binary included) to out.
	Patch(ctx context.Context, id string, out io.Writer) error
	Export(ctx context.Context, id string, req v1.ExportRequest) (v1.ExportResult, error)
}

// SetWorkspaces enables the diff and export routes (before the server is used).
func (s *Server) SetWorkspaces(w Workspaces) { s.workspaces = w }

func (s *Server) workspaceRoutes() []route {
	return []route{
		{"GET /v1/sandboxes/{id}/diff", s.workspaceDiff, byKey},
		{"GET /v1/sandboxes/{id}/diff/patch", s.workspacePatch, byKey},
		{"POST /v1/sandboxes/{id}/export", s.workspaceExport, byKey},
	}
}

func (s *Server) workspacesOrError(w http.ResponseWriter) bool {
	if s.workspaces == nil {
		writeError(w, fmt.Errorf("workspace diff and export are not available: %w", errdefs.ErrNotImplemented))
		return false
	}
	return true
}

func (s *Server) workspaceDiff(w http.ResponseWriter, r *http.Request) {
	if !s.workspacesOrError(w) {
		return
	}
	d, err := s.workspaces.Diff(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) workspacePatch(w http.ResponseWriter, r *http.Request) {
	if !s.workspacesOrError(w) {
		return
	}
	// Bounded by the quarantine's patch limit; buffered so that an error is an error
	// answer, not a cut patch.
	var buf bytes.Buffer
	if err := s.workspaces.Patch(r.Context(), r.PathValue("id"), &buf); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/x-patch; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w)
}

func (s *Server) workspaceExport(w http.ResponseWriter, r *http.Request) {
	if !s.workspacesOrError(w) {
		return
	}
	var req v1.ExportRequest
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
	}
	if req.AllowProtected && !sandbox.CallerFrom(r.Context()).Operator {
		writeError(w, fmt.Errorf("allow_protected is for the operator (the daemon's unix socket): %w", errdefs.ErrPermissionDenied))
		return
	}
	res, err := s.workspaces.Export(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
