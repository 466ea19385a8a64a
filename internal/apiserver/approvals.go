package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Approvals is the approval surface the API needs. Implemented by *approvals.Service.
type Approvals interface {
	Create(ctx context.Context, a approvals.Approval, wait time.Duration) (approvals.Approval, error)
	Get(ctx context.Context, id string) (approvals.Approval, error)
	List(ctx context.Context, f approvals.Filter) ([]approvals.Approval, error)
	Decide(ctx context.Context, id string, dec approvals.Decision) (approvals.Approval, error)
	Wait(ctx context.Context, id string, wait time.Duration) (approvals.Approval, error)
}

var _ Approvals = (*approvals.Service)(nil)

// keyApprover gives an API key the approver permission (the store; see createKey).
type keyApprover interface {
	SetAPIKeyApprover(ctx context.Context, id string, approver bool) error
}

// Bounds of an approval asked over the API.
const (
	defaultAskWait = 300 * time.Second
	maxAskWait     = 24 * time.Hour
	maxLongPoll    = 5 * time.Minute
	maxToolName    = 200
	maxToolArgs    = 64 << 10
	maxSummary     = 2000
)

// SetApprovals gives the server its approvals (before it serves).
func (s *Server) SetApprovals(a Approvals) { s.approvalsSvc = a }

// approvalRoutes: every caller with a key may ask (about its own sandboxes) and read the
// approvals it may see (seeApproval); deciding is checked by approvals.MayDecide.
func (s *Server) approvalRoutes() []route {
	return []route{
		{"POST /v1/approvals", s.askApproval, byKey},
		{"GET /v1/approvals", s.listApprovals, byKey},
		{"GET /v1/approvals/{aid}", s.getApproval, byKey},
		{"GET /v1/approvals/{aid}/events", s.approvalEvents, byKey},
		{"POST /v1/approvals/{aid}/approve", s.decideApproval(true), byKey},
		{"POST /v1/approvals/{aid}/deny", s.decideApproval(false), byKey},
	}
}

// seeApproval says whether c may see a: the operator, approver and admin keys every approval, a
// key those of its sandboxes and those it asked. It is pure.
func seeApproval(c sandbox.Caller, a approvals.Approval) bool {
	if c.Operator || ((c.Approver || c.Admin) && c.APIKey != "") { // admin keys see all (owners.go)
		return true
	}
	return c.APIKey != "" && (a.Owner == c.APIKey || a.AskedBy == "key:"+c.APIKey)
}

// decider is the approvals.Decider of caller c.
func decider(c sandbox.Caller) approvals.Decider {
	return approvals.Decider{Operator: c.Operator, Key: c.APIKey, Approver: c.Approver}
}

// askedBy is how an approval records the caller that asked.
func askedBy(c sandbox.Caller) string {
	if c.Operator {
		return approvals.ByOperator
	}
	return "key:" + c.APIKey
}

func (s *Server) approvalService() (Approvals, error) {
	if s.approvalsSvc == nil {
		return nil, fmt.Errorf("approvals: %w", errdefs.ErrUnavailable)
	}
	return s.approvalsSvc, nil
}

// checkAsk checks a tool-call question. It is pure.
func checkAsk(req v1.AskApprovalRequest) (time.Duration, error) {
	switch {
	case req.Sandbox == "":
		return 0, fmt.Errorf("sandbox: required: %w", errdefs.ErrInvalidArgument)
	case req.Tool == "":
		return 0, fmt.Errorf("tool: required (the name of the tool the agent wants to run): %w", errdefs.ErrInvalidArgument)
	case len(req.Tool) > maxToolName:
		return 0, fmt.Errorf("tool: longer than %d bytes: %w", maxToolName, errdefs.ErrInvalidArgument)
	case len(req.Arguments) > maxToolArgs:
		return 0, fmt.Errorf("arguments: longer than %d bytes: %w", maxToolArgs, errdefs.ErrInvalidArgument)
	case len(req.Summary) > maxSummary:
		return 0, fmt.Errorf("summary: longer than %d bytes: %w", maxSummary, errdefs.ErrInvalidArgument)
	case len(req.User) > 64:
		return 0, fmt.Errorf("user: longer than 64 bytes: %w", errdefs.ErrInvalidArgument)
	case req.WaitSeconds < 0 || time.Duration(req.WaitSeconds)*time.Second > maxAskWait:
		return 0, fmt.Errorf("wait_seconds: %d: want 0 (300) to %d: %w", req.WaitSeconds, int(maxAskWait.Seconds()), errdefs.ErrInvalidArgument)
	}
	if req.WaitSeconds == 0 {
		return defaultAskWait, nil
	}
	return time.Duration(req.WaitSeconds) * time.Second, nil
}

