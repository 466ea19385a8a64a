// Package tiers holds consequence tiers: presets that set a sandbox's egress policy,
// credential bindings, change authority (git) and approvals together, so that a task gets
// the power its consequences justify and no more. A Tier is plain data (a YAML or JSON
// file can define one); Apply merges a tier into a create request and refuses what the
// request asks beyond it. The package is pure: no I/O, no state.
package tiers

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

// Tier is one preset.
type Tier struct {
	// Name is how the tier is selected (--tier NAME): 1-63 of [a-z0-9_-], starting with a
	// letter or digit.
	Name        string      `json:"name" yaml:"name"`
	Description string      `json:"description,omitempty" yaml:"description,omitempty"`
	Egress      Egress      `json:"egress" yaml:"egress"`
	Credentials Credentials `json:"credentials" yaml:"credentials"`
	Git         Git         `json:"git" yaml:"git"`
	// Ask turns on the network's ask mode: a connection the policy does not allow is
	// held for a person's decision instead of refused.
	Ask bool `json:"ask,omitempty" yaml:"ask,omitempty"`
}

// Egress is what a tier does to the request's egress policy. The request names the hosts
// (its policy's run phase); the tier limits what may be sent to them and adds its own.
type Egress struct {
	// Methods, if set, limits every request the sandbox sends in the run phase to these
	// methods: each host the request allows becomes an HTTP rule with them, and an HTTP
	// rule asking for another method is refused. Empty: the request's rules as written.
	Methods []string `json:"methods,omitempty" yaml:"methods,omitempty"`
	// Allow and HTTP are rules (hosts, sets, HTTP rules) the tier adds to every phase.
	Allow []string `json:"allow,omitempty" yaml:"allow,omitempty"`
	HTTP  []string `json:"http,omitempty" yaml:"http,omitempty"`
	// Setup, if set, adds a "setup" phase: the run phase's rules and these. The sandbox
	// starts in it; switching to "run" (moat policy phase ID run, or moat run --setup once
	// the setup command is done) closes it.
	Setup *Phase `json:"setup,omitempty" yaml:"setup,omitempty"`
	// AllowAll lets the request open the network to everything (net allow-all). Off: the
	// network is limited to the hosts the request and the tier name.
	AllowAll bool `json:"allow_all,omitempty" yaml:"allow_all,omitempty"`
}

// Phase is rules one phase adds.
type Phase struct {
	Allow []string `json:"allow,omitempty" yaml:"allow,omitempty"`
	HTTP  []string `json:"http,omitempty" yaml:"http,omitempty"`
}

// Credentials is what credential bindings a tier lets a sandbox have.
type Credentials struct {
	// Mode: CredNone (no binding), CredReadOnly (bindings limited to GET and HEAD
	// requests; a GitHub App scope may only read) or CredAsBound (as the request binds
	// them).
	Mode string `json:"mode" yaml:"mode"`
	// Approve makes every use of every binding wait for a person's approval: the proxy
	// holds the request until it is approved (then injected and sent) or denied (403,
	// nothing sent).
	Approve bool `json:"approve,omitempty" yaml:"approve,omitempty"`
}

// The values of Credentials.Mode.
const (
	CredNone     = "none"
	CredReadOnly = "read-only"
	CredAsBound  = "as-bound"
)

// Git is a tier's change authority.
type Git struct {
	// Push: PushNone (every push refused) or PushAgentBranch (only under the sandbox's
	// agent branch prefix).
	Push string `json:"push" yaml:"push"`
	// Protected is what a push touching protected paths gets: ProtectedRefuse or
	// ProtectedHold (kept for a person to approve). Not used with PushNone.
	Protected string `json:"protected,omitempty" yaml:"protected,omitempty"`
}

// The values of Git.Push and Git.Protected.
const (
	PushNone        = "none"
	PushAgentBranch = "agent-branch"
	ProtectedRefuse = "refuse"
	ProtectedHold   = "hold"
)

// readMethods are the methods a read-only credential binding may be injected into.
func readMethods() []string { return []string{"GET", "HEAD"} }

// Builtins returns the built-in tiers, in order of the power they give: read, edit,
// integrate, operate. Each call returns fresh copies.
func Builtins() []Tier {
	return []Tier{
		{
			Name:        "read",
			Description: "look, do not touch: GET and HEAD to the listed hosts only, credentials for reading only, no push",
			Egress:      Egress{Methods: readMethods()},
			Credentials: Credentials{Mode: CredReadOnly},
			Git:         Git{Push: PushNone},
		},
		{
			Name:        "edit",
			Description: "change the workspace: a setup phase with the package registries, then only the listed hosts; push to the agent branch only; pushes touching protected paths refused",
			Egress:      Egress{Setup: &Phase{Allow: []string{"registries"}}},
			Credentials: Credentials{Mode: CredAsBound},
			Git:         Git{Push: PushAgentBranch, Protected: ProtectedRefuse},
		},
		{
			Name:        "integrate",
			Description: "as edit, plus the write APIs the request names in HTTP rules; pushes touching protected paths held for a person's approval",
			Egress:      Egress{Setup: &Phase{Allow: []string{"registries"}}},
			Credentials: Credentials{Mode: CredAsBound},
			Git:         Git{Push: PushAgentBranch, Protected: ProtectedHold},
		},
		{
			Name:        "operate",
			Description: "as integrate, and every use of a credential (which may touch production) waits for a person's approval",
			Egress:      Egress{Setup: &Phase{Allow: []string{"registries"}}},
			Credentials: Credentials{Mode: CredAsBound, Approve: true},
			Git:         Git{Push: PushAgentBranch, Protected: ProtectedHold},
		},
	}
}

