package v1

import "time"

// SandboxStats is one sample of a running or paused sandbox (GET /v1/sandboxes/{id}/stats,
// `moat stats`). CPU is measured over 200 ms: CPUPercent of CPUCores (its CPU limit, or the
// host's CPUs), CPUUsageNs the CPU time its processes used this run. Memory is the working
// set (usage minus inactive page cache) against its limit (or the host's RAM). Disk is its
// drive. Pids and Net are absent when the runtime or network cannot give them: Pids counts
// the sandbox's tasks (under runsc, the guest's, as gVisor counts them), PidsLimitHits the
// forks refused at the limit this run (0 under runsc, which cannot tell); Net counts what the
// sandbox sent (Tx) and received (Rx) over its link since it started.
type SandboxStats struct {
	Time             time.Time `json:"time"`
	CPUPercent       float64   `json:"cpu_percent"`
	CPUCores         float64   `json:"cpu_cores"`
	CPUUsageNs       uint64    `json:"cpu_usage_ns"`
	MemoryBytes      int64     `json:"memory_bytes"`
	MemoryLimitBytes int64     `json:"memory_limit_bytes"`
	DiskUsedBytes    int64     `json:"disk_used_bytes"`
	DiskTotalBytes   int64     `json:"disk_total_bytes"`
	Pids             *uint64   `json:"pids,omitempty"`
	PidsLimit        *uint64   `json:"pids_limit,omitempty"`
	PidsLimitHits    *uint64   `json:"pids_limit_hits,omitempty"`
	NetRxBytes       *uint64   `json:"net_rx_bytes,omitempty"`
	NetTxBytes       *uint64   `json:"net_tx_bytes,omitempty"`
	NetRxPackets     *uint64   `json:"net_rx_packets,omitempty"`
	NetTxPackets     *uint64   `json:"net_tx_packets,omitempty"`
}
