package apiserver

// E2B's snapshots and fork (e2b SDK 2.51): createSnapshot, listSnapshots, deleteSnapshot,
// Sandbox.create(snapshotId) and fork({count, timeoutMs}), mapped onto moat's native
// snapshots (Snapshots: TakeSnapshot, ListSnapshots, DeleteSnapshot, create with
// FromSnapshot, Fork). An API key sees and uses only the snapshots of its own sandboxes
// (the manager's rule); another key's snapshot answers 404 as one that does not exist.
//
// What a template name in E2B's create means (e2bResolve), first match wins:
//  1. the ID of one of the caller's snapshots (snap-…);
//  2. an E2B template name the daemon maps (--e2b-template, default base=debian);
//  3. a moat template of that name;
//  4. the name of one of the caller's snapshots (the newest of that name).
//
// Templates come before snapshot names so that what Sandbox.create('base') boots never
// depends on which snapshots a key has; an E2B createSnapshot refuses a name that is a
// template's (409), and a snapshot is always reachable by its ID.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// e2bSnapshotRoutes are E2B's snapshot and fork routes (added before the 501 catch-alls of
// e2bRoutes; DELETE /templates/{id}, deleteSnapshot's route in the SDK, is e2bDeleteTemplate's).
func (s *Server) e2bSnapshotRoutes() []route {
	return []route{
		{"POST /sandboxes/{id}/snapshots", s.e2bCreateSnapshot, byKey},
		{"GET /snapshots", s.e2bListSnapshots, byKey},
		{"POST /sandboxes/{id}/fork", s.e2bFork, byKey},
	}
}

// e2bSnapshotInfo is E2B's SnapshotInfo: the ID Sandbox.create takes, and the names.
type e2bSnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func toE2BSnapshot(sn *sandbox.Snapshot) e2bSnapshotInfo {
	out := e2bSnapshotInfo{SnapshotID: sn.ID, Names: []string{}}
	if sn.Name != "" {
		out.Names = append(out.Names, sn.Name)
	}
	return out
}

// e2bForkResult is one entry of a fork's answer: the sandbox, or why it was not made.
type e2bForkResult struct {
	Sandbox *e2bSandbox `json:"sandbox,omitempty"`
	Error   *e2bError   `json:"error,omitempty"`
}

// e2bSource is what an E2B create's templateID named: a template (Aliased when through
// the daemon's E2B mapping) or a snapshot.
type e2bSource struct {
	Template string
	Aliased  bool
	Snapshot *sandbox.Snapshot
}

// e2bResolve resolves an E2B create's templateID against the daemon's E2B mapping, its
// templates and the caller's own snapshots, in the order of this file's comment. ok is
// false when nothing has that name (an aliased template that is not built is found: the
// caller builds it on first use). Pure.
func e2bResolve(name string, aliases map[string]string, templates []string, snaps []*sandbox.Snapshot) (src e2bSource, ok bool) {
	for _, sn := range snaps {
		if sn.ID == name {
			return e2bSource{Snapshot: sn}, true
		}
	}
	if target, aliased := aliases[name]; aliased {
		return e2bSource{Template: target, Aliased: true}, true
	}
	if slices.Contains(templates, name) {
		return e2bSource{Template: name}, true
	}
	if sn := newestNamed(snaps, name); sn != nil {
		return e2bSource{Snapshot: sn}, true
	}
	return e2bSource{}, false
}

// newestNamed is the newest snapshot called name (E2B: a name points at its latest build).
func newestNamed(snaps []*sandbox.Snapshot, name string) *sandbox.Snapshot {
	var best *sandbox.Snapshot
	for _, sn := range snaps {
		if name != "" && sn.Name == name && (best == nil || snapshotOrder(sn, best) < 0) {
			best = sn
		}
	}
	return best
}

