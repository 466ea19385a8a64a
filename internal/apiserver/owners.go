package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Owners and visibility (issue 17 part 3; sandbox/owners.go): which routes that name a
// sandbox a team member may call, the visibility route, and API keys' owner names.

// sandboxClass is what a route that names a sandbox ({id}) does to it, for the gate
// (owned): a use route reads it or works inside it (a team sandbox's every key may call
// it: sandbox.Caller.MayUse), a manage route changes it or decides about it (only its
// owner, admin keys and the operator: sandbox.Caller.MayManage).
type sandboxClass int

const (
	// manageRoute is the zero value: a pattern missing from sandboxClasses is a manage
	// route, so a new route is never open to team members by omission (and
	// TestSandboxRoutesClassified names it).
	manageRoute sandboxClass = iota
	useRoute
)

// sandboxClasses declares the class of every route pattern that names a sandbox. Use:
// seeing it (get, events, egress log, stats, logs, users, changes, diff, E2B get, metrics
// and logs), working in it (envd: exec, terminal, files) and its ports. Everything else —
// lifecycle, policy, timeout, visibility, users, user egress, credentials, snapshots,
// forks, restore, checkpoints, export, decisions, and the E2B connect (which resumes the
// sandbox and hands out its envd access token) — is manage.
var sandboxClasses = map[string]sandboxClass{
	"GET /v1/sandboxes/{id}":                        useRoute,
	"GET /v1/sandboxes/{id}/events":                 useRoute,
	"GET /v1/sandboxes/{id}/egress":                 useRoute,
	"/v1/sandboxes/{id}/envd/{rest...}":             useRoute,
	"GET /v1/sandboxes/{id}/terminal":               useRoute, // the console's PTY (WebSocket)
	"GET /v1/sandboxes/{id}/stats":                  useRoute,
	"GET /v1/sandboxes/{id}/logs":                   useRoute,
	"GET /v1/sandboxes/{id}/users":                  useRoute,
	"GET /v1/sandboxes/{id}/changes":                useRoute,
	"GET /v1/sandboxes/{id}/changes/{cid}":          useRoute,
	"GET /v1/sandboxes/{id}/changes/{cid}/patch":    useRoute,
	"GET /v1/sandboxes/{id}/diff":                   useRoute,
	"GET /v1/sandboxes/{id}/diff/patch":             useRoute,
	"GET /v1/sandboxes/{id}/ports":                  useRoute, // previews (issue 17 part 1)
	"GET /v1/sandboxes/{id}/ports/{port}":           useRoute,
	"GET /sandboxes/{id}":                           useRoute,
	"GET /sandboxes/{id}/metrics":                   useRoute,
	"GET /sandboxes/{id}/logs":                      useRoute,
	"GET /v2/sandboxes/{id}/logs":                   useRoute,
	"DELETE /v1/sandboxes/{id}":                     manageRoute,
	"POST /v1/sandboxes/{id}/stop":                  manageRoute,
	"POST /v1/sandboxes/{id}/start":                 manageRoute,
	"POST /v1/sandboxes/{id}/pause":                 manageRoute,
	"POST /v1/sandboxes/{id}/resume":                manageRoute,
	"PUT /v1/sandboxes/{id}/policy":                 manageRoute,
	"PUT /v1/sandboxes/{id}/visibility":             manageRoute,
	"POST /v1/sandboxes/{id}/changes/{cid}/approve": manageRoute,
	"POST /v1/sandboxes/{id}/changes/{cid}/deny":    manageRoute,
	"POST /v1/sandboxes/{id}/checkpoint":            manageRoute,
	"POST /v1/sandboxes/{id}/snapshot":              manageRoute,
	"POST /v1/sandboxes/{id}/restore":               manageRoute,
	"POST /v1/sandboxes/{id}/fork":                  manageRoute,
	"PUT /v1/sandboxes/{id}/users/{name}/egress":    manageRoute,
	"DELETE /v1/sandboxes/{id}/users/{name}/egress": manageRoute,
	"POST /v1/sandboxes/{id}/users":                 manageRoute,
	"DELETE /v1/sandboxes/{id}/users/{name}":        manageRoute,
	"POST /v1/sandboxes/{id}/export":                manageRoute,
	"PUT /v1/sandboxes/{id}/ports/{port}":           manageRoute, // opening a port to tokens or the public
	"DELETE /v1/sandboxes/{id}/ports/{port}":        manageRoute,
	"DELETE /sandboxes/{id}":                        manageRoute, // E2B kill
	"POST /sandboxes/{id}/timeout":                  manageRoute,
	"POST /sandboxes/{id}/pause":                    manageRoute,
	"POST /sandboxes/{id}/resume":                   manageRoute,
	"PUT /sandboxes/{id}/network":                   manageRoute,
	"POST /sandboxes/{id}/refreshes":                manageRoute, // extends the timeout
	"POST /sandboxes/{id}/connect":                  manageRoute, // resumes, extends the timeout, hands out the envd token
	"POST /v2/sandboxes/{id}/connect":               manageRoute,
	"POST /sandboxes/{id}/snapshots":                manageRoute,
	"POST /sandboxes/{id}/fork":                     manageRoute,
}

