package sandbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

// Changing a sandbox's egress policy.

// PolicyUpdate changes a sandbox's egress policy: a new Spec, a new phase, or both.
type PolicyUpdate struct {
	Spec  *policy.Spec `json:"policy,omitempty"` // nil keeps the current policy
	Phase string       `json:"phase,omitempty"`  // "" keeps the spec's phase
}

// SetPolicy records a sandbox's new egress policy and, when it runs, applies it at once:
// connections the new policy does not allow are cut (their number is returned).
func (m *Manager) SetPolicy(ctx context.Context, id string, u PolicyUpdate) (*Sandbox, int, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if sb.Warm {
		return nil, 0, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	spec := sb.EgressPolicy()
	if u.Spec != nil {
		current := spec.Phase
		spec = *u.Spec
		if u.Phase == "" {
			// A new policy without a phase keeps the current phase if it has it, else
			// starts in "run" (policy.StartReplace).
			if spec, err = spec.WithStartPhase(policy.StartReplace, current); err != nil {
				return nil, 0, fmt.Errorf("egress policy: %w: %w", err, errdefs.ErrInvalidArgument)
			}
		}
	}
	if u.Phase != "" {
		if _, ok := spec.Phases[u.Phase]; !ok {
			return nil, 0, fmt.Errorf("the policy has no phase %q (phases: %s): %w", u.Phase, strings.Join(slices.Sorted(maps.Keys(spec.Phases)), ", "), errdefs.ErrInvalidArgument)
		}
		spec.Phase = u.Phase
	}
	if err := spec.Validate(); err != nil {
		return nil, 0, fmt.Errorf("egress policy: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	sb, err = m.store.Update(ctx, id, func(s *Sandbox) error { s.Policy = &spec; return nil })
	if err != nil {
		return nil, 0, err
	}
	cut, err := m.egress.SetPolicy(id, spec)
	if err != nil {
		return sb, 0, err
	}
	m.log.Info("egress policy changed", "sandbox", id, "phase", spec.Phase, "connections_cut", cut)
	m.event(ctx, id, "policy", policySummary(u, spec, cut)) // the audit log (issue 16)
	return sb, cut, nil
}

// policySummary is a policy change's audit detail: what changed (policy, phase), the phase
// now in force, its phases and the connections cut.
func policySummary(u PolicyUpdate, spec policy.Spec, cut int) string {
	what := "phase"
	if u.Spec != nil {
		what = "policy"
	}
	return fmt.Sprintf("%s changed: phase %s (phases: %s), %d connections cut", what, spec.Phase,
		strings.Join(slices.Sorted(maps.Keys(spec.Phases)), ", "), cut)
}
