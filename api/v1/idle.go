package v1

import "time"

// Lifecycle is a sandbox's idle-stop and unused-deletion settings and state (embedded in
// Sandbox: its fields are Sandbox's own in JSON).
type Lifecycle struct {
	// IdleSeconds: stopped after this long without activity (0: never). DeleteAfterSeconds:
	// deleted after this long unused (0: never), its drive archived first when Archive.
	IdleSeconds        int64 `json:"idle_seconds"`
	DeleteAfterSeconds int64 `json:"delete_after_seconds"`
	Archive            bool  `json:"archive,omitempty"`
	// AutoResume: stopped or paused by its timeout, it resumes on the next call (E2B's
	// autoResume); stopped for idleness, every sandbox does.
	AutoResume bool `json:"auto_resume,omitempty"`
	// StopReason says who stopped or paused it: "idle", "timeout", or "" (a person).
	StopReason string `json:"stop_reason,omitempty"`
	// LastUsedAt is its latest activity; IdleStopAt and DeleteAt are when, unused from
	// now on, it will be stopped (running sandboxes only) and deleted.
	LastUsedAt time.Time  `json:"last_used_at"`
	IdleStopAt *time.Time `json:"idle_stop_at,omitempty"`
	DeleteAt   *time.Time `json:"delete_at,omitempty"`
}

// Archive is a drive archive written before a sandbox unused past its period was deleted.
type Archive struct {
	ID    string    `json:"id"` // the deleted sandbox's
	Path  string    `json:"path"`
	Bytes int64     `json:"bytes"`
	Time  time.Time `json:"time"`
}