// mayAccess decides whether caller c may call the route of pattern on sandbox sb: nil, an
// error of class errdefs.ErrNotFound when c may not use sb (to c it does not exist, as
// before owners), or of class errdefs.ErrPermissionDenied when c may use sb (it sees it)
// but pattern is not a use route and c may not manage sb. It is pure.
func mayAccess(c sandbox.Caller, sb *sandbox.Sandbox, pattern string) error {
	if !c.MayUse(sb) {
		return fmt.Errorf("sandbox %q: %w", sb.ID, errdefs.ErrNotFound)
	}
	if sandboxClasses[pattern] == useRoute || c.MayManage(sb) {
		return nil
	}
	owner := sb.OwnerName
	if owner == "" {
		owner = ownerText(sb.Owner)
	}
	return fmt.Errorf("sandbox %s is a team sandbox of %s: team members may see it and use it (exec, files, ports), but only its owner, an admin key or the daemon's operator may %s: %w",
		sb.ID, owner, pattern, errdefs.ErrPermissionDenied)
}

// ownerText names an owner key id for people: "the operator" for "".
func ownerText(key string) string {
	if key == "" {
		return "the operator"
	}
	return "API key " + key
}

// ownerRoutes are the routes of this file.
func (s *Server) ownerRoutes() []route {
	return []route{{"PUT /v1/sandboxes/{id}/visibility", s.setVisibility, byKey}}
}

// visibilitySetter changes a sandbox's visibility (*sandbox.Manager).
type visibilitySetter interface {
	SetVisibility(ctx context.Context, id, v string) (*sandbox.Sandbox, error)
}

// setVisibility serves PUT /v1/sandboxes/{id}/visibility (v1.VisibilityRequest), a manage
// route: the sandbox's owner, an admin key or the operator makes it private or team. The
// change is an event of the sandbox, in its events and the audit log.
func (s *Server) setVisibility(w http.ResponseWriter, r *http.Request) {
	vs, ok := s.sandboxes.(visibilitySetter)
	if !ok {
		writeError(w, fmt.Errorf("sandbox visibility: %w", errdefs.ErrNotImplemented))
		return
	}
	var req v1.VisibilityRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	sb, err := vs.SetVisibility(r.Context(), r.PathValue("id"), req.Visibility)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ToAPI(sb))
}

// toAPIOwner fills out's owner, owner name and visibility from sb ("" is private).
func toAPIOwner(sb *sandbox.Sandbox, out *v1.Sandbox) {
	out.Owner, out.OwnerName, out.Visibility = sb.Owner, sb.OwnerName, sb.Visibility
	if out.Visibility == "" {
		out.Visibility = v1.VisibilityPrivate
	}
}

