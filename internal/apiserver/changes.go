package apiserver

import (
	"context"
	"fmt"
	"io"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/safegit"
	"github.com/moatdev/moat/internal/sandbox"
)

// Changes is the change-record surface the API needs. Implemented by *egress.Manager.
type Changes interface {
	Changes(id string) ([]changes.Record, error)
	Change(id, cid string) (changes.Record, error)
	// ChangePatch is the patch of a change's ref ("": the first with a report).
	ChangePatch(ctx context.Context, id, cid, ref string) (io.Reader, error)
	ApproveChange(ctx context.Context, id, cid, by, reason string) (changes.Record, error)
	DenyChange(id, cid, by, reason string) (changes.Record, error)
}

// SetChanges gives the server its change records (before it serves).
func (s *Server) SetChanges(c Changes) { s.changes = c }

// changeRoutes are the routes of change records; under /sandboxes/{id}, so owned guards
// them like every route of a sandbox.
func (s *Server) changeRoutes() []route {
	return []route{
		{"GET /v1/sandboxes/{id}/changes", s.listChanges, byKey},
		{"GET /v1/sandboxes/{id}/changes/{cid}", s.getChange, byKey},
		{"GET /v1/sandboxes/{id}/changes/{cid}/patch", s.changePatch, byKey},
		{"POST /v1/sandboxes/{id}/changes/{cid}/approve", s.decideChange(true), byKey},
		{"POST /v1/sandboxes/{id}/changes/{cid}/deny", s.decideChange(false), byKey},
	}
}

// changeStore returns the change records after checking the sandbox exists (a deleted
// sandbox's records went with it).
func (s *Server) changeStore(r *http.Request) (Changes, error) {
	if s.changes == nil {
		return nil, fmt.Errorf("change records: %w", errdefs.ErrUnavailable)
	}
	if _, err := s.sandboxes.Get(r.Context(), r.PathValue("id")); err != nil {
		return nil, err
	}
	if cid := r.PathValue("cid"); cid != "" {
		if err := changes.CheckID(cid); err != nil {
			return nil, err
		}
	}
	return s.changes, nil
}

func (s *Server) listChanges(w http.ResponseWriter, r *http.Request) {
	c, err := s.changeStore(r)
	if err != nil {
		writeError(w, err)
		return
	}
	list, err := c.Changes(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := make([]v1.Change, 0, len(list))
	for _, rec := range list {
		out = append(out, ToAPIChange(rec, false))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getChange(w http.ResponseWriter, r *http.Request) {
	c, err := s.changeStore(r)
	if err != nil {
		writeError(w, err)
		return
	}
	rec, err := c.Change(r.PathValue("id"), r.PathValue("cid"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ToAPIChange(rec, true))
}

// changePatch streams the change's patch (?ref=REF for another ref of the push) as
// text/x-patch.
func (s *Server) changePatch(w http.ResponseWriter, r *http.Request) {
	c, err := s.changeStore(r)
	if err != nil {
		writeError(w, err)
		return
	}
	p, err := c.ChangePatch(r.Context(), r.PathValue("id"), r.PathValue("cid"), r.URL.Query().Get("ref"))
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/x-patch; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", `attachment; filename="`+r.PathValue("cid")+`.patch"`)
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, p)
}

// decideChange approves or denies a held change; the body ({"reason": …}) is optional.
// A change not held (decided already, expired, never held) is 409. Approving is the
// operator's alone (mayDecide): the API key that owns a sandbox is often in the hands of
// the agent whose push is held.
func (s *Server) decideChange(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := mayDecide(sandbox.CallerFrom(r.Context()), approve); err != nil {
			writeError(w, err)
			return
		}
		c, err := s.changeStore(r)
		if err != nil {
			writeError(w, err)
			return
		}
		var req v1.DecideChangeRequest
		if err := DecodeOptional(r, &req); err != nil {
			writeError(w, err)
			return
		}
		by := "operator"
		if caller := sandbox.CallerFrom(r.Context()); !caller.Operator {
			by = "key:" + caller.APIKey
		}
		var rec changes.Record
		if approve {
			// Applying runs to its end even if the client leaves (bounded by the apply timeout).
			rec, err = c.ApproveChange(context.WithoutCancel(r.Context()), r.PathValue("id"), r.PathValue("cid"), by, req.Reason)
		} else {
			rec, err = c.DenyChange(r.PathValue("id"), r.PathValue("cid"), by, req.Reason)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, ToAPIChange(rec, true))
	}
}

// mayDecide says whether caller may approve (approve) or deny a held change: the operator
// both; the sandbox's API key only deny (discarding its own held push gives it nothing). An
// approval sends a push past the protected-path rule, so it must come from someone the
// agent cannot be. It is pure.
func mayDecide(caller sandbox.Caller, approve bool) error {
	if approve && !caller.Operator {
		return fmt.Errorf("approving a held change is for the operator (the daemon's unix socket), not API keys: %w", errdefs.ErrPermissionDenied)
	}
	return nil
}

// ToAPIChange converts a change record; full keeps the refs' reports (a list omits them).
func ToAPIChange(r changes.Record, full bool) v1.Change {
	out := v1.Change{
		ID: r.ID, Sandbox: r.Sandbox, Kind: r.Kind, Remote: r.Remote, Time: r.Time, Decision: r.Decision,
		Reasons: r.Reasons, ReportError: r.ReportError, Expires: r.Expires, Refs: make([]v1.ChangeRef, 0, len(r.Refs)),
	}
	out.Files, out.Added, out.Removed = r.Totals()
	for _, x := range r.Refs {
		ref := v1.ChangeRef{Ref: x.Ref, Old: x.Old, New: x.New, Allowed: x.Allowed, Rule: x.Rule, Reason: x.Reason, Files: x.Files, Added: x.Added, Removed: x.Removed}
		if full && x.Report != nil {
			ref.Report = ToAPIReport(*x.Report)
		}
		out.Refs = append(out.Refs, ref)
	}
	for _, h := range r.Protected {
		out.Protected = append(out.Protected, v1.ProtectedHit{Ref: h.Ref, Path: h.Path, Glob: h.Glob})
	}
	if d := r.Decided; d != nil {
		out.Decided = &v1.ChangeDecided{Action: d.Action, By: d.By, Time: d.Time, Reason: d.Reason, Result: d.Result}
	}
	return out
}

// ToAPIReport is rep as the API shows it.
func ToAPIReport(rep safegit.ChangeReport) *v1.ChangeReport {
	out := &v1.ChangeReport{Base: rep.Base, Tip: rep.Tip, FastForward: rep.FastForward, CommitsTruncated: rep.CommitsTruncated,
		FilesTruncated: rep.FilesTruncated, Lockfiles: rep.Lockfiles, Commits: []v1.ChangeCommit{}, Files: []v1.ChangeFile{}}
	for _, c := range rep.Commits {
		out.Commits = append(out.Commits, v1.ChangeCommit{ID: c.ID, Parents: c.Parents, AuthorName: c.AuthorName, AuthorEmail: c.AuthorEmail,
			AuthorDate: c.AuthorDate, CommitterName: c.CommitterName, CommitterEmail: c.CommitterEmail, CommitterDate: c.CommitterDate, Subject: c.Subject})
	}
	for _, f := range rep.Files {
		out.Files = append(out.Files, v1.ChangeFile{Path: f.Path, OldPath: f.OldPath, Added: f.Added, Removed: f.Removed, Binary: f.Binary, Lockfile: f.Lockfile})
	}
	return out
}
