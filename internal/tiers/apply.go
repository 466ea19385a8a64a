package tiers

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// Apply merges tier t into the create options opts: the request names hosts, credentials
// and git settings; the tier sets the phases, limits the methods, marks the bindings and
// sets the git gate. A request may narrow its tier, never widen it: what it asks beyond
// the tier (a POST binding under read, net allow-all, a held push under edit, ...) is
// refused with an error naming the field, of class errdefs.ErrInvalidArgument. opts is
// changed only when Apply succeeds. Apply is pure.
func Apply(t Tier, opts *sandbox.CreateOptions) error {
	out := *opts
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("tier %s: %s: %s: %w", t.Name, field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
	}
	spec, err := applyEgress(t, opts.Policy, bad)
	if err != nil {
		return err
	}
	out.Policy = spec

	out.Credentials = slices.Clone(opts.Credentials)
	switch t.Credentials.Mode {
	case CredNone:
		if len(out.Credentials) > 0 {
			return bad("credentials", "this tier binds no credentials (%s asked)", out.Credentials[0].Secret)
		}
	case CredReadOnly:
		for i := range out.Credentials {
			c := &out.Credentials[i]
			if len(c.Methods) == 0 {
				c.Methods = readMethods()
			}
			for _, m := range c.Methods {
				if !slices.Contains(readMethods(), m) {
					return bad("credentials", "%s: this tier lets credentials into GET and HEAD requests only; %s can write", c.Secret, m)
				}
			}
			if g := c.GitHub; g != nil {
				for _, k := range sortedKeys(g.Permissions) {
					if v := g.Permissions[k]; v != "read" {
						return bad("credentials", "%s: this tier mints read-only GitHub tokens; permission %s is %q", c.Secret, k, v)
					}
				}
			}
		}
	case CredAsBound:
	default:
		return bad("credentials.mode", "%q is not a credential mode", t.Credentials.Mode)
	}
	if t.Credentials.Approve {
		for i := range out.Credentials {
			out.Credentials[i].Approve = true
		}
	}

	switch t.Git.Push {
	case PushNone:
		if opts.AgentBranchPrefix != "" {
			return bad("agent_branch_prefix", "this tier allows no push, so it has no agent branch")
		}
		if opts.GitProtected == sandbox.GitProtectedHold {
			return bad("git_protected", "this tier allows no push, so nothing is held")
		}
		out.GitPush = sandbox.GitPushNone
	case PushAgentBranch:
		switch {
		case t.Git.Protected == ProtectedRefuse && opts.GitProtected == sandbox.GitProtectedHold:
			return bad("git_protected", "this tier refuses pushes that touch protected paths; hold would keep them for approval")
		case t.Git.Protected == ProtectedHold && opts.GitProtected != sandbox.GitProtectedRefuse:
			out.GitProtected = sandbox.GitProtectedHold
		}
	default:
		return bad("git.push", "%q is not a push mode", t.Git.Push)
	}
	out.Tier = t.Name
	*opts = out
	return nil
}

// applyEgress returns the policy of a sandbox of tier t whose request asked for req.
func applyEgress(t Tier, req *policy.Spec, bad func(field, format string, args ...any) error) (*policy.Spec, error) {
	var run policy.Rules
	var sets map[string][]string
	if req != nil {
		for _, name := range sortedKeys(req.Phases) {
			if name != "run" {
				return nil, bad("policy.phases", "this tier makes the phases itself; give the hosts in a phase named run (not %q)", name)
			}
		}
		run = req.Phases["run"]
		run = policy.Rules{Net: run.Net, Allow: slices.Clone(run.Allow), Deny: slices.Clone(run.Deny), HTTP: slices.Clone(run.HTTP), Ask: slices.Clone(run.Ask)}
		sets = req.Sets
		if req.Phase != "" && req.Phase != "run" {
			return nil, bad("policy.phase", "%q: a tiered sandbox starts in its tier's first phase", req.Phase)
		}
	}
	switch run.Net {
	case policy.NetAllowAll:
		if !t.Egress.AllowAll {
			return nil, bad("policy", "this tier limits the network to the hosts it names; net allow-all would open it")
		}
	case policy.NetDenyAll:
		run.Net = ""
	}
	if ms := t.Egress.Methods; len(ms) > 0 {
		if run.Net == policy.NetAllowAll {
			return nil, bad("policy", "this tier limits requests to %s; net allow-all cannot be limited", strings.Join(ms, ","))
		}
		// A set the tier allows, extended by the request, would carry any method.
		for _, name := range sortedKeys(sets) {
			if slices.Contains(t.Egress.Allow, name) || t.Egress.Setup != nil && slices.Contains(t.Egress.Setup.Allow, name) {
				return nil, bad("policy.sets", "%s: this tier limits requests to %s and allows the set itself; a request may not extend it", name, strings.Join(ms, ","))
			}
		}
		var allow, http []string
		for _, a := range run.Allow {
			switch {
			case isSet(a, sets):
				if !slices.Contains(t.Egress.Allow, a) {
					return nil, bad("policy.allow", "%s: this tier limits requests to %s; allow the hosts by name rather than the set", a, strings.Join(ms, ","))
				}
				allow = append(allow, a)
			case isAddress(a):
				return nil, bad("policy.allow", "%s: this tier limits requests to %s, which needs a host name, not an address", a, strings.Join(ms, ","))
			default:
				http = append(http, strings.TrimSpace(a)+" "+strings.Join(ms, ","))
			}
		}
		for _, h := range run.HTTP {
			r, err := limitMethods(h, ms)
			if err != nil {
				return nil, bad("policy.http", "%s: %v", strings.TrimSpace(h), err)
			}
			http = append(http, r)
		}
		run.Allow, run.HTTP = allow, http
	}
	run.Allow = appendNew(run.Allow, t.Egress.Allow...)
	run.HTTP = appendNew(run.HTTP, t.Egress.HTTP...)
	// Ask mode holds what no rule allows for a person: the tier's, or the request's own
	// (asking never lets anything through by itself).
	spec := policy.Spec{Phases: map[string]policy.Rules{"run": run}, Phase: "run", Sets: sets, AskAll: t.Ask}
	if req != nil {
		spec.AskAll = spec.AskAll || req.AskAll
		spec.AskWait = req.AskWait
	}
	if s := t.Egress.Setup; s != nil {
		setup := policy.Rules{Net: run.Net, Allow: appendNew(slices.Clone(run.Allow), s.Allow...), Deny: slices.Clone(run.Deny), HTTP: appendNew(slices.Clone(run.HTTP), s.HTTP...), Ask: slices.Clone(run.Ask)}
		spec.Phases["setup"] = setup
		spec.Phase = "setup" // whatever the request named: switching to run closes it
	}
	for _, name := range sortedKeys(spec.Phases) {
		r := spec.Phases[name]
		if r.Net == "" && len(r.Allow) == 0 && len(r.HTTP) == 0 && len(r.Ask) == 0 && !spec.AskAll {
			r.Net, r.Deny = policy.NetDenyAll, nil
			spec.Phases[name] = r
		}
	}
	if err := spec.Validate(); err != nil {
		return nil, bad("policy", "%v", err)
	}
	return &spec, nil
}

