package v1

import "time"

// ProcessLog describes a process whose output a sandbox's moat-init keeps (GET
// /v1/sandboxes/{id}/logs): every process started through the process API (E2B's
// commands.run, background or not, and moat exec), the last 64 KiB of its output, for the
// 64 most recent processes (the oldest ended one makes room). Bytes counts all the output it
// wrote, Dropped what is no longer kept. ExitCode and Status are set once it ended.
type ProcessLog struct {
	PID      uint32    `json:"pid"`
	Tag      string    `json:"tag,omitempty"`
	Cmd      string    `json:"cmd"`
	Args     []string  `json:"args,omitempty"`
	Started  time.Time `json:"started"`
	Running  bool      `json:"running"`
	ExitCode *int32    `json:"exit_code,omitempty"`
	Status   string    `json:"status,omitempty"`
	Bytes    int64     `json:"bytes"`
	Dropped  int64     `json:"dropped,omitempty"`
}

// LogChunk is one line of GET /v1/sandboxes/{id}/logs?pid=N (or ?tag=T), NDJSON: output
// (Stream "stdout", "stderr" or "pty", Data base64 in JSON), a Dropped line when output
// between two chunks is no longer kept, and last, once the process has ended, an End line
// with its record. With follow=1 the stream stays open until the process ends.
type LogChunk struct {
	Stream  string      `json:"stream,omitempty"`
	Data    []byte      `json:"data,omitempty"`
	Dropped int64       `json:"dropped,omitempty"`
	End     *ProcessLog `json:"end,omitempty"`
}
