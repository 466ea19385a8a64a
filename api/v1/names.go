package v1

// PruneRequest is the body of POST /v1/sandboxes/prune: delete the caller's stopped
// sandboxes that every filter matches (the `moat ls --filter` forms: name=, state=,
// template=, label=KEY, label=KEY=VALUE). DryRun only lists them.
type PruneRequest struct {
	Filters []string `json:"filters,omitempty"`
	DryRun  bool     `json:"dry_run,omitempty"`
}

// PruneResponse lists the sandboxes pruned (or, with DryRun, that would be), as they were,
// and those whose deletion failed (a sandbox started meanwhile is skipped, not failed).
type PruneResponse struct {
	Deleted []Sandbox      `json:"deleted"`
	DryRun  bool           `json:"dry_run,omitempty"`
	Failed  []PruneFailure `json:"failed,omitempty"`
}

// PruneFailure is a sandbox prune could not delete.
type PruneFailure struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}
