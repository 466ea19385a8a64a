package v1

import "time"

// Snapshot is an immutable capture of a sandbox's filesystem (POST
// /v1/sandboxes/{id}/snapshot). Sandbox and Parent make the snapshot tree: the sandbox it
// was taken of, and the snapshot that sandbox was made from.
type Snapshot struct {
	ID        string    `json:"id"`
	Name      string    `json:"name,omitempty"`
	Sandbox   string    `json:"sandbox"`
	Parent    string    `json:"parent,omitempty"`
	Template  string    `json:"template"`
	Runtime   string    `json:"runtime"`
	Repo      string    `json:"repo,omitempty"`
	RepoLayer string    `json:"repo_layer,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	// Method is how the image was made: "reflink" (copy-free) or "copy" (no drive pool).
	Method string `json:"method"`
	// TookMS is how long the snapshot took (only in the answer to taking it).
	TookMS float64 `json:"took_ms,omitempty"`
}

// SnapshotRequest names a new snapshot.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

// RestoreRequest names the snapshot POST /v1/sandboxes/{id}/restore puts back.
type RestoreRequest struct {
	Snapshot string `json:"snapshot"`
}

// ForkRequest asks POST /v1/sandboxes/{id}/fork for Count new sandboxes (default 1).
// Lazy makes them stopped (stop_reason idle), each started by its first use.
type ForkRequest struct {
	Count int  `json:"count,omitempty"`
	Lazy  bool `json:"lazy,omitempty"`
}

// ForkReport is the answer of a fork: the new sandboxes and what they inherited from the
// parent or got anew.
type ForkReport struct {
	Parent    string    `json:"parent"`
	Forks     []Sandbox `json:"forks"`
	Inherited []string  `json:"inherited"`
	Renewed   []string  `json:"renewed"`
	TookMS    float64   `json:"took_ms"`
}
