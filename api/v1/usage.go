package v1

import "time"

// UsageRow is one sandbox's metered usage over a window (GET /v1/usage?by=sandbox), or
// the sum over a group of sandboxes (by=template, by=api-key). Usage is attributed to
// the API key that created the sandbox ("" is the operator) and kept after the sandbox is
// deleted.
type UsageRow struct {
	// Key is what the row groups by: a sandbox id, a template name or an API key id.
	Key       string     `json:"key"`
	Sandbox   string     `json:"sandbox,omitempty"` // by=sandbox
	Template  string     `json:"template,omitempty"`
	Runtime   string     `json:"runtime,omitempty"`
	APIKey    string     `json:"api_key"`
	CreatedAt *time.Time `json:"created_at,omitempty"` // by=sandbox
	DeletedAt *time.Time `json:"deleted_at,omitempty"` // by=sandbox, once deleted
	// Sandboxes counts the sandboxes in the row; Creations those created in the window.
	Sandboxes int `json:"sandboxes"`
	Creations int `json:"creations"`
	// Wall time by state in the window, seconds.
	RunningSeconds float64 `json:"running_seconds"`
	PausedSeconds  float64 `json:"paused_seconds"`
	StoppedSeconds float64 `json:"stopped_seconds"`
	// CPUSeconds is the CPU time of the sandbox's processes (its cgroup's counter).
	CPUSeconds float64 `json:"cpu_seconds"`
	// MemoryGiBHours integrates the working set sampled from the cgroup over time.
	MemoryGiBHours float64 `json:"memory_gib_hours"`
	// DriveGiBHours integrates the drive's allocated size (its disk limit) over the time
	// the sandbox existed (running, paused or stopped).
	DriveGiBHours float64 `json:"drive_gib_hours"`
	// SnapshotGiBHours charges the snapshots taken of the sandbox (their drive size) for
	// as long as each is kept, to within one sampling interval of its deletion.
	SnapshotGiBHours float64 `json:"snapshot_gib_hours"`
	// EgressBytes are the bytes sent plus received through the proxy, by destination
	// (host name, or address where there was none).
	EgressBytes      map[string]int64 `json:"egress_bytes,omitempty"`
	EgressBytesTotal int64            `json:"egress_bytes_total"`
}

// UsageReport is GET /v1/usage: the rows and the API calls by key in the window.
type UsageReport struct {
	Since *time.Time `json:"since,omitempty"`
	Until time.Time  `json:"until"`
	By    string     `json:"by"`
	Rows  []UsageRow `json:"rows"`
	// APICalls counts the API requests by key id ("" the operator's).
	APICalls map[string]int64 `json:"api_calls"`
}
