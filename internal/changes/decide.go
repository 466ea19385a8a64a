package changes

import (
	"github.com/moatdev/moat/internal/gitgate"
)

// FromDecision fills a push record's decision, refs, reasons and protected hits from the
// git gate's decision d (with the protected hits already applied, gitgate.WithProtected),
// the hits by ref, and whether the push is held rather than refused. It is pure; reports
// are set by the caller.
func FromDecision(r *Record, d gitgate.Decision, hits map[string][]gitgate.Hit, held bool) {
	r.Refs = make([]Ref, 0, len(d.Verdicts))
	for _, v := range d.Verdicts {
		r.Refs = append(r.Refs, Ref{Ref: v.Command.Ref, Old: v.Command.Old, New: v.Command.New, Allowed: v.Allow, Rule: v.Rule, Reason: v.Reason})
		for _, h := range hits[v.Command.Ref] {
			r.Protected = append(r.Protected, ProtectedHit{Ref: v.Command.Ref, Path: h.Path, Glob: h.Glob})
		}
	}
	r.Reasons = nil
	switch {
	case d.Allow:
		r.Decision = Allowed
	case held:
		r.Decision = Held
		for _, v := range d.Refused() {
			if v.Rule == gitgate.RuleProtectedPath {
				r.Reasons = append(r.Reasons, v.Command.Ref+": "+v.Reason)
			}
		}
	default:
		r.Decision = Refused
		for _, v := range d.Refused() {
			if v.Rule != gitgate.RuleAllOrNothing {
				r.Reasons = append(r.Reasons, v.Command.Ref+": "+v.Reason)
			}
		}
	}
}

// Holdable says whether a push decided d (the ref rules and fast-forward alone) and dp
// (d with the protected paths) may be held for approval instead of refused: its only
// problem is protected paths. It is pure.
func Holdable(d, dp gitgate.Decision) bool {
	if !d.Allow || dp.Allow {
		return false
	}
	for _, v := range dp.Verdicts {
		if !v.Allow && v.Rule != gitgate.RuleProtectedPath && v.Rule != gitgate.RuleAllOrNothing {
			return false
		}
	}
	return true
}
