package gitgate

import (
	"fmt"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// DefaultPrefixRoot is where agent branches live: a sandbox named NAME pushes under
// DefaultPrefixRoot + NAME + "/".
const DefaultPrefixRoot = "refs/heads/agent/"

// PolicySpec is what the daemon knows about a sandbox's pushes.
type PolicySpec struct {
	// Prefix is the ref prefix the sandbox may create and update refs under, e.g.
	// "refs/heads/agent/fix-login/" (see DefaultPrefix). It must be a valid ref name ending
	// in "/", under "refs/heads/" and at least one component below it: a sandbox never gets
	// all branches, nor tags, notes or other namespaces.
	Prefix string
	// AllowForcePush lets the sandbox rewrite (non-fast-forward update) refs under Prefix.
	// Off by default: the history an agent pushed is part of what a reviewer reads, and a
	// forced update erases it on the server.
	AllowForcePush bool
	// NoPush refuses every push (rule "no-push"): a sandbox whose tier allows no change
	// to leave through git.
	NoPush bool
}

// DefaultPrefix is the default agent prefix of a sandbox named name:
// "refs/heads/agent/<name>/". It does not check name; Compile does.
func DefaultPrefix(name string) string { return DefaultPrefixRoot + name + "/" }

// Policy is a compiled PolicySpec: immutable and safe for concurrent use.
type Policy struct {
	prefix         string
	allowForcePush bool
	noPush         bool
}

// Compile checks spec and returns its Policy. A prefix that is not a valid ref name
// ending in "/", or that is not strictly below "refs/heads/", is errdefs.ErrInvalidArgument.
func Compile(spec PolicySpec) (*Policy, error) {
	p := spec.Prefix
	if !strings.HasSuffix(p, "/") {
		return nil, fmt.Errorf("agent ref prefix %q: must end with %q: %w", truncate(p, 80), "/", errdefs.ErrInvalidArgument)
	}
	if err := CheckRefName(strings.TrimSuffix(p, "/")); err != nil {
		return nil, fmt.Errorf("agent ref prefix: %w", err)
	}
	if !strings.HasPrefix(p, "refs/heads/") || p == "refs/heads/" {
		return nil, fmt.Errorf("agent ref prefix %q: must be below %q: %w", p, "refs/heads/", errdefs.ErrInvalidArgument)
	}
	return &Policy{prefix: p, allowForcePush: spec.AllowForcePush, noPush: spec.NoPush}, nil
}

// Prefix is the policy's agent ref prefix.
func (p *Policy) Prefix() string { return p.prefix }

// FastForward answers whether updating ref from old to new is a fast-forward (old is an
// ancestor of new). The caller computes it from the pushed objects in a quarantine
// repository; Decide asks only for updates (neither id zero) under the prefix, and only when
// the policy refuses forced updates.
type FastForward func(ref, old, new string) bool

// Verdict is the decision on one command.
type Verdict struct {
	Command Command
	Allow   bool
	// Rule names what decided, for the audit log: "agent-prefix", "outside-prefix",
	// "delete", "tag", "non-fast-forward", "push-cert", "push-options", "protected-path",
	// "all-or-nothing", "no-push".
	Rule string
	// Reason is a sentence for the person reading git push's output ("" when allowed).
	// It is plain ASCII without newlines, fit for an "ng" line.
	Reason string
}

// Decision is the decision on a whole push.
type Decision struct {
	// Allow is true when every command is allowed; a push is forwarded whole or not at
	// all, so one refused command refuses the others too (Rule "all-or-nothing").
	Allow    bool
	Verdicts []Verdict
}

// Refused returns the verdicts that refuse, in order, the all-or-nothing ones last.
func (d Decision) Refused() []Verdict {
	var out, rest []Verdict
	for _, v := range d.Verdicts {
		switch {
		case v.Allow:
		case v.Rule == RuleAllOrNothing:
			rest = append(rest, v)
		default:
			out = append(out, v)
		}
	}
	return append(out, rest...)
}

// The rules of a Verdict.
const (
	RuleAgentPrefix    = "agent-prefix"
	RuleOutsidePrefix  = "outside-prefix"
	RuleDelete         = "delete"
	RuleTag            = "tag"
	RuleNonFastForward = "non-fast-forward"
	RulePushCert       = "push-cert"
	RulePushOptions    = "push-options"
	RuleAllOrNothing   = "all-or-nothing"
	RuleProtectedPath  = "protected-path"
	RuleNoPush         = "no-push"
)

// Decide decides req's commands. It does no I/O; ff is called as documented at FastForward
// (it may be nil when the policy allows forced updates; a nil ff otherwise counts every
// update as non-fast-forward, which refuses it). Rules, in order:
//
//   - a policy with NoPush refuses every command;
//   - a push certificate (git push --signed) or push options (git push -o) refuse every
//     command: certificates make the server record a signature over commands moat may
//     change nothing about, and push options are instructions to the git host (GitLab's
//     merge_request.* and ci.skip, for instance) outside any ref;
//   - deletions are refused everywhere;
//   - refs/tags/* are refused; any ref outside the prefix is refused;
//   - creations under the prefix are allowed; updates under the prefix are allowed when
//     they fast-forward or the policy allows forced updates.
func (p *Policy) Decide(req *Request, ff FastForward) Decision {
	d := Decision{Allow: true, Verdicts: make([]Verdict, len(req.Commands))}
	for i, c := range req.Commands {
		v := p.decide(req, c, ff)
		d.Verdicts[i] = v
		d.Allow = d.Allow && v.Allow
	}
	return allOrNothing(d)
}

// allOrNothing returns d with every allowed verdict refused (rule all-or-nothing) when
// another one is refused: a push lands whole or not at all.
func allOrNothing(d Decision) Decision {
	if d.Allow {
		return d
	}
	for i, v := range d.Verdicts {
		if v.Allow {
			d.Verdicts[i] = Verdict{Command: v.Command, Rule: RuleAllOrNothing,
				Reason: "refused because another ref in this push was refused"}
		}
	}
	return d
}

func (p *Policy) decide(req *Request, c Command, ff FastForward) Verdict {
	v := Verdict{Command: c}
	switch {
	case p.noPush:
		v.Rule, v.Reason = RuleNoPush, "this sandbox may not push at all (its tier allows no push)"
	case req.PushCert:
		v.Rule, v.Reason = RulePushCert, "signed pushes (push certificates) are not accepted; push without --signed"
	case len(req.Options) > 0:
		v.Rule, v.Reason = RulePushOptions, "push options (git push -o) are not accepted; push without them"
	case c.IsDelete():
		v.Rule, v.Reason = RuleDelete, "deleting refs is not allowed from a sandbox"
	case strings.HasPrefix(c.Ref, "refs/tags/"):
		v.Rule, v.Reason = RuleTag, "pushing tags is not allowed from a sandbox; push a branch under "+p.prefix
	case !strings.HasPrefix(c.Ref, p.prefix) || len(c.Ref) == len(p.prefix):
		v.Rule, v.Reason = RuleOutsidePrefix, "this sandbox may push only to branches under "+p.prefix
	case c.IsCreate() || p.allowForcePush:
		v.Allow, v.Rule = true, RuleAgentPrefix
	case ff != nil && ff(c.Ref, c.Old, c.New):
		v.Allow, v.Rule = true, RuleAgentPrefix
	default:
		v.Rule, v.Reason = RuleNonFastForward, "non-fast-forward updates (rewriting pushed history) are not allowed; push a new branch under "+p.prefix
	}
	return v
}

// WithProtected refuses, in d, every allowed command whose ref has hits (protected paths
// its update touches, from PathMatcher.Match, keyed by ref name), with rule
// "protected-path" and a reason naming the first path, its glob and how many more there
// are; then one refusal refuses all, as in Decide. Commands already refused keep their
// verdict. d is not modified. For a push held for approval instead, the caller keeps d
// and records the hits.
func WithProtected(d Decision, hits map[string][]Hit) Decision {
	out := Decision{Allow: true, Verdicts: make([]Verdict, len(d.Verdicts))}
	for i, v := range d.Verdicts {
		if h := hits[v.Command.Ref]; v.Allow && len(h) > 0 {
			v = Verdict{Command: v.Command, Rule: RuleProtectedPath, Reason: protectedReason(h)}
		}
		out.Verdicts[i] = v
		out.Allow = out.Allow && v.Allow
	}
	return allOrNothing(out)
}

func protectedReason(h []Hit) string {
	r := fmt.Sprintf("touches protected path %+q (protected by %+q)", truncate(h[0].Path, 200), truncate(h[0].Glob, 100))
	if len(h) > 1 {
		r += fmt.Sprintf(" and %d more", len(h)-1)
	}
	return r
}
