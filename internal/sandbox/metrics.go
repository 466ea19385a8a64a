package sandbox

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Stats are a running sandbox's cgroup figures at one instant.
type Stats struct {
	Time        time.Time
	CPUUsageNs  uint64  // cumulative CPU time of all its processes
	CPULimit    float64 // cores (quota/period), 0 = unlimited
	MemoryUsed  int64   // working set bytes: usage minus inactive page cache
	MemoryLimit int64   // 0 = unlimited
}

// Metric is one E2B-style sample. Bytes throughout.
type Metric struct {
	Time       time.Time
	CPUUsedPct float64 // of CPUCount cores (0–100)
	CPUCount   float64 // the cores the sandbox may use
	MemUsed    int64   // working set
	MemTotal   int64   // the memory limit, or the host's RAM
	DiskUsed   int64   // of the sandbox's drive
	DiskTotal  int64
}

// DefaultSampleWindow is the interval Sample measures CPU use over when given none.
const DefaultSampleWindow = 200 * time.Millisecond

// Sample measures sandbox id: it reads rt.Stats twice, window apart (DefaultSampleWindow
// when window <= 0), and returns the CPU use between the two readings as a percentage of
// the cores the sandbox may use (its CPU limit, at most the host's CPUs; the host's CPUs
// when unlimited), clamped to [0, 100], with the memory figures of the second reading
// (MemTotal is the host's RAM when the sandbox has no memory limit). The disk figures are
// those of the filesystem holding diskPath, the sandbox's drive; an empty diskPath leaves
// them zero. It blocks for window; a cancelled ctx ends it early with ctx's error. Errors
// of rt.Stats (ErrNotFound for an unknown sandbox) are returned wrapped.
func Sample(ctx context.Context, rt Runtime, id string, diskPath string, window time.Duration) (Metric, error) {
	if window <= 0 {
		window = DefaultSampleWindow
	}
	first, err := rt.Stats(ctx, id)
	if err != nil {
		return Metric{}, fmt.Errorf("sampling sandbox %s: %w", id, err)
	}
	t := time.NewTimer(window)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return Metric{}, fmt.Errorf("sampling sandbox %s: %w", id, ctx.Err())
	case <-t.C:
	}
	second, err := rt.Stats(ctx, id)
	if err != nil {
		return Metric{}, fmt.Errorf("sampling sandbox %s: %w", id, err)
	}
	m := metricOf(first, second, runtime.NumCPU(), HostMemory())
	if diskPath != "" {
		var st unix.Statfs_t
		if err := unix.Statfs(diskPath, &st); err != nil {
			return Metric{}, fmt.Errorf("sampling sandbox %s: disk: %w", id, err)
		}
		m.DiskUsed = int64(st.Blocks-st.Bfree) * st.Bsize
		m.DiskTotal = int64(st.Blocks) * st.Bsize
	}
	return m, nil
}

// metricOf computes the sample from two readings a and b (b later), on a host of hostCPUs
// CPUs and hostMem bytes of RAM. It is pure.
func metricOf(a, b Stats, hostCPUs int, hostMem int64) Metric {
	cores := float64(hostCPUs)
	if b.CPULimit > 0 && b.CPULimit < cores {
		cores = b.CPULimit
	}
	m := Metric{Time: b.Time, CPUCount: cores, MemUsed: b.MemoryUsed, MemTotal: b.MemoryLimit}
	if m.MemTotal <= 0 || (hostMem > 0 && m.MemTotal > hostMem) {
		m.MemTotal = hostMem
	}
	dt := b.Time.Sub(a.Time)
	// A counter that went backwards (a recreated cgroup) or no time between the readings
	// says nothing: 0 %.
	if dt > 0 && cores > 0 && b.CPUUsageNs >= a.CPUUsageNs {
		pct := float64(b.CPUUsageNs-a.CPUUsageNs) / (float64(dt.Nanoseconds()) * cores) * 100
		m.CPUUsedPct = math.Min(100, math.Max(0, pct))
	}
	return m
}

// HostMemory is the host's total RAM in bytes, MemTotal (0 if unknown).
func HostMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
