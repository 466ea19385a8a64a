package v1

import "time"

// Change is a change record (GET /v1/sandboxes/{id}/changes[/{cid}]): one push the git
// gate decided — allowed, refused, or held for a person to approve — with its change
// report. Every string that came from the sandbox (refs, paths, commit subjects, names,
// reasons quoting them) is bounded by moat but not otherwise cleaned: escape control
// characters before printing them to a terminal.
type Change struct {
	ID      string      `json:"id"` // "ch-" and 8 hex digits
	Sandbox string      `json:"sandbox"`
	Kind    string      `json:"kind"`             // "push"
	Remote  string      `json:"remote,omitempty"` // "host:port/path.git"
	Time    time.Time   `json:"time"`
	Refs    []ChangeRef `json:"refs"`
	// Decision: allowed, refused, held (waiting for approve or deny), applying,
	// approved (applied: the remote took it), apply-failed, denied, expired.
	Decision string   `json:"decision"`
	Reasons  []string `json:"reasons,omitempty"`
	// Protected are the protected paths the push touches.
	Protected []ProtectedHit `json:"protected,omitempty"`
	// ReportError says why a ref has no report (the decision does not depend on it).
	ReportError string `json:"report_error,omitempty"`
	// Expires is when a held change nobody decided expires.
	Expires *time.Time     `json:"expires,omitempty"`
	Decided *ChangeDecided `json:"decided,omitempty"`
	// Files, Added and Removed total the refs' reports.
	Files   int   `json:"files"`
	Added   int64 `json:"added"`
	Removed int64 `json:"removed"`
}

// ChangeRef is one ref update of a change with its verdict and report.
type ChangeRef struct {
	Ref     string        `json:"ref"`
	Old     string        `json:"old"`
	New     string        `json:"new"`
	Allowed bool          `json:"allowed"`
	Rule    string        `json:"rule,omitempty"`
	Reason  string        `json:"reason,omitempty"`
	Report  *ChangeReport `json:"report,omitempty"` // omitted in lists
	Files   int           `json:"files"`
	Added   int64         `json:"added"`
	Removed int64         `json:"removed"`
}

// ChangeReport is what a change does: from Base (the old commit; for a new branch the
// remote's default branch head; "" when the remote had none) to Tip.
type ChangeReport struct {
	Base             string         `json:"base,omitempty"`
	Tip              string         `json:"tip"`
	FastForward      bool           `json:"fast_forward"`
	Commits          []ChangeCommit `json:"commits"`
	CommitsTruncated bool           `json:"commits_truncated,omitempty"`
	Files            []ChangeFile   `json:"files"`
	FilesTruncated   bool           `json:"files_truncated,omitempty"`
	Lockfiles        []string       `json:"lockfiles,omitempty"`
}

// ChangeCommit is one commit of a report.
type ChangeCommit struct {
	ID             string   `json:"id"`
	Parents        []string `json:"parents,omitempty"`
	AuthorName     string   `json:"author_name"`
	AuthorEmail    string   `json:"author_email"`
	AuthorDate     string   `json:"author_date"`
	CommitterName  string   `json:"committer_name"`
	CommitterEmail string   `json:"committer_email"`
	CommitterDate  string   `json:"committer_date"`
	Subject        string   `json:"subject"`
}

// ChangeFile is one path of a report; binary files have no line counts.
type ChangeFile struct {
	Path     string `json:"path"`
	OldPath  string `json:"old_path,omitempty"`
	Added    int64  `json:"added"`
	Removed  int64  `json:"removed"`
	Binary   bool   `json:"binary,omitempty"`
	Lockfile bool   `json:"lockfile,omitempty"`
}

// ProtectedHit is a protected path a ref's update touches and the glob it matched.
type ProtectedHit struct {
	Ref  string `json:"ref"`
	Path string `json:"path"`
	Glob string `json:"glob"`
}

// ChangeDecided is a person's decision on a held change and its outcome.
type ChangeDecided struct {
	Action string    `json:"action"` // approve, deny (expire: nobody decided in time)
	By     string    `json:"by"`     // "operator", "key:<API key id>", or "moat"
	Time   time.Time `json:"time"`
	Reason string    `json:"reason,omitempty"`
	// Result is what applying an approved change gave: the remote's answer.
	Result string `json:"result,omitempty"`
}

// DecideChangeRequest is the optional body of POST …/changes/{cid}/approve and /deny.
type DecideChangeRequest struct {
	Reason string `json:"reason,omitempty"`
}
