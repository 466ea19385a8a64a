package v1

// Checkpoint is the answer of POST /v1/sandboxes/{id}/checkpoint: how the sandbox's state
// was saved and the snapshot holding it. Method is "memory" (the processes' memory image
// with the filesystem) or "filesystem" (a filesystem snapshot only: the processes were not
// saved); Reason says why it is not "memory" (the runtime's own reason, as `moat doctor`
// gives it); Note says what that means for a restore.
type Checkpoint struct {
	Method   string   `json:"method"`
	Reason   string   `json:"reason,omitempty"`
	Note     string   `json:"note,omitempty"`
	Snapshot Snapshot `json:"snapshot"`
	TookMS   float64  `json:"took_ms"`
}

// CheckpointRequest names the checkpoint's snapshot.
type CheckpointRequest struct {
	Name string `json:"name,omitempty"`
}
