// Package changes keeps moat's change records: one per push the git gate decides (allowed,
// refused or held for approval), with the change report computed from the pushed objects
// in the sandbox's quarantine, and the state of a held push (approve → applied or
// apply-failed, deny, expire). Records and held push bodies live as files under the
// sandbox's git directory (<data>/git/<sandbox>/changes), so they survive a daemon restart
// and go with the sandbox.
//
// Every string of a record that came from the sandbox (refs, paths, commit subjects,
// names, reasons quoting them) is bounded here and never interpreted: printers must escape
// control characters.
package changes

import (
	"fmt"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/safegit"
)

// Decisions (Record.Decision). A push is decided once (allowed, refused or held); a held
// one then moves on as Transition says.
const (
	Allowed     = "allowed"
	Refused     = "refused"
	Held        = "held"     // waiting for a person: approve or deny
	Applying    = "applying" // approved, being sent to the remote
	Approved    = "approved" // approved and applied: the remote took it
	ApplyFailed = "apply-failed"
	Denied      = "denied"
	Expired     = "expired"
)

// Actions on a held change (Transition).
const (
	ActApprove = "approve" // held → applying
	ActRelease = "release" // applying → held: the apply could not start (sandbox stopped)
	ActApplied = "applied" // applying → approved
	ActFailed  = "failed"  // applying → apply-failed
	ActDeny    = "deny"    // held → denied
	ActExpire  = "expire"  // held → expired
)

// KindPush is a record of a push through the git gate. Other producers of change reports
// (a workspace diff, an export) may use their own kind with the same record.
const KindPush = "push"

// Record is one change: what was pushed, what moat decided and why, and the report.
type Record struct {
	ID      string    `json:"id"` // "ch-" and 8 hex digits
	Sandbox string    `json:"sandbox"`
	Kind    string    `json:"kind"`
	Remote  string    `json:"remote,omitempty"` // "host:port/path.git"
	Time    time.Time `json:"time"`
	Refs    []Ref     `json:"refs"`
	// Decision is the record's state (Allowed, Refused, Held, …); Reasons say why a push
	// was refused or held, one line each.
	Decision string   `json:"decision"`
	Reasons  []string `json:"reasons,omitempty"`
	// Protected are the protected paths the push touches.
	Protected []ProtectedHit `json:"protected,omitempty"`
	// ReportError is why there is no report (the objects were not received, or git failed
	// on them); the decision does not depend on it.
	ReportError string `json:"report_error,omitempty"`
	// Expires is when a held change that nobody decided expires.
	Expires *time.Time `json:"expires,omitempty"`
	// Decided is the decision of a person on a held change, and its outcome.
	Decided *Decided `json:"decided,omitempty"`
}

