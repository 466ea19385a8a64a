package apiserver

import (
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/sandbox"
)

// Observing sandboxes (issue 13 item 8; sandbox/stats.go).

func (s *Server) statsRoutes() []route {
	return []route{
		{"GET /v1/sandboxes/{id}/stats", s.sandboxStats, byKey},
		{"GET /v1/sandboxes/{id}/logs", s.sandboxLogs, byKey},
	}
}

// sandboxStats serves GET /v1/sandboxes/{id}/stats: one sample (v1.SandboxStats).
func (s *Server) sandboxStats(w http.ResponseWriter, r *http.Request) {
	u, err := s.sandboxes.Usage(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, toAPIStats(u))
}

// toAPIStats converts a sample to its wire form.
func toAPIStats(u sandbox.Usage) v1.SandboxStats {
	out := v1.SandboxStats{
		Time: u.Time, CPUPercent: u.CPUUsedPct, CPUCores: u.CPUCount, CPUUsageNs: u.CPUUsageNs,
		MemoryBytes: u.MemUsed, MemoryLimitBytes: u.MemTotal, DiskUsedBytes: u.DiskUsed, DiskTotalBytes: u.DiskTotal,
	}
	if p := u.Pids; p != nil {
		out.Pids, out.PidsLimit, out.PidsLimitHits = &p.Current, &p.Limit, &p.LimitHits
	}
	if n := u.Net; n != nil {
		out.NetRxBytes, out.NetTxBytes, out.NetRxPackets, out.NetTxPackets = &n.RxBytes, &n.TxBytes, &n.RxPackets, &n.TxPackets
	}
	return out
}

// sandboxLogs serves GET /v1/sandboxes/{id}/logs[?pid=N|tag=T][&follow=1]: the processes
// whose output the sandbox's moat-init keeps, or one process's output (v1.ProcessLog,
// v1.LogChunk NDJSON), answered by moat-init (envd logs.go) through the envd forward.
func (s *Server) sandboxLogs(w http.ResponseWriter, r *http.Request) {
	s.forwardRunning(w, r, "/moat/logs", "and the output of its processes went with them")
}
