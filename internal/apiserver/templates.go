package apiserver

import (
	"context"
	"fmt"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
)

// TemplateAdmin removes templates and builds them from Dockerfiles.
type TemplateAdmin interface {
	Remove(ctx context.Context, name string, force bool) (v1.TemplateRemoval, error)
	BuildFile(ctx context.Context, req v1.DockerfileRequest, progress func(string)) (v1.Template, *v1.BuildReport, error)
}

// SetTemplateAdmin installs template removal and Dockerfile builds.
func (s *Server) SetTemplateAdmin(t TemplateAdmin) { s.templateAdmin = t }

func (s *Server) templateRoutes() []route {
	return []route{
		{"DELETE /v1/templates/{name}", s.removeTemplate, socketOnly},
		{"POST /v1/templates/dockerfile", s.buildDockerfile, socketOnly},
	}
}

// adminReady answers 501 when template administration is not installed. Its routes are
// socketOnly in the route table (templates are shared by every API key, and a build reads
// its context from the daemon's host), so only the operator gets here.
func (s *Server) adminReady(w http.ResponseWriter, what string) bool {
	if s.templateAdmin == nil {
		writeError(w, fmt.Errorf("%s is not available: %w", what, errdefs.ErrNotImplemented))
		return false
	}
	return true
}

// removeTemplate serves DELETE /v1/templates/{name}[?force=true].
func (s *Server) removeTemplate(w http.ResponseWriter, r *http.Request) {
	if !s.adminReady(w, "template removal") {
		return
	}
	force := false
	switch r.URL.Query().Get("force") {
	case "", "false", "0":
	case "true", "1":
		force = true
	default:
		writeError(w, fmt.Errorf("force=%q: want true or false: %w", r.URL.Query().Get("force"), errdefs.ErrInvalidArgument))
		return
	}
	out, err := s.templateAdmin.Remove(r.Context(), r.PathValue("name"), force)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// buildDockerfile serves POST /v1/templates/dockerfile: progress as NDJSON lines, the last
// with the template and the build report, or the error.
func (s *Server) buildDockerfile(w http.ResponseWriter, r *http.Request) {
	if !s.adminReady(w, "building templates from a Dockerfile") {
		return
	}
	var req v1.DockerfileRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	enc, progress := progressStream(w)
	t, rep, err := s.templateAdmin.BuildFile(r.Context(), req, progress)
	if err != nil {
		s.log.Warn("template build failed", "name", req.Name, "err", err)
		_ = enc.Encode(v1.Progress{Done: true, Error: ClientMessage(err)})
		return
	}
	_ = enc.Encode(v1.Progress{Done: true, Result: &t, Build: rep})
}
