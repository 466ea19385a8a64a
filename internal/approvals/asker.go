package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/errdefs"
)

// Asker answers the egress proxy's questions with approvals (egress.Asker).
type Asker struct{ s *Service }

var _ egress.Asker = Asker{}

// Asker returns the egress.Asker of s.
func (s *Service) Asker() Asker { return Asker{s} }

// Ask makes q a pending network or credential approval (or joins the pending one of the
// same question of the same sandbox and user: one person answers one question, however
// many connections it held) and waits until it is decided, q.Wait passes, or ctx ends.
// Denied is an Answer; no decision in time (expired, time-out, ctx) is an error. When the
// last connection waiting on a question goes before its decision, the question expires:
// nobody is left to let through.
func (a Asker) Ask(ctx context.Context, q egress.Question) (egress.Answer, error) {
	s := a.s
	action, summary, err := questionAction(q)
	if err != nil {
		return egress.Answer{}, err
	}
	key := q.Kind + "\x00" + q.Sandbox + "\x00" + q.User + "\x00" + string(action)
	wait := q.Wait
	if wait <= 0 {
		wait = s.opt.DefaultWait
	}
	s.mu.Lock()
	pending := s.asks[key]
	creator := pending == nil
	if creator {
		pending = &ask{ready: make(chan struct{})}
		s.asks[key] = pending
	}
	pending.waiting++
	s.mu.Unlock()
	if creator {
		id, err := a.create(ctx, q, action, summary, wait)
		s.mu.Lock()
		pending.id, pending.err = id, err
		s.mu.Unlock()
		close(pending.ready)
	} else {
		select {
		case <-pending.ready:
		case <-ctx.Done():
		}
	}
	defer func() {
		s.mu.Lock()
		pending.waiting--
		last, id := pending.waiting == 0, pending.id
		if last && s.asks[key] == pending {
			delete(s.asks, key)
		}
		s.mu.Unlock()
		if last && id != "" {
			s.expire(context.WithoutCancel(ctx), id, "the held connection ended before a decision", true)
		}
	}()
	if err := ctx.Err(); err != nil {
		return egress.Answer{}, err
	}
	if pending.err != nil {
		return egress.Answer{}, pending.err
	}
	ap, err := s.Wait(ctx, pending.id, wait)
	if err != nil {
		return egress.Answer{}, fmt.Errorf("approval %s: %w", pending.id, err)
	}
	switch ap.State {
	case Approved:
		return egress.Answer{ApprovalID: ap.ID, Approved: true, Scope: ap.Scope, By: ap.DecidedBy, Reason: ap.Reason}, nil
	case Denied:
		return egress.Answer{ApprovalID: ap.ID, Approved: false, By: ap.DecidedBy, Reason: ap.Reason}, nil
	case Expired:
		return egress.Answer{}, fmt.Errorf("approval %s expired: %s: %w", ap.ID, ap.Reason, errdefs.ErrConflict)
	}
	return egress.Answer{}, fmt.Errorf("approval %s: no decision within %s: %w", ap.ID, wait, errdefs.ErrUnavailable)
}

// create stores the approval of question q.
func (a Asker) create(ctx context.Context, q egress.Question, action json.RawMessage, summary string, wait time.Duration) (string, error) {
	owner := ""
	if a.s.opt.Owner != nil {
		var err error
		if owner, err = a.s.opt.Owner(ctx, q.Sandbox); err != nil {
			return "", err
		}
	}
	ap, err := a.s.Create(ctx, Approval{Kind: q.Kind, Sandbox: q.Sandbox, User: q.User, Action: action, Summary: summary,
		AskedBy: BySandbox, Owner: owner}, wait)
	return ap.ID, err
}

// questionAction is q's action as JSON and a one-line summary.
func questionAction(q egress.Question) (json.RawMessage, string, error) {
	na := NetworkAction{Host: q.Name, Port: q.Port, Phase: q.Phase, Rule: q.Rule}
	if q.Addr.IsValid() {
		na.Addr = q.Addr.String()
	}
	dest := na.Host
	if dest == "" {
		dest = na.Addr
	}
	dest += ":" + strconv.Itoa(int(q.Port))
	var v any
	var summary string
	switch q.Kind {
	case egress.AskNetwork:
		v, summary = na, "connect to "+dest
	case egress.AskCredential:
		v = CredentialAction{NetworkAction: na, Method: q.Method, Path: q.Path, Secret: q.Secret}
		summary = fmt.Sprintf("%s https://%s%s with secret %s", q.Method, dest, q.Path, q.Secret)
	default:
		return nil, "", fmt.Errorf("question kind %q: %w", q.Kind, errdefs.ErrInvalidArgument)
	}
	if q.User != "" {
		summary = "user " + q.User + ": " + summary
	}
	b, err := json.Marshal(v)
	return b, summary, err
}