// Ref is one ref update of a push, with its verdict and report.
type Ref struct {
	Ref     string `json:"ref"`
	Old     string `json:"old"` // all zeros for a new ref
	New     string `json:"new"` // all zeros for a deletion
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Report is the change from Report.Base (the old commit; for a new ref, the remote's
	// default branch head) to New; nil when the objects were not looked at.
	Report *safegit.ChangeReport `json:"report,omitempty"`
	// Totals over the whole report (also when its file list was cut).
	Files   int   `json:"files"`
	Added   int64 `json:"added"`
	Removed int64 `json:"removed"`
}

// ProtectedHit is a protected path a ref's update touches, and the glob it matched.
type ProtectedHit struct {
	Ref  string `json:"ref"`
	Path string `json:"path"`
	Glob string `json:"glob"`
}

// Decided is what a person decided on a held change.
type Decided struct {
	Action string    `json:"action"` // approve or deny
	By     string    `json:"by"`     // the API key's id, or "operator"
	Time   time.Time `json:"time"`
	Reason string    `json:"reason,omitempty"`
	// Result is what applying an approved change gave: the remote's answer in one line.
	Result string `json:"result,omitempty"`
}

// Totals sums the refs' counts: files, added and removed lines.
func (r Record) Totals() (files int, added, removed int64) {
	for _, ref := range r.Refs {
		files += ref.Files
		added += ref.Added
		removed += ref.Removed
	}
	return
}

// Transition is the state a change in state from moves to by action, or an
// errdefs.ErrConflict error saying why it cannot (deciding a change twice, approving a
// denied one, …). It is pure.
func Transition(from, action string) (string, error) {
	to := ""
	switch {
	case from == Held && action == ActApprove:
		to = Applying
	case from == Held && action == ActDeny:
		to = Denied
	case from == Held && action == ActExpire:
		to = Expired
	case from == Applying && action == ActRelease:
		to = Held
	case from == Applying && action == ActApplied:
		to = Approved
	case from == Applying && action == ActFailed:
		to = ApplyFailed
	}
	if to != "" {
		return to, nil
	}
	switch from {
	case Held, Applying:
		if from == Applying && (action == ActApprove || action == ActDeny) {
			return "", fmt.Errorf("the change is being applied: %w", errdefs.ErrConflict)
		}
		return "", fmt.Errorf("cannot %s a change that is %s: %w", action, from, errdefs.ErrConflict)
	case Allowed, Refused:
		return "", fmt.Errorf("cannot %s a change that was %s (only held changes wait for a decision): %w", action, from, errdefs.ErrConflict)
	default:
		return "", fmt.Errorf("cannot %s a change that is already %s: %w", action, from, errdefs.ErrConflict)
	}
}

// Bounds of what a record keeps of sandbox-supplied data.
const (
	maxString      = 1024 // a subject, name, e-mail, reason
	maxPath        = 4096
	maxFilesKept   = 1000 // files listed per ref (totals count all)
	maxCommitsKept = 200
	maxReasons     = 32
	maxHits        = 100
)

// Bound cuts r's sandbox-supplied strings and lists to the record's limits, and fills each
// ref's totals from its report before its file list is cut.
func Bound(r *Record) {
	for i := range r.Refs {
		ref := &r.Refs[i]
		ref.Ref, ref.Reason = cut(ref.Ref, maxPath), cut(ref.Reason, maxString)
		rep := ref.Report
		if rep == nil {
			continue
		}
		ref.Files, ref.Added, ref.Removed = len(rep.Files), 0, 0
		for _, f := range rep.Files {
			ref.Added += f.Added
			ref.Removed += f.Removed
		}
		if rep.FilesTruncated {
			ref.Files = max(ref.Files, maxFilesKept+1)
		}
		if len(rep.Files) > maxFilesKept {
			rep.Files, rep.FilesTruncated = rep.Files[:maxFilesKept], true
		}
		for j := range rep.Files {
			f := &rep.Files[j]
			f.Path, f.OldPath = cut(f.Path, maxPath), cut(f.OldPath, maxPath)
		}
		if len(rep.Lockfiles) > maxFilesKept {
			rep.Lockfiles = rep.Lockfiles[:maxFilesKept]
		}
		for j := range rep.Lockfiles {
			rep.Lockfiles[j] = cut(rep.Lockfiles[j], maxPath)
		}
		if len(rep.Commits) > maxCommitsKept {
			rep.Commits, rep.CommitsTruncated = rep.Commits[:maxCommitsKept], true
		}
		for j := range rep.Commits {
			c := &rep.Commits[j]
			for _, s := range []*string{&c.AuthorName, &c.AuthorEmail, &c.AuthorDate, &c.CommitterName, &c.CommitterEmail, &c.CommitterDate, &c.Subject} {
				*s = cut(*s, maxString)
			}
			if len(c.Parents) > 16 {
				c.Parents = c.Parents[:16]
			}
		}
	}
	if len(r.Reasons) > maxReasons {
		r.Reasons = r.Reasons[:maxReasons]
	}
	for i := range r.Reasons {
		r.Reasons[i] = cut(r.Reasons[i], maxString)
	}
	if len(r.Protected) > maxHits {
		r.Protected = r.Protected[:maxHits]
	}
	for i := range r.Protected {
		p := &r.Protected[i]
		p.Ref, p.Path, p.Glob = cut(p.Ref, maxPath), cut(p.Path, maxPath), cut(p.Glob, maxString)
	}
	r.Remote, r.ReportError = cut(r.Remote, maxPath), cut(r.ReportError, maxString)
	if r.Decided != nil {
		r.Decided.Reason, r.Decided.Result = cut(r.Decided.Reason, maxString), cut(r.Decided.Result, maxString)
	}
}

// cut bounds s to n bytes without splitting a UTF-8 sequence.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}