// snapshotOrder sorts snapshots newest first (ties: by ID, descending), the order of
// E2B's lists.
func snapshotOrder(a, b *sandbox.Snapshot) int {
	return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.ID, a.ID))
}

// e2bSource resolves an E2B create's templateID (e2bResolve). A mapped template being
// built on first use answers 503 with its progress.
func (s *Server) e2bSource(ctx context.Context, name string) (e2bSource, error) {
	names, err := s.e2bExisting(ctx, name, s.e2b.Templates[name]) // e2b_templates.go: no List
	if err != nil {
		return e2bSource{}, err
	}
	// Snapshot records are read only when the name may be one: an ID alone (snap-…), the
	// list only when no template has the name. A create of a template (the common one, from
	// the warm pool) reads none.
	var snaps []*sandbox.Snapshot
	if s.snaps != nil && strings.HasPrefix(name, "snap-") {
		sn, err := s.snaps.GetSnapshot(ctx, name)
		switch {
		case err == nil && !sn.Fork:
			snaps = []*sandbox.Snapshot{sn}
		case err != nil && !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotImplemented):
			return e2bSource{}, err
		}
	}
	src, ok := e2bResolve(name, s.e2b.Templates, names, snaps)
	if !ok && s.snaps != nil {
		if snaps, err = s.snaps.ListSnapshots(ctx); err != nil && !errors.Is(err, errdefs.ErrNotImplemented) {
			return e2bSource{}, err
		}
		src, ok = e2bResolve(name, s.e2b.Templates, names, snaps)
	}
	switch {
	case !ok:
		known := strings.Join(slices.Sorted(maps.Keys(s.e2b.Templates)), ", ")
		return e2bSource{}, fmt.Errorf("template or snapshot %q not found (E2B names: %s; moat templates: `moat template ls`; snapshots: Sandbox.listSnapshots()): %w", name, known, errdefs.ErrNotFound)
	case src.Aliased && !slices.Contains(names, src.Template):
		if src.Template == "debian" {
			return e2bSource{}, s.builds.start(s, src.Template)
		}
		return e2bSource{}, fmt.Errorf("template %q (E2B name %q) is not built: `moat template build %s`: %w", src.Template, name, src.Template, errdefs.ErrNotFound)
	}
	return src, nil
}

// e2bSnapshotName checks a name an E2B createSnapshot gives: not one a create would read
// as a template (409: the name is taken), not shaped like a snapshot ID. Pure.
func e2bSnapshotName(name string, aliases map[string]string, templates []string) error {
	switch {
	case name == "":
		return nil
	case strings.HasPrefix(name, "snap-"):
		return fmt.Errorf("name %q: a snapshot name must not start with snap- (snapshot IDs do): %w", name, errdefs.ErrInvalidArgument)
	case aliases[name] != "" || slices.Contains(templates, name):
		return fmt.Errorf("name %q is a template's: Sandbox.create(%q) would boot the template, not the snapshot; choose another name: %w", name, name, errdefs.ErrConflict)
	}
	return nil
}

func (s *Server) e2bSnapsOrError(w http.ResponseWriter) bool {
	if s.snaps == nil {
		writeE2BError(w, fmt.Errorf("snapshots are not available on this daemon: %w", errdefs.ErrNotImplemented))
		return false
	}
	return true
}

// e2bCreateSnapshot serves POST /sandboxes/{id}/snapshots ({name?}): 201 SnapshotInfo.
// The sandbox keeps running (its drive is frozen only for the clone).
func (s *Server) e2bCreateSnapshot(w http.ResponseWriter, r *http.Request) {
	if !s.e2bSnapsOrError(w) {
		return
	}
	var req struct {
		Name string `json:"name"`
	}
	sb, ok := s.e2bBegin(w, r, &req)
	if !ok {
		return
	}
	if req.Name != "" {
		list, err := s.templates.List(r.Context())
		if err != nil {
			writeE2BError(w, err)
			return
		}
		names := make([]string, 0, len(list))
		for _, t := range list {
			names = append(names, t.Name)
		}
		if err := e2bSnapshotName(req.Name, s.e2b.Templates, names); err != nil {
			writeE2BError(w, err)
			return
		}
	}
	sn, err := s.snaps.TakeSnapshot(r.Context(), sb.ID, req.Name)
	if err != nil {
		writeE2BError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, toE2BSnapshot(sn))
}

