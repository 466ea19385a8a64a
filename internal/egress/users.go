package egress

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/moatdev/moat/internal/egress/dns"
	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/netns"
	"github.com/moatdev/moat/internal/sandbox"
)

// Per-user egress (issue 15): a sandbox's users are told apart by the source ports its
// own NAT table gives their connections (sandbox.PortMap, internal/netns/userports.go);
// a user with rules of its own (sandbox.UserEgress) reaches only what the sandbox's
// policy and its rules both allow, and gets only the credentials they name.

// userSet is what a boundary knows of its sandbox's users. Immutable once made.
type userSet struct {
	users []sandbox.User
	ports []sandbox.UserPorts
	// rules: the compiled own rules of each user that has them.
	rules map[string]*policy.Policy
	// creds: the secrets each user with rules of its own may have injected.
	creds map[string]map[string]bool
	// strict: some user has rules of its own, so a connection moat's table did not tag
	// is refused.
	strict bool
}

// newUserSet compiles users' own rules with the sets of spec (the sandbox's policy).
func newUserSet(users []sandbox.User, spec policy.Spec) (*userSet, error) {
	s := &userSet{users: users, rules: map[string]*policy.Policy{}, creds: map[string]map[string]bool{}}
	s.ports, _ = sandbox.PortMap(users)
	for _, u := range users {
		if u.Egress == nil {
			continue
		}
		pol, err := policy.Compile(policy.Rules{Allow: u.Egress.Allow}, spec.Sets)
		if err != nil {
			return nil, fmt.Errorf("egress rules of user %s: %w: %w", u.Name, err, errdefs.ErrInvalidArgument)
		}
		s.rules[u.Name] = pol
		s.creds[u.Name] = map[string]bool{}
		for _, c := range u.Egress.Credentials {
			s.creds[u.Name][c] = true
		}
		s.strict = true
	}
	return s, nil
}

// userOf names the user of a connection from src (the proxy's Config.User).
func (s *userSet) userOf(src netip.AddrPort) (user, refuse string) {
	if s == nil {
		return "", ""
	}
	if src.Addr().Unmap() != netns.SandboxAddr {
		return "", ""
	}
	u, known := sandbox.UserOf(s.ports, src.Port())
	if !known && s.strict {
		return "", fmt.Sprintf("source port %d lies in no user's range: moat's per-user table did not tag the connection, and the sandbox has per-user rules", src.Port())
	}
	return u, ""
}

// policyOf returns user's own rules, nil when it has none.
func (s *userSet) policyOf(user string) *policy.Policy {
	if s == nil {
		return nil
	}
	return s.rules[user]
}

// injects says whether user's requests may get the credential of secret.
func (s *userSet) injects(user, secret string) bool {
	if s == nil || user == "" {
		return true
	}
	names, ok := s.creds[user]
	return !ok || names[secret]
}

// decideName is the DNS server's question for user: the sandbox's policy, then the user's
// own rules (deny wins). A query whose source port lies in no range is answered as the
// sandbox's (the proxy refuses its connections).
func (b *boundary) decideName(user, name string) dns.Verdict {
	_, pol := b.current()
	d := pol.AllowsName(name)
	if d.Allow || d.Ask {
		// The user's own rules narrow an ask too: what they deny is not put to a person.
		if up := b.users.Load().policyOf(user); up != nil {
			if ud := up.AllowsName(name); !ud.Allow {
				d = policy.Decision{Rule: "user " + user, Reason: "user " + user + "'s own rules: " + ud.Reason}
			}
		}
	}
	if d.Ask {
		d.Reason = "answered: a connection will be held for approval (" + d.Rule + ")"
	}
	return dns.Verdict{Allow: d.Allow, Ask: d.Ask, Rule: d.Rule, Reason: d.Reason}
}

// upstreamsFor returns the pool of upstream connections for user's requests: each named
// user has its own (root and users not told apart share the sandbox's), so a server that
// authenticates a connection rather than each request never sees one user's credential
// on another user's request.
func (m *Manager) upstreamsFor(b *boundary, user string) *intercept.Upstreams {
	if user == "" {
		return b.upstreams
	}
	if u, ok := b.userUps.Load(user); ok {
		return u.(*intercept.Upstreams)
	}
	u, _ := b.userUps.LoadOrStore(user, intercept.NewUpstreams(m.cfg.RootCAs))
	return u.(*intercept.Upstreams)
}

// resetUpstreams closes the idle upstream connections of the sandbox and of its users.
func (b *boundary) resetUpstreams() {
	b.upstreams.Reset()
	b.userUps.Range(func(_, u any) bool {
		u.(*intercept.Upstreams).Reset()
		return true
	})
}

// SetUsers gives an attached sandbox its users (Sandbox.Users) and their own rules, and
// cuts open connections those rules no longer allow; it returns how many. A sandbox that
// is not attached is no error: its users apply when it starts (the sandbox manager calls
// SetUsers then).
func (m *Manager) SetUsers(id string, users []sandbox.User) (int, error) {
	m.mu.Lock()
	b := m.bs[id]
	m.mu.Unlock()
	if b == nil {
		return 0, nil
	}
	b.mu.RLock()
	spec := b.spec
	b.mu.RUnlock()
	us, err := newUserSet(slices.Clone(users), spec)
	if err != nil {
		return 0, err
	}
	b.users.Store(us)
	cut := b.proxy.Recheck()
	m.log.Info("egress users set", "sandbox", id, "users", len(users), "with_rules", len(us.rules), "connections_cut", cut)
	return cut, nil
}

// recompileUsers compiles the users' rules again after the sandbox's policy (its sets)
// changed; rules that no longer compile deny everything to their user.
func (m *Manager) recompileUsers(b *boundary, spec policy.Spec) {
	old := b.users.Load()
	if old == nil {
		return
	}
	us, err := newUserSet(old.users, spec)
	if err != nil {
		m.log.Warn("user egress rules no longer compile with the sandbox's sets: those users reach nothing", "sandbox", b.id, "err", err)
		us = &userSet{users: old.users, ports: old.ports, rules: map[string]*policy.Policy{}, creds: map[string]map[string]bool{}, strict: true}
		for _, u := range old.users {
			if u.Egress != nil {
				us.rules[u.Name], _ = policy.Compile(policy.Rules{Net: policy.NetDenyAll}, nil)
				us.creds[u.Name] = map[string]bool{}
			}
		}
	}
	b.users.Store(us)
}
