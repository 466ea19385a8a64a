package egress

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/egress/proxy"
)

// Ask mode's wiring: a sandbox's proxy holds the connections its policy asks about
// (internal/egress/proxy/ask.go) and asks the Manager's Asker, as a Question of kind
// network about the sandbox; an approval for the sandbox adds an allow rule for the
// host and port through the rule adder, which stores it in the sandbox's policy and
// applies it live (the path of PUT /v1/sandboxes/{id}/policy).

// askWiring is what ask mode needs from outside the egress package, set once the daemon
// has built it.
type askWiring struct {
	mu      sync.RWMutex
	asker   Asker
	addRule func(ctx context.Context, sandbox, phase, rule string) error
}

// SetAsker sets who decides held connections (the approvals service). nil refuses them.
func (m *Manager) SetAsker(a Asker) {
	m.ask.mu.Lock()
	m.ask.asker = a
	m.ask.mu.Unlock()
}

// SetRuleAdder sets how an approval for a whole sandbox adds its allow rule to the
// sandbox's stored policy and applies it (sandbox.Manager.AddEgressRule). Without it, such
// an approval lets only the held connection through.
func (m *Manager) SetRuleAdder(fn func(ctx context.Context, sandbox, phase, rule string) error) {
	m.ask.mu.Lock()
	m.ask.addRule = fn
	m.ask.mu.Unlock()
}

var errNoAsker = errors.New("no approvals service is configured")

// askFor is sandbox id's proxy.Config.Ask.
func (m *Manager) askFor(id string) func(ctx context.Context, q proxy.Question) (proxy.Answer, error) {
	return func(ctx context.Context, q proxy.Question) (proxy.Answer, error) {
		m.ask.mu.RLock()
		a := m.ask.asker
		m.ask.mu.RUnlock()
		if a == nil {
			return proxy.Answer{}, errNoAsker
		}
		ans, err := a.Ask(ctx, Question{
			Kind: AskNetwork, Sandbox: id, Phase: q.Phase, Name: q.Name, Addr: q.Addr, Port: q.Port,
			Rule: q.Rule, User: q.User, Wait: q.Wait,
		})
		if err != nil {
			return proxy.Answer{}, err
		}
		// An unknown scope is taken as the narrowest: this connection only.
		return proxy.Answer{ID: ans.ApprovalID, Approved: ans.Approved, ForSandbox: ans.Scope == ScopeSandbox, By: ans.By, Reason: ans.Reason}, nil
	}
}

// addRuleFor is sandbox id's proxy.Config.AddRule.
func (m *Manager) addRuleFor(id string) func(ctx context.Context, phase, rule string) error {
	return func(ctx context.Context, phase, rule string) error {
		m.ask.mu.RLock()
		fn := m.ask.addRule
		m.ask.mu.RUnlock()
		if fn == nil {
			return errors.New("no rule adder is configured")
		}
		return fn(ctx, id, phase, rule)
	}
}

// askWait is the longest a connection of the sandbox is held: its policy's ask_wait, else
// the daemon's, else 2 min.
func (b *boundary) askWait() time.Duration {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if w := b.comp.AskWait(); w > 0 {
		return w
	}
	if b.defaultWait > 0 {
		return b.defaultWait
	}
	return proxy.DefaultAskWait
}