// snapshotQuery is GET /snapshots' query: filters and paging.
type snapshotQuery struct {
	Sandbox, Name string
	Limit         int
	After         *listPos // nil: from the start
}

// listPos is a position in a list sorted by (time, ID): the last item of a page.
type listPos struct {
	At time.Time
	ID string
}

// parseSnapshotQuery reads sandboxID, name, limit (1 to 100, default 100) and nextToken.
// sandboxID and name together are refused, as E2B does. Pure.
func parseSnapshotQuery(get func(string) string) (snapshotQuery, error) {
	q := snapshotQuery{Sandbox: get("sandboxID"), Name: get("name"), Limit: 100}
	if q.Sandbox != "" && q.Name != "" {
		return q, fmt.Errorf("sandboxID and name filter snapshots each on their own; give one: %w", errdefs.ErrInvalidArgument)
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return q, fmt.Errorf("limit %q: want 1 to 100: %w", v, errdefs.ErrInvalidArgument)
		}
		q.Limit = n
	}
	if tok := get("nextToken"); tok != "" {
		at, id, err := parseListToken(tok)
		if err != nil {
			return q, err
		}
		q.After = &listPos{at, id}
	}
	return q, nil
}

// pageSnapshots filters snaps by q, sorts them newest first and cuts the page after
// q.After; next is the token of the page after it ("" when this one is the last). A
// token stays valid when snapshots before it are deleted meanwhile. Pure.
func pageSnapshots(snaps []*sandbox.Snapshot, q snapshotQuery) (page []*sandbox.Snapshot, next string) {
	page = []*sandbox.Snapshot{}
	for _, sn := range snaps {
		if q.Sandbox != "" && sn.Sandbox != q.Sandbox || q.Name != "" && sn.Name != q.Name && sn.ID != q.Name {
			continue
		}
		if q.After != nil && snapshotOrder(sn, &sandbox.Snapshot{CreatedAt: q.After.At, ID: q.After.ID}) <= 0 {
			continue // at or before the last item of the page before
		}
		page = append(page, sn)
	}
	slices.SortFunc(page, snapshotOrder)
	if len(page) > q.Limit {
		page = page[:q.Limit]
		last := page[q.Limit-1]
		next = listToken(last.CreatedAt, last.ID)
	}
	return page, next
}

