package sandbox

import (
	"context"
	"fmt"

	"github.com/moatdev/moat/internal/errdefs"
)

// AddEgressRule adds an allow rule to phase of sandbox id's egress policy, stores it and
// applies it at once, as SetPolicy does: an approval of a held connection for the whole
// sandbox (ask mode, internal/egress/askwire.go) lands here. A rule already there is not
// added twice. It takes the sandbox's lock, so it must not be called by something the
// holder of that lock waits for (the egress proxy calls it from a goroutine it does not
// wait for once the sandbox stops).
func (m *Manager) AddEgressRule(ctx context.Context, id, phase, rule string) error {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if sb.Warm {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	spec, err := sb.EgressPolicy().WithAllowRule(phase, rule)
	if err != nil {
		return fmt.Errorf("egress policy: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if _, err := m.store.Update(ctx, id, func(s *Sandbox) error { s.Policy = &spec; return nil }); err != nil {
		return err
	}
	if _, err := m.egress.SetPolicy(id, spec); err != nil {
		return err
	}
	m.log.Info("egress rule added by an approval", "sandbox", id, "phase", phase, "rule", rule)
	m.event(ctx, id, "policy", fmt.Sprintf("rule %v added to phase %s by an approval", rule, phase)) // the audit log (issue 16)
	return nil
}
