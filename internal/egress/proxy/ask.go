package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

// Ask mode. A connection whose decision is ask (an ask rule, or the sandbox's ask_all)
// is held: its first bytes (what the peek read) stay in the proxy and nothing more is
// read from the client, nothing is dialled, until Config.Ask answers, the wait passes,
// the policy changes so that it is allowed or denied outright, or the proxy closes. A
// held connection holds its place in the connection budget; at most MaxHeld are held at
// once. Only an approval lets it through: a refusal, a time-out or an error resets it
// with an egress-log entry that says why.

// DefaultMaxHeld caps the connections of one sandbox held for approval at once.
const DefaultMaxHeld = 16

// DefaultAskWait is how long a connection is held when nothing else is configured.
const DefaultAskWait = policy.DefaultAskWait

// Question is what the proxy asks about a held connection; the caller adds the sandbox
// (internal/egress turns it into an egress.Question).
type Question struct {
	Phase string
	Name  string // host name ("" for a direct IP)
	Addr  netip.Addr
	Port  uint16
	Rule  string // the ask rule that held it ("" for ask_all)
	User  string // the sandbox user who opened the connection ("": root or not told apart)
	Wait  time.Duration
	// Request is what the policy decided (for the rule an approval adds).
	Request policy.Request
}

// Answer is a person's decision on a Question.
type Answer struct {
	ID       string
	Approved bool
	// ForSandbox: the approval covers the sandbox (an allow rule is added through
	// Config.AddRule), not only this connection.
	ForSandbox bool
	By, Reason string
}

// Causes that end a hold when the policy changes under it (Recheck).
var (
	errNowAllowed = errors.New("the policy changed and now allows it")
	errNowDenied  = errors.New("the policy changed and now denies it")
	errNoDecision = errors.New("no decision")
)

// held is one connection waiting for a decision.
type held struct {
	req    policy.Request
	cancel context.CancelCauseFunc
}

// permits says whether a decision lets a connection through: allowed, or asked about
// and approved by a person.
func permits(d policy.Decision, approved bool) bool {
	return d.Allow || approved && d.Ask
}

// recheckHeld ends the holds the new policy decides outright. p.mu is held.
func (p *Proxy) recheckHeld(pol *policy.Policy) {
	for h := range p.held {
		switch d := pol.Decide(h.req); {
		case d.Allow:
			h.cancel(errNowAllowed)
		case !d.Ask:
			h.cancel(errNowDenied)
		}
	}
}

// Held is the number of connections waiting for a decision.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// hold holds a connection the policy asks about until it is decided, and sets ev's
// verdict, rule and reason to the outcome. It returns true when a person approved it
// (the policy's ask then counts as allow for it); ev.Allowed without approved means the
// policy itself came to allow it meanwhile.
func (p *Proxy) hold(ctx context.Context, ev *Event, req policy.Request) (approved bool) {
	askRule := ev.Rule
	ev.Allowed = false
	if p.cfg.Ask == nil {
		ev.Reason = "held for approval, but no approvals service is configured"
		return false
	}
	wait := DefaultAskWait
	if p.cfg.AskWait != nil {
		if w := p.cfg.AskWait(); w > 0 {
			wait = w
		}
	}
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h := &held{req: req, cancel: cancel}
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		ev.Reason = "held for approval: the sandbox's egress was closed"
		return false
	case len(p.held) >= p.cfg.MaxHeld:
		p.mu.Unlock()
		ev.Reason = fmt.Sprintf("held for approval: %d connections of this sandbox already wait for a decision (the most)", p.cfg.MaxHeld)
		return false
	}
	p.held[h] = struct{}{}
	p.mu.Unlock()
	untrack := func() {
		p.mu.Lock()
		delete(p.held, h)
		p.mu.Unlock()
	}
	defer untrack()

	q := Question{Phase: ev.Phase, Name: req.Name, Addr: req.Addr, Port: req.Port, User: ev.User, Wait: wait, Request: req}
	if askRule != "ask-all" {
		q.Rule = strings.TrimPrefix(askRule, "ask ")
	}
	actx, cancelWait := context.WithTimeoutCause(hctx, wait, errNoDecision)
	ans, err := p.cfg.Ask(actx, q)
	cancelWait()
	if err != nil {
		switch cause := context.Cause(hctx); {
		case errors.Is(cause, errNowAllowed):
			_, pol := p.cfg.Policy()
			d := pol.Decide(req)
			ev.Allowed, ev.Rule, ev.Reason = d.Allow, d.Rule, "held for approval; "+errNowAllowed.Error()+": "+d.Reason
		case errors.Is(cause, errNowDenied):
			_, pol := p.cfg.Policy()
			d := pol.Decide(req)
			ev.Rule, ev.Reason = d.Rule, "held for approval; "+errNowDenied.Error()+": "+d.Reason
		case ctx.Err() != nil:
			ev.Reason = "held for approval: the connection ended before a decision (" + context.Cause(ctx).Error() + ")"
		case errors.Is(context.Cause(actx), errNoDecision):
			ev.Reason = "held for approval: no decision within " + FormatWait(wait)
		default:
			ev.Reason = "held for approval: asking failed: " + err.Error()
		}
		return false
	}
	who := ans.By
	if who == "" {
		who = "someone"
	}
	id := ans.ID
	if id == "" {
		id = "without id"
	}
	if !ans.Approved {
		ev.Reason = fmt.Sprintf("denied by %s (approval %s)", who, id)
		if ans.Reason != "" {
			ev.Reason += ": " + ans.Reason
		}
		return false
	}
	untrack() // decided: the rule added below must not end this hold as a policy change
	ev.Allowed = true
	if !ans.ForSandbox {
		ev.Reason = fmt.Sprintf("approved by %s (approval %s) for this connection", who, id)
		return true
	}
	ev.Reason = fmt.Sprintf("approved by %s (approval %s) for the sandbox", who, id)
	rule, ok := policy.AskRule(req)
	switch {
	case !ok:
		ev.Reason += "; no rule can name " + hostOf(req) + ", so only this connection passes"
	case p.cfg.AddRule == nil:
		ev.Reason += "; rules cannot be added here, so only this connection passes"
	default:
		if err := p.addRule(ev.Phase, rule); err != nil {
			if p.ctx.Err() != nil {
				ev.Allowed = false
				ev.Reason += "; the sandbox's egress was closed before rule " + rule + " was added"
				return false
			}
			ev.Reason += "; rule " + rule + " could not be added (" + err.Error() + "), so only this connection passes"
		} else {
			ev.Reason += ": allow " + rule + " added to phase " + ev.Phase
		}
	}
	return true
}

// addRule adds an approved rule through Config.AddRule. It waits for it no longer than
// the proxy serves: the sandbox stopping may hold what AddRule waits for, and it waits
// for this connection's handler to return.
func (p *Proxy) addRule(phase, rule string) error {
	done := make(chan error, 1)
	go func() { done <- p.cfg.AddRule(context.WithoutCancel(p.ctx), phase, rule) }()
	select {
	case err := <-done:
		return err
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// FormatWait writes a wait as people do: "2m", "90s", "1h30m".
func FormatWait(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

type approvedKey struct{}

func withApproved(ctx context.Context) context.Context {
	return context.WithValue(ctx, approvedKey{}, true)
}

// Approved reports whether ctx is that of a connection a person approved while the
// policy still asks about it (Interceptor.Serve's ctx): the interceptor's per-request
// policy check must then take the policy's ask as allow, as the proxy does.
func Approved(ctx context.Context) bool {
	v, _ := ctx.Value(approvedKey{}).(bool)
	return v
}