// e2bListSnapshots serves GET /snapshots: the caller's snapshots, newest first, filtered
// by source sandbox or by name (or ID), paged with limit and X-Next-Token. An unknown
// name is an empty list, not an error.
func (s *Server) e2bListSnapshots(w http.ResponseWriter, r *http.Request) {
	if !s.e2bSnapsOrError(w) {
		return
	}
	q, err := parseSnapshotQuery(r.URL.Query().Get)
	if err != nil {
		writeE2BError(w, err)
		return
	}
	list, err := s.snaps.ListSnapshots(r.Context())
	if err != nil {
		writeE2BError(w, err)
		return
	}
	page, next := pageSnapshots(list, q)
	out := make([]e2bSnapshotInfo, 0, len(page))
	for _, sn := range page {
		out = append(out, toE2BSnapshot(sn))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// e2bDeleteSnapshot serves DELETE /templates/{template}, the SDK's deleteSnapshot: a
// snapshot ID of the caller's removes that snapshot; a snapshot name removes every one
// of the caller's snapshots of that name (E2B: the snapshot template with its builds).
// 204; 404 (the SDK's false) when the caller has none. A template of that name is not
// deleted through the E2B API (501, as every other /templates call).
func (s *Server) e2bDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("template")
	if s.snaps != nil {
		list, err := s.snaps.ListSnapshots(r.Context())
		if err != nil && !errors.Is(err, errdefs.ErrNotImplemented) {
			writeE2BError(w, err)
			return
		}
		var ids []string
		for _, sn := range list {
			if sn.ID == name {
				ids = []string{sn.ID}
				break
			}
			if sn.Name == name {
				ids = append(ids, sn.ID)
			}
		}
		for _, id := range ids {
			if err := s.snaps.DeleteSnapshot(r.Context(), id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				writeE2BError(w, err)
				return
			}
		}
		if len(ids) > 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if list, err := s.templates.List(r.Context()); err == nil && slices.ContainsFunc(list, func(t v1.Template) bool { return t.Name == name }) {
		e2bNotImplemented("template deletion")(w, r)
		return
	}
	writeE2BError(w, fmt.Errorf("snapshot %q: %w", name, errdefs.ErrNotFound))
}

// e2bForkRequest is SandboxForkRequest: how many forks and their timeout in seconds.
type e2bForkRequest struct {
	Count   *int   `json:"count"`
	Timeout *int64 `json:"timeout"`
}

// e2bForkParams checks a fork request: count 1 (default) to sandbox.MaxFork, timeout a
// positive number of seconds (default: the E2B create default). Pure but for timeoutSeconds' limit.
func e2bForkParams(req e2bForkRequest, def time.Duration) (int, time.Duration, error) {
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > sandbox.MaxFork {
		return 0, 0, fmt.Errorf("count %d: want 1 to %d: %w", count, sandbox.MaxFork, errdefs.ErrInvalidArgument)
	}
	d := def
	if req.Timeout != nil {
		if *req.Timeout <= 0 {
			return 0, 0, fmt.Errorf("timeout: must be a positive number of seconds: %w", errdefs.ErrInvalidArgument)
		}
		var err error
		if d, err = timeoutSeconds("timeout", *req.Timeout); err != nil {
			return 0, 0, err
		}
	}
	return count, d, nil
}

// e2bFork serves POST /sandboxes/{id}/fork ({count?, timeout?}): 201 with one
// {sandbox} per fork. moat's fork is all or nothing: when one fork cannot be made, those
// already made are deleted and the request fails as a whole (E2B's "failed before any
// fork was attempted" answer: 404, 409, 429 when the host has no room, …), so a caller
// never holds half a fork. Each fork gets the request's timeout (E2B: the sandboxes'
// time to live); everything else as `moat fork`.
func (s *Server) e2bFork(w http.ResponseWriter, r *http.Request) {
	if !s.e2bSnapsOrError(w) {
		return
	}
	var req e2bForkRequest
	sb, ok := s.e2bBegin(w, r, &req)
	if !ok {
		return
	}
	count, timeout, err := e2bForkParams(req, s.e2b.DefaultTimeout)
	if err != nil {
		writeE2BError(w, err)
		return
	}
	rep, err := s.snaps.Fork(r.Context(), sb.ID, sandbox.ForkOptions{Count: count})
	if err != nil {
		writeE2BError(w, err)
		return
	}
	out := make([]e2bForkResult, 0, len(rep.Forks))
	for _, f := range rep.Forks {
		if _, err := s.sandboxes.SetTimeout(r.Context(), f.ID, timeout); err != nil {
			_ = s.sandboxes.Delete(context.WithoutCancel(r.Context()), f.ID)
			status, _ := StatusOf(err)
			out = append(out, e2bForkResult{Error: &e2bError{Code: status, Message: ClientMessage(err)}})
			continue
		}
		e := toE2BSandbox(f)
		s.e2bPreviewFields(r.Context(), &e) // previews.go
		out = append(out, e2bForkResult{Sandbox: &e})
	}
	writeJSON(w, http.StatusCreated, out)
}
