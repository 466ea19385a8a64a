package apiserver

import (
	"context"
	"errors"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Names, labels, references and prune (issue 13 item 4; sandbox/names.go).

// nameRoutes are the routes of this file.
func (s *Server) nameRoutes() []route {
	return []route{{"POST /v1/sandboxes/prune", s.prune, byKey}}
}

// resolvePath makes the {id} of a native route the ID of the sandbox it refers to: a full
// ID passes as it is (the handler, and owned for API keys, look it up; the operator may
// name deleted sandboxes' IDs, whose events stay); a name or an ID prefix is resolved among
// the sandboxes the caller may use (sandbox.Resolve). This is the one place names and
// prefixes become IDs, for every native route that names a sandbox.
func (s *Server) resolvePath(r *http.Request) error {
	ref := r.PathValue("id")
	if sandbox.IsFullID(ref) {
		return nil
	}
	list, err := s.visible(r.Context())
	if err != nil {
		return err
	}
	sb, err := resolveOwnFirst(sandbox.CallerFrom(r.Context()), list, ref) // owners.go
	if err != nil {
		return err
	}
	r.SetPathValue("id", sb.ID)
	return nil
}

// filtered returns the sandboxes the caller of ctx may use that every filter expression
// matches (sandbox.ParseFilters; bad expressions are ErrInvalidArgument).
func (s *Server) filtered(ctx context.Context, exprs []string) ([]*sandbox.Sandbox, error) {
	f, err := sandbox.ParseFilters(exprs)
	if err != nil {
		return nil, err
	}
	list, err := s.visible(ctx)
	if err != nil {
		return nil, err
	}
	return f.Select(list), nil
}

// prune serves POST /v1/sandboxes/prune (v1.PruneRequest; the body may be empty): it
// deletes the caller's stopped sandboxes the filters match (those it may manage: a team
// member's list holds others'), each only if it is still stopped when its turn comes.
func (s *Server) prune(w http.ResponseWriter, r *http.Request) {
	var req v1.PruneRequest
	if err := DecodeOptional(r, &req); err != nil {
		writeError(w, err)
		return
	}
	list, err := s.filtered(r.Context(), req.Filters)
	if err != nil {
		writeError(w, err)
		return
	}
	out := v1.PruneResponse{Deleted: []v1.Sandbox{}, DryRun: req.DryRun}
	c := sandbox.CallerFrom(r.Context())
	for _, sb := range list {
		if sb.State != sandbox.StateStopped || !c.MayManage(sb) {
			continue
		}
		if !req.DryRun {
			err := s.sandboxes.DeleteStopped(r.Context(), sb.ID)
			if errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrNotFound) {
				continue // started or deleted meanwhile
			}
			if err != nil {
				s.log.Warn("prune: deleting sandbox", "sandbox", sb.ID, "err", err)
				out.Failed = append(out.Failed, v1.PruneFailure{ID: sb.ID, Error: ClientMessage(err)})
				continue
			}
		}
		out.Deleted = append(out.Deleted, ToAPI(sb))
	}
	writeJSON(w, http.StatusOK, out)
}