// keyOwner gives an API key its owner name and admin flag (the store; see createKey).
type keyOwner interface {
	SetAPIKeyOwner(ctx context.Context, id, owner string, admin bool) error
}

// checkKeyOwner checks the owner name and admin flag of a POST /v1/apikeys before the key
// is made: the name (sandbox.CheckOwnerName), and that the daemon can store them.
func (s *Server) checkKeyOwner(req v1.APIKeyRequest) error {
	if err := sandbox.CheckOwnerName(req.Owner); err != nil {
		return err
	}
	if _, ok := s.keys.(keyOwner); !ok && (req.Owner != "" || req.Admin) {
		return fmt.Errorf("API key owners: %w", errdefs.ErrNotImplemented)
	}
	return nil
}

// setKeyOwner stores the owner name and admin flag req asks for key k (made just now) and
// records them in the audit log; on failure it deletes k, so no key exists without the
// owner it was asked with.
func (s *Server) setKeyOwner(ctx context.Context, k *v1.APIKey, req v1.APIKeyRequest) error {
	if req.Owner == "" && !req.Admin {
		return nil
	}
	if err := s.keys.(keyOwner).SetAPIKeyOwner(ctx, k.ID, req.Owner, req.Admin); err != nil {
		if derr := s.keys.DeleteAPIKey(context.WithoutCancel(ctx), k.ID); derr != nil {
			s.log.Error("deleting an API key whose owner was not stored", "key", k.ID, "err", derr)
		}
		return err
	}
	k.Owner, k.Admin = req.Owner, req.Admin
	if s.auditLog != nil {
		s.auditLog.Record(ctx, "", "apikey", fmt.Sprintf("created %s owner=%q admin=%v", k.ID, req.Owner, req.Admin))
	}
	return nil
}

// approvalSeer returns whether the caller of ctx may see an approval: those seeApproval
// grants, and those of the sandboxes it may use (a team member sees a team sandbox's;
// deciding stays approvals.MayDecide's).
func (s *Server) approvalSeer(ctx context.Context) (func(approvals.Approval) bool, error) {
	c := sandbox.CallerFrom(ctx)
	if c.Operator {
		return func(approvals.Approval) bool { return true }, nil
	}
	list, err := s.visible(ctx)
	if err != nil {
		return nil, err
	}
	usable := map[string]bool{}
	for _, sb := range list {
		usable[sb.ID] = true
	}
	return func(a approvals.Approval) bool { return seeApproval(c, a) || usable[a.Sandbox] }, nil
}

// resolveOwnFirst is sandbox.Resolve of ref among the caller's own sandboxes first, then
// among all of list (those it may use): another key's team sandbox never makes the name
// or ID prefix of one of the caller's own ambiguous. It is pure.
func resolveOwnFirst(c sandbox.Caller, list []*sandbox.Sandbox, ref string) (*sandbox.Sandbox, error) {
	if !c.Operator {
		own := slices.DeleteFunc(slices.Clone(list), func(sb *sandbox.Sandbox) bool { return sb.Owner != c.APIKey })
		if sb, err := sandbox.Resolve(own, ref); !errdefs.IsNotFound(err) {
			return sb, err
		}
	}
	return sandbox.Resolve(list, ref)
}

// envdTokenFor is the envd access token the E2B detail gives caller c of sb: the token to
// those who may manage sb, "" to a team member. The token opens the E2B gateway with no
// API key, for the sandbox's life; a team member given it would keep that access after the
// sandbox is made private again, so team members use a team sandbox through the native
// API (envd routes, checked on every request) instead. It is pure.
func envdTokenFor(c sandbox.Caller, sb *sandbox.Sandbox) string {
	if c.MayManage(sb) {
		return sb.AccessToken
	}
	return ""
}