// limitMethods returns the HTTP rule h ("HOST[:PORTS] [METHODS] [/PREFIX]") limited to ms:
// without methods (or "*") it gets ms; with methods, each must be one of ms.
func limitMethods(h string, ms []string) (string, error) {
	f := strings.Fields(h)
	if len(f) == 0 {
		return "", fmt.Errorf("empty rule")
	}
	if len(f) == 1 || strings.HasPrefix(f[1], "/") || f[1] == "*" {
		rest := f[1:]
		if len(rest) > 0 && rest[0] == "*" {
			rest = rest[1:]
		}
		return strings.Join(append([]string{f[0], strings.Join(ms, ",")}, rest...), " "), nil
	}
	for _, m := range strings.Split(f[1], ",") {
		if !slices.Contains(ms, m) {
			return "", fmt.Errorf("this tier limits requests to %s; %s is not one of them", strings.Join(ms, ","), m)
		}
	}
	return strings.Join(f, " "), nil
}

// isSet reports whether rule names a set: a built-in one or one of the request's.
func isSet(rule string, sets map[string][]string) bool {
	r := strings.ToLower(strings.TrimSpace(rule))
	if _, ok := policy.BuiltinSets()[r]; ok {
		return true
	}
	_, ok := sets[r]
	return ok
}

// isAddress reports whether rule names an address or a prefix rather than a host.
func isAddress(rule string) bool {
	r := strings.TrimSpace(rule)
	if h, _, ok := strings.Cut(r, "]:"); ok && strings.HasPrefix(h, "[") {
		r = h[1:]
	} else if strings.Count(r, ":") == 1 {
		r, _, _ = strings.Cut(r, ":")
	}
	if _, err := netip.ParsePrefix(r); err == nil {
		return true
	}
	_, err := netip.ParseAddr(strings.Trim(r, "[]"))
	return err == nil
}

// appendNew appends the values of add not already in list.
func appendNew(list []string, add ...string) []string {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}

// Policy returns the egress policy a sandbox of tier t gets when its policy is replaced
// by req (PUT …/policy, moat policy set): req's run phase is merged with the tier as at
// create, and what it asks beyond the tier is refused; a setup phase in req is replaced by
// the one the tier makes from the new run phase. The result names req's phase when the
// result has it, else none (the sandbox keeps its current phase). Policy is pure.
func Policy(t Tier, req policy.Spec) (*policy.Spec, error) {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("tier %s: %s: %s: %w", t.Name, field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
	}
	in := policy.Spec{Phases: map[string]policy.Rules{}, Sets: req.Sets}
	for name, r := range req.Phases {
		if name != "setup" {
			in.Phases[name] = r
		}
	}
	if len(in.Phases) == 0 {
		return nil, bad("policy.phases", "give the hosts in a phase named run")
	}
	spec, err := applyEgress(t, &in, bad)
	if err != nil {
		return nil, err
	}
	spec.Phase = ""
	if _, ok := spec.Phases[req.Phase]; ok {
		spec.Phase = req.Phase
	}
	return spec, nil
}
