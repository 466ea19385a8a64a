package proxy

import (
	"context"
	"net"

	"github.com/moatdev/moat/internal/egress/policy"
)

// Users of a sandbox (issue 15): the sandbox's own source-NAT table gives each user's
// connections source ports of its own range, so the proxy can tell who opened a
// connection from its client address (Config.User), and narrow the sandbox's decision
// with that user's own rules (Config.UserPolicy): a connection is allowed only when both
// allow it. The user travels with the connection in its context (UserFrom), for the
// interceptor's choice of credentials and its audit records.

type userKey struct{}

// WithUser returns ctx carrying the name of the sandbox user a connection comes from.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// UserFrom returns the user WithUser put in ctx ("" for root and users moat does not tell
// apart, or a context without one).
func UserFrom(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// userOf names the user of client's connection, or says why it is refused.
func (p *Proxy) userOf(client net.Conn) (user, refuse string) {
	if p.cfg.User == nil {
		return "", ""
	}
	a, ok := client.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return "", ""
	}
	return p.cfg.User(a.AddrPort())
}

// userDenies decides req with user's own rules; it returns the refusal and true when
// they deny it (deny wins over the sandbox's allow). A user without rules of its own has
// the sandbox's.
func (p *Proxy) userDenies(user string, req policy.Request) (policy.Decision, bool) {
	if p.cfg.UserPolicy == nil || user == "" {
		return policy.Decision{}, false
	}
	up := p.cfg.UserPolicy(user)
	if up == nil {
		return policy.Decision{}, false
	}
	d := up.Decide(req)
	if d.Allow {
		return policy.Decision{}, false
	}
	d.Reason = "user " + user + "'s own rules: " + d.Reason
	if d.Rule == "" {
		d.Rule = "user " + user
	} else {
		d.Rule = "user " + user + ": " + d.Rule
	}
	return d, true
}

// allowsFor is the whole decision for user: the sandbox's policy pol (whose ask counts as
// allow for a connection a person approved), then user's rules.
func (p *Proxy) allowsFor(pol *policy.Policy, user string, req policy.Request, approved bool) bool {
	if !permits(pol.Decide(req), approved) {
		return false
	}
	_, denied := p.userDenies(user, req)
	return !denied
}

// narrow applies user's identity to a decision made with the sandbox's policy: a refused
// identity or the user's own rules turn an allow into a deny.
// A connection the policy asks about is narrowed the same way: what the user may not
// reach is refused, not put to a person.
func (p *Proxy) narrow(ev *Event, req policy.Request, user, refuse string) {
	ev.User = user
	if !ev.Allowed && !ev.Ask {
		return
	}
	if refuse != "" {
		ev.Allowed, ev.Ask, ev.Rule, ev.Reason = false, false, "", refuse
		return
	}
	if d, denied := p.userDenies(user, req); denied {
		ev.Allowed, ev.Ask, ev.Rule, ev.Reason = false, false, d.Rule, d.Reason
	}
}
