package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

// Per-user egress (issue 15): a user without sudo can be given rules and credentials of
// its own, narrower than the sandbox's (UserEgress). The daemon tells the users'
// connections apart in the sandbox's network namespace (userports.go) and the egress
// proxy decides each with the sandbox's policy and the user's rules.

// userNetwork is implemented by a Network that can tag a sandbox's connections with their
// user (*netns.Manager).
type userNetwork interface {
	// SetUserPorts writes the source-port table of the users into the network namespace
	// pinned at sandboxNS, replacing the one there.
	SetUserPorts(sandboxNS string, ports []UserPorts) error
}

// userEgress is implemented by an Egress that applies users' own rules (*egress.Manager).
type userEgress interface {
	// SetUsers gives an attached sandbox its users and cuts the open connections their
	// rules no longer allow, returning how many; a detached sandbox is no error.
	SetUsers(id string, users []User) (int, error)
}

// tellsUsersApart says whether the host sees the socket owner of sb's connections: not
// under a runtime with its own kernel (gVisor's netstack, or its Sentry's host sockets,
// all of one owner).
func tellsUsersApart(sb *Sandbox) bool { return !TraitsOf(sb.Runtime).OwnKernel }

// applyUserNetwork puts sb's users in place on its network: the source-port table in its
// namespace S (when the runtime lets the host tell users apart and it has users) and the
// users' rules in its egress boundary. Called at every start, before the container runs,
// at a daemon's adoption of a running sandbox and after a change of the users.
func (m *Manager) applyUserNetwork(sb *Sandbox) (int, error) {
	if len(sb.Users) == 0 {
		return 0, nil
	}
	return m.setUserNetwork(sb)
}

// setUserNetwork is applyUserNetwork also for a sandbox without users (left after its last
// user was removed: its range and rules go).
func (m *Manager) setUserNetwork(sb *Sandbox) (int, error) {
	if un, ok := m.network.(userNetwork); ok && tellsUsersApart(sb) {
		ports, _ := PortMap(sb.Users)
		if err := un.SetUserPorts(m.paths(sb.ID).netns, ports); err != nil {
			return 0, fmt.Errorf("per-user source ports of sandbox %s: %w", sb.ID, err)
		}
	}
	if ue, ok := m.egress.(userEgress); ok {
		return ue.SetUsers(sb.ID, sb.Users)
	}
	return 0, nil
}

// UserEgressResult is the outcome of SetUserEgress.
type UserEgressResult struct {
	Sandbox *Sandbox
	User    User
	// Cut is how many open connections of the sandbox the change cut.
	Cut int
}

// SetUserEgress gives user name of sandbox id rules and credentials of its own (nil: the
// sandbox's again) and applies them at once when the sandbox runs (open connections they
// no longer allow are cut); they apply at every start. Refused (ErrInvalidArgument unless
// said): a warm or unknown sandbox or user (ErrNotFound), a sandbox whose runtime has its
// own network stack (ErrUnavailable: the host sees no socket owner), a user with sudo
// (who can become any uid), a user that shares its source ports with another (its uid's
// slot is taken), rules that do not compile or that the sandbox's current policy allows
// nowhere (a user's rules only narrow the sandbox's), credentials not bound to the sandbox.
func (m *Manager) SetUserEgress(ctx context.Context, id, name string, ue *UserEgress) (*UserEgressResult, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Warm {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err := checkUserEgress(sb, name, ue); err != nil {
		return nil, err
	}
	if ue != nil {
		c := UserEgress{Allow: slices.Clone(ue.Allow), Credentials: slices.Clone(ue.Credentials)}
		if c.Allow == nil {
			c.Allow = []string{}
		}
		ue = &c
	}
	sb, err = m.store.Update(ctx, id, func(s *Sandbox) error {
		for i := range s.Users {
			if s.Users[i].Name == name {
				s.Users[i].Egress = ue
				return nil
			}
		}
		return fmt.Errorf("sandbox %s has no user %q: %w", id, name, errdefs.ErrNotFound)
	})
	if err != nil {
		return nil, err
	}
	res := &UserEgressResult{Sandbox: sb}
	for _, u := range sb.Users {
		if u.Name == name {
			res.User = u
		}
	}
	if sb.State == StateRunning || sb.State == StatePaused {
		if res.Cut, err = m.applyUserNetwork(sb); err != nil {
			return nil, err
		}
	}
	m.log.Info("user egress set", "sandbox", id, "user", name, "own_rules", ue != nil, "connections_cut", res.Cut)
	return res, nil
}

// checkUserEgress is SetUserEgress's refusals, pure.
func checkUserEgress(sb *Sandbox, name string, ue *UserEgress) error {
	i := slices.IndexFunc(sb.Users, func(u User) bool { return u.Name == name })
	if i < 0 {
		return fmt.Errorf("sandbox %s has no user %q (add it with `moat user add`): %w", sb.ID, name, errdefs.ErrNotFound)
	}
	u := sb.Users[i]
	if ue == nil {
		return nil // back to the sandbox's: always allowed
	}
	if !tellsUsersApart(sb) {
		return fmt.Errorf("per-user egress needs a runtime whose connections the host sees with their owner; %s runs its own network stack (gVisor), where every connection of the sandbox is the runtime's: use runc or crun: %w",
			sb.Runtime, errdefs.ErrUnavailable)
	}
	if u.Sudo {
		return fmt.Errorf("user %s has sudo and can become any user of the sandbox, so rules of its own would bind nothing; per-user egress is for users without sudo: %w", name, errdefs.ErrInvalidArgument)
	}
	if _, clash := PortMap(sb.Users); slices.Contains(clash, name) {
		return fmt.Errorf("user %s (uid %d) shares its source-port slot (uid mod %d) with another user, so its connections cannot be told apart: %w", name, u.UID, UserSlots, errdefs.ErrInvalidArgument)
	}
	spec := sb.EgressPolicy()
	if _, err := policy.Compile(policy.Rules{Allow: ue.Allow}, spec.Sets); err != nil {
		return fmt.Errorf("egress rules of user %s: %w: %w", name, err, errdefs.ErrInvalidArgument)
	}
	if outside := rulesOutside(spec, ue.Allow); len(outside) > 0 {
		return fmt.Errorf("the sandbox's policy (phase %s) allows nothing that %s names; a user's rules only narrow the sandbox's: %w",
			spec.Phase, strings.Join(outside, ", "), errdefs.ErrInvalidArgument)
	}
	for _, c := range ue.Credentials {
		if !slices.ContainsFunc(sb.Credentials, func(b Credential) bool { return b.Secret == c }) {
			return fmt.Errorf("credential %q is not bound to sandbox %s (user credentials name the sandbox's bindings by secret): %w", c, sb.ID, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// rulesOutside lists the rules of allow that the current phase of spec covers nowhere
// (policy.CoversRule).
func rulesOutside(spec policy.Spec, allow []string) []string {
	comp, err := policy.CompileSpec(spec)
	if err != nil {
		return allow
	}
	pol, ok := comp.Phase(spec.Phase)
	if !ok {
		return allow
	}
	var out []string
	for _, r := range allow {
		if !pol.CoversRule(r, spec.Sets) {
			out = append(out, strings.TrimSpace(r))
		}
	}
	return out
}
