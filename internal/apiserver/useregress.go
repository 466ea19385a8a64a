package apiserver

import (
	"context"
	"fmt"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// userEgressSetter is the sandbox surface of per-user egress (*sandbox.Manager).
type userEgressSetter interface {
	SetUserEgress(ctx context.Context, id, name string, ue *sandbox.UserEgress) (*sandbox.UserEgressResult, error)
}

func (s *Server) userEgressRoutes() []route {
	return []route{
		{"PUT /v1/sandboxes/{id}/users/{name}/egress", s.setUserEgress, byKey},
		{"DELETE /v1/sandboxes/{id}/users/{name}/egress", s.setUserEgress, byKey},
	}
}

// setUserEgress serves PUT (the body: v1.SetUserEgressRequest) and DELETE (back to the
// sandbox's egress) of /v1/sandboxes/{id}/users/{name}/egress.
func (s *Server) setUserEgress(w http.ResponseWriter, r *http.Request) {
	m, ok := s.sandboxes.(userEgressSetter)
	if !ok {
		writeError(w, fmt.Errorf("per-user egress: %w", errdefs.ErrNotImplemented))
		return
	}
	var ue *sandbox.UserEgress
	if r.Method == http.MethodPut {
		var req v1.SetUserEgressRequest
		if err := decode(r, &req); err != nil {
			writeError(w, err)
			return
		}
		ue = &sandbox.UserEgress{Allow: req.Allow, Credentials: req.Credentials}
	}
	res, err := m.SetUserEgress(r.Context(), r.PathValue("id"), r.PathValue("name"), ue)
	if err != nil {
		writeError(w, err)
		return
	}
	out := v1.UserEgressResponse{Sandbox: res.Sandbox.ID, User: res.User.Name, UID: res.User.UID, ConnectionsCut: res.Cut}
	if e := res.User.Egress; e != nil {
		out.Egress = &v1.UserEgress{Allow: e.Allow, Credentials: e.Credentials}
		if out.Egress.Allow == nil {
			out.Egress.Allow = []string{}
		}
	}
	writeJSON(w, http.StatusOK, out)
}