// Validate checks t; errors name the field (e.g. `credentials.mode: ...`) and are
// errdefs.ErrInvalidArgument.
func (t Tier) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
	}
	if !validName(t.Name) {
		return bad("name", "%q is not a tier name (1-63 of lowercase letters, digits, '-' and '_', starting with a letter or digit)", truncate(t.Name, 80))
	}
	if strings.ContainsAny(t.Description, "\r\n") || len(t.Description) > 1024 {
		return bad("description", "one line of at most 1024 bytes")
	}
	for _, m := range t.Egress.Methods {
		if !policy.IsMethod(m) {
			return bad("egress.methods", "%q is not an HTTP method (upper case, e.g. GET)", truncate(m, 40))
		}
	}
	// The tier's own rules must compile: in a phase of their own, with the built-in sets.
	check := func(field string, r policy.Rules) error {
		if len(r.Allow) == 0 && len(r.HTTP) == 0 {
			return nil
		}
		if err := policy.Single(r).Validate(); err != nil {
			return bad(field, "%v", err)
		}
		return nil
	}
	if err := check("egress", policy.Rules{Allow: t.Egress.Allow, HTTP: t.Egress.HTTP}); err != nil {
		return err
	}
	if s := t.Egress.Setup; s != nil {
		if err := check("egress.setup", policy.Rules{Allow: s.Allow, HTTP: s.HTTP}); err != nil {
			return err
		}
	}
	switch t.Credentials.Mode {
	case CredNone, CredReadOnly, CredAsBound:
	default:
		return bad("credentials.mode", "%q is not %s, %s or %s", truncate(t.Credentials.Mode, 40), CredNone, CredReadOnly, CredAsBound)
	}
	switch t.Git.Push {
	case PushNone:
		if t.Git.Protected != "" {
			return bad("git.protected", "a tier that allows no push has no protected paths to decide")
		}
	case PushAgentBranch:
		if t.Git.Protected != ProtectedRefuse && t.Git.Protected != ProtectedHold {
			return bad("git.protected", "%q is not %s or %s", truncate(t.Git.Protected, 40), ProtectedRefuse, ProtectedHold)
		}
	default:
		return bad("git.push", "%q is not %s or %s", truncate(t.Git.Push, 40), PushNone, PushAgentBranch)
	}
	return nil
}

// Set is the tiers a daemon offers: the built-ins, then the operator's (which may replace
// a built-in of the same name). It is immutable.
type Set struct {
	byName map[string]Tier
	names  []string
}

// NewSet returns the built-ins with extra added or replacing them by name. Every tier must
// be valid and named once in extra.
func NewSet(extra []Tier) (*Set, error) {
	s := &Set{byName: map[string]Tier{}}
	for _, t := range Builtins() {
		s.byName[t.Name] = t
		s.names = append(s.names, t.Name)
	}
	seen := map[string]bool{}
	for i, t := range extra {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("tier %d (%q): %w", i+1, truncate(t.Name, 80), err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("tier %d: %q is defined twice: %w", i+1, t.Name, errdefs.ErrInvalidArgument)
		}
		seen[t.Name] = true
		if _, ok := s.byName[t.Name]; !ok {
			s.names = append(s.names, t.Name)
		}
		s.byName[t.Name] = t
	}
	return s, nil
}

// Get returns the tier named name.
func (s *Set) Get(name string) (Tier, error) {
	t, ok := s.byName[name]
	if !ok {
		return Tier{}, fmt.Errorf("tier %q: no such tier (have %s): %w", truncate(name, 80), strings.Join(s.names, ", "), errdefs.ErrNotFound)
	}
	return clone(t), nil
}

// Names returns the tiers' names, in List's order.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// List returns every tier: the built-ins in their order, then the operator's.
func (s *Set) List() []Tier {
	out := make([]Tier, 0, len(s.names))
	for _, n := range s.names {
		out = append(out, clone(s.byName[n]))
	}
	return out
}

// clone returns a deep copy of t: callers may change it.
func clone(t Tier) Tier {
	t.Egress.Methods = slices.Clone(t.Egress.Methods)
	t.Egress.Allow = slices.Clone(t.Egress.Allow)
	t.Egress.HTTP = slices.Clone(t.Egress.HTTP)
	if t.Egress.Setup != nil {
		p := Phase{Allow: slices.Clone(t.Egress.Setup.Allow), HTTP: slices.Clone(t.Egress.Setup.HTTP)}
		t.Egress.Setup = &p
	}
	return t
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// sortedKeys is maps.Keys sorted.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
