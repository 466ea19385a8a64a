package v1

// WorkspaceDiff is the answer of GET /v1/sandboxes/{id}/diff: what the sandbox's /workspace
// changes against the commit its --repo layer was made from.
type WorkspaceDiff struct {
	Sandbox string `json:"sandbox"`
	Repo    string `json:"repo"` // the host repository (its top-level directory)
	Base    string `json:"base"` // the commit /workspace started from
	// Snapshot is the commit moat made of /workspace (in the sandbox's host-side
	// quarantine, not in the host repository) and what went into it.
	Snapshot WorkspaceSnapshot `json:"snapshot"`
	// Report is the change report from Base to the snapshot, as for a push (commits,
	// files with line counts, lockfiles). Every string in it is sandbox-controlled.
	Report *ChangeReport `json:"report"`
	// Protected are the changed paths that are protected (the git gate's globs: CI
	// definitions, CODEOWNERS, .moat/**, the operator's --git-protected).
	Protected []ProtectedPath `json:"protected,omitempty"`
}

// WorkspaceSnapshot describes the commit made of a sandbox's /workspace.
type WorkspaceSnapshot struct {
	Commit  string `json:"commit"`
	Files   int    `json:"files"`
	Bytes   int64  `json:"bytes"`
	Ignored int    `json:"ignored,omitempty"` // entries left out by .gitignore (a directory counts once)
	Skipped int    `json:"skipped,omitempty"` // .git, sockets, devices, FIFOs
}

// ProtectedPath is one changed path a protected glob matches.
type ProtectedPath struct {
	Path string `json:"path"`
	Glob string `json:"glob,omitempty"` // empty: the path is not a valid repository path
}

// ExportRequest is the body of POST /v1/sandboxes/{id}/export.
type ExportRequest struct {
	// Branch is the branch to write in the host repository, under agent/ (default
	// agent/<sandbox id>).
	Branch string `json:"branch,omitempty"`
	// AllowProtected exports even when the workspace changes protected paths (operator
	// only: the unix socket).
	AllowProtected bool `json:"allow_protected,omitempty"`
}

// ExportResult is the answer of POST /v1/sandboxes/{id}/export.
type ExportResult struct {
	Sandbox   string `json:"sandbox"`
	Repo      string `json:"repo"`
	Ref       string `json:"ref"`           // refs/heads/agent/...
	Old       string `json:"old,omitempty"` // the branch before ("" if new)
	New       string `json:"new"`           // the branch now
	Unchanged bool   `json:"unchanged,omitempty"`
	Base      string `json:"base"`
	// Report is the change report from Base to New (see WorkspaceDiff.Report).
	Report    *ChangeReport   `json:"report"`
	Protected []ProtectedPath `json:"protected,omitempty"` // exported anyway (AllowProtected)
}
