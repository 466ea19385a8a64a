package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/tiers"
)

// Consequence tiers: GET /v1/tiers, GET /v1/tiers/{name}, and the tier of a create (the
// native request's "tier", E2B metadata E2BTierKey).

// E2BTierKey is the E2B create metadata key that selects a tier.
const E2BTierKey = "moat.tier"

// SetTiers sets the tiers creates may select (default: the built-ins).
func (s *Server) SetTiers(t *tiers.Set) { s.tiers = t }

func (s *Server) tierRoutes() []route {
	return []route{
		{"GET /v1/tiers", s.listTiers, byKey},
		{"GET /v1/tiers/{name}", s.getTier, byKey},
	}
}

// tierSet is the server's tiers.
func (s *Server) tierSet() *tiers.Set {
	if s.tiers == nil {
		set, err := tiers.NewSet(nil)
		if err != nil {
			panic(err) // the built-ins are valid (tiers.TestBuiltinsValid)
		}
		s.tiers = set
	}
	return s.tiers
}

// applyTier merges the tier named name ("": none) into opts.
func (s *Server) applyTier(name string, opts *sandbox.CreateOptions) error {
	if name == "" {
		return nil
	}
	set := s.tierSet()
	t, err := set.Get(name)
	if err != nil {
		// An unknown tier is a bad request, not a missing resource.
		if len(name) > 80 {
			name = name[:80] + "..."
		}
		return fmt.Errorf("tier %q: no such tier (have %s; moat tier ls): %w", name, strings.Join(set.Names(), ", "), errdefs.ErrInvalidArgument)
	}
	return tiers.Apply(t, opts)
}

// tierPolicy returns the new policy spec (nil: none) of sandbox id merged with the
// sandbox's tier, if it has one (tiers.Policy): a tiered sandbox's policy stays within
// its tier. Between the read and the change a sandbox's tier cannot change (it is fixed at
// create).
func (s *Server) tierPolicy(ctx context.Context, id string, spec *policy.Spec) (*policy.Spec, error) {
	if spec == nil {
		return nil, nil
	}
	sb, err := s.sandboxes.Get(ctx, id)
	if err != nil || sb.Tier == "" {
		return spec, err
	}
	t, err := s.tierSet().Get(sb.Tier)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s has tier %q, which the daemon no longer has (its --tiers file changed); its policy cannot be changed: %w", id, sb.Tier, errdefs.ErrConflict)
	}
	return tiers.Policy(t, *spec)
}

func (s *Server) listTiers(w http.ResponseWriter, r *http.Request) {
	list := s.tierSet().List()
	out := make([]v1.Tier, 0, len(list))
	for _, t := range list {
		out = append(out, ToAPITier(t))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTier(w http.ResponseWriter, r *http.Request) {
	t, err := s.tierSet().Get(r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ToAPITier(t))
}

// ToAPITier is t as the API shows it.
func ToAPITier(t tiers.Tier) v1.Tier {
	out := v1.Tier{
		Name: t.Name, Description: t.Description, Ask: t.Ask, Builtin: isBuiltin(t),
		Egress:      v1.TierEgress{Methods: t.Egress.Methods, Allow: t.Egress.Allow, HTTP: t.Egress.HTTP, AllowAll: t.Egress.AllowAll},
		Credentials: v1.TierCredentials{Mode: t.Credentials.Mode, Approve: t.Credentials.Approve},
		Git:         v1.TierGit{Push: t.Git.Push, Protected: t.Git.Protected},
	}
	if p := t.Egress.Setup; p != nil {
		out.Egress.Setup = &v1.TierPhase{Allow: p.Allow, HTTP: p.HTTP}
	}
	return out
}

// isBuiltin reports whether t is a built-in tier as built in (not replaced by the
// operator's file).
func isBuiltin(t tiers.Tier) bool {
	return slices.ContainsFunc(tiers.Builtins(), func(b tiers.Tier) bool { return reflect.DeepEqual(b, t) })
}