// askApproval serves POST /v1/approvals: a pending tool-call approval of a sandbox the
// caller may use (201). The harness then long-polls GET /v1/approvals/{id}?wait=.
func (s *Server) askApproval(w http.ResponseWriter, r *http.Request) {
	svc, err := s.approvalService()
	if err != nil {
		writeError(w, err)
		return
	}
	var req v1.AskApprovalRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	wait, err := checkAsk(req)
	if err != nil {
		writeError(w, err)
		return
	}
	c := sandbox.CallerFrom(r.Context())
	list, err := s.visible(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	sb, err := sandbox.Resolve(list, req.Sandbox)
	if err != nil {
		writeError(w, err)
		return
	}
	args := req.Arguments
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	action, err := json.Marshal(approvals.ToolAction{Tool: req.Tool, Arguments: args})
	if err != nil {
		writeError(w, fmt.Errorf("arguments: %v: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	a, err := svc.Create(r.Context(), approvals.Approval{Kind: approvals.KindTool, Sandbox: sb.ID, User: req.User,
		Action: action, Summary: req.Summary, AskedBy: askedBy(c), Owner: sb.Owner}, wait)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, ToAPIApproval(a))
}

// listApprovals serves GET /v1/approvals?state=&sandbox=&kind=: the approvals the
// caller may see, oldest first.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) {
	svc, err := s.approvalService()
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	list, err := svc.List(r.Context(), approvals.Filter{State: q.Get("state"), Sandbox: q.Get("sandbox"), Kind: q.Get("kind")})
	if err != nil {
		writeError(w, err)
		return
	}
	see, err := s.approvalSeer(r.Context()) // owners.go: team members see their team sandboxes'
	if err != nil {
		writeError(w, err)
		return
	}
	out := []v1.Approval{}
	for _, a := range list {
		if see(a) {
			out = append(out, ToAPIApproval(a))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// approval returns the approval of the request's {aid} if the caller may see it (one it
// may not see is not found, as one that does not exist).
func (s *Server) approval(r *http.Request) (Approvals, approvals.Approval, error) {
	svc, err := s.approvalService()
	if err != nil {
		return nil, approvals.Approval{}, err
	}
	id := r.PathValue("aid")
	a, err := svc.Get(r.Context(), id)
	if err == nil {
		var see func(approvals.Approval) bool
		if see, err = s.approvalSeer(r.Context()); err == nil && !see(a) { // owners.go
			err = fmt.Errorf("approval %s: %w", id, errdefs.ErrNotFound)
		}
	}
	return svc, a, err
}

// parseWait reads ?wait= (a Go duration or seconds; "" 0), at most maxLongPoll.
func parseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, fmt.Errorf("wait %q: want a duration (30s) or seconds: %w", v, errdefs.ErrInvalidArgument)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, fmt.Errorf("wait %q: negative: %w", v, errdefs.ErrInvalidArgument)
	}
	return min(d, maxLongPoll), nil
}

// getApproval serves GET /v1/approvals/{aid}[?wait=30s]: with wait, it answers once the
// approval is decided (or expired), or as it is when wait passes (at most 5 minutes).
func (s *Server) getApproval(w http.ResponseWriter, r *http.Request) {
	wait, err := parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		writeError(w, err)
		return
	}
	svc, a, err := s.approval(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if a.State == approvals.Pending && wait > 0 {
		if a, err = svc.Wait(r.Context(), a.ID, wait); err != nil {
			writeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, ToAPIApproval(a))
}

// approvalEvents serves GET /v1/approvals/{aid}/events: server-sent events, one "approval"
// event with the approval now and one when it is decided or expires (then the stream
// ends); a comment every 15 s keeps the connection open meanwhile.
func (s *Server) approvalEvents(w http.ResponseWriter, r *http.Request) {
	svc, a, err := s.approval(r)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(a approvals.Approval) {
		b, _ := json.Marshal(ToAPIApproval(a))
		fmt.Fprintf(w, "event: approval\ndata: %s\n\n", b)
		_ = rc.Flush()
	}
	send(a)
	for a.State == approvals.Pending {
		if a, err = svc.Wait(r.Context(), a.ID, 15*time.Second); err != nil {
			return
		}
		if a.State == approvals.Pending {
			fmt.Fprint(w, ": waiting\n\n")
			_ = rc.Flush()
			continue
		}
		send(a)
	}
}

// decideApproval serves POST /v1/approvals/{aid}/approve and /deny
// (v1.DecideApprovalRequest, optional): the operator or an approver key that neither
// asked it nor owns its sandbox (approvals.MayDecide; 403 otherwise).
func (s *Server) decideApproval(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		svc, a, err := s.approval(r)
		if err != nil {
			writeError(w, err)
			return
		}
		var req v1.DecideApprovalRequest
		if err := DecodeOptional(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if len(req.Reason) > maxSummary {
			writeError(w, fmt.Errorf("reason: longer than %d bytes: %w", maxSummary, errdefs.ErrInvalidArgument))
			return
		}
		if !approve && req.Scope != "" {
			writeError(w, fmt.Errorf("scope: a denial has none: %w", errdefs.ErrInvalidArgument))
			return
		}
		out, err := svc.Decide(r.Context(), a.ID, approvals.Decision{Approve: approve, By: decider(sandbox.CallerFrom(r.Context())),
			Reason: req.Reason, Scope: req.Scope})
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, ToAPIApproval(out))
	}
}

// ToAPIApproval converts an approval.
func ToAPIApproval(a approvals.Approval) v1.Approval {
	return v1.Approval{ID: a.ID, Kind: a.Kind, Sandbox: a.Sandbox, User: a.User, Action: a.Action, Summary: a.Summary,
		AskedBy: a.AskedBy, Owner: a.Owner, NotBy: a.NotBy, State: a.State, Scope: a.Scope, CreatedAt: a.CreatedAt,
		Deadline: a.Deadline, DecidedAt: a.DecidedAt, DecidedBy: a.DecidedBy, Reason: a.Reason}
}
