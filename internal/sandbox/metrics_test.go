package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// statsRuntime is a Runtime whose only container, "sb", reports readings in turn; any
// other id is ErrNotFound.
type statsRuntime struct {
	readings []Stats
}

func (r *statsRuntime) Name() string                                        { return "fake" }
func (r *statsRuntime) Start(ctx context.Context, spec ContainerSpec) error { return nil }
func (r *statsRuntime) Stop(ctx context.Context, id string) error           { return nil }
func (r *statsRuntime) Running(ctx context.Context, id string) (bool, error) {
	return id == "sb", nil
}
func (r *statsRuntime) Update(ctx context.Context, id string, l Limits) error { return nil }
func (r *statsRuntime) Pause(ctx context.Context, id string) error            { return nil }
func (r *statsRuntime) Resume(ctx context.Context, id string) error           { return nil }
func (r *statsRuntime) OOMKills(ctx context.Context, id string) (uint64, error) {
	return 0, nil
}

func (r *statsRuntime) Stats(ctx context.Context, id string) (Stats, error) {
	if id != "sb" || len(r.readings) == 0 {
		return Stats{}, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
	}
	s := r.readings[0]
	r.readings = r.readings[1:]
	return s, nil
}

func TestSampleArithmetic(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration, cpu uint64, limit float64) Stats {
		return Stats{Time: t0.Add(d), CPUUsageNs: cpu, CPULimit: limit, MemoryUsed: 100 << 20, MemoryLimit: 512 << 20}
	}
	const hostMem = 4 << 30
	for _, tc := range []struct {
		name      string
		a, b      Stats
		hostCPUs  int
		wantPct   float64
		wantCores float64
	}{
		{"half of one core", at(0, 1e9, 1), at(time.Second, 1.5e9, 1), 8, 50, 1},
		{"one of two limit cores", at(0, 0, 2), at(time.Second, 1e9, 2), 8, 50, 2},
		{"fractional limit", at(0, 0, 1.5), at(2*time.Second, 1.5e9, 1.5), 8, 50, 1.5},
		{"unlimited: host cores", at(0, 0, 0), at(time.Second, 1e9, 0), 4, 25, 4},
		{"limit above host cores", at(0, 0, 16), at(time.Second, 1e9, 16), 2, 50, 2},
		{"overshoot clamps to 100", at(0, 0, 1), at(time.Second, 3e9, 1), 8, 100, 1},
		{"counter reset is 0", at(0, 5e9, 1), at(time.Second, 1e9, 1), 8, 0, 1},
		{"no time between readings is 0", at(0, 0, 1), at(0, 1e9, 1), 8, 0, 1},
		{"readings out of order are 0", at(time.Second, 0, 1), at(0, 1e9, 1), 8, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metricOf(tc.a, tc.b, tc.hostCPUs, hostMem)
			if m.CPUUsedPct < tc.wantPct-1e-9 || m.CPUUsedPct > tc.wantPct+1e-9 {
				t.Errorf("CPUUsedPct = %v, want %v", m.CPUUsedPct, tc.wantPct)
			}
			if m.CPUCount != tc.wantCores {
				t.Errorf("CPUCount = %v, want %v", m.CPUCount, tc.wantCores)
			}
			if !m.Time.Equal(tc.b.Time) || m.MemUsed != 100<<20 || m.MemTotal != 512<<20 {
				t.Errorf("metric = %+v", m)
			}
		})
	}
	// No memory limit, or one above the host's RAM: the host's RAM.
	for _, limit := range []int64{0, 64 << 30} {
		s := Stats{Time: t0, MemoryUsed: 1 << 20, MemoryLimit: limit}
		if m := metricOf(s, s, 2, hostMem); m.MemTotal != hostMem {
			t.Errorf("limit %d: MemTotal = %d, want %d", limit, m.MemTotal, int64(hostMem))
		}
	}
}

func TestSample(t *testing.T) {
	t0 := time.Now()
	rt := &statsRuntime{readings: []Stats{
		{Time: t0, CPUUsageNs: 2e9, CPULimit: 1, MemoryUsed: 10 << 20, MemoryLimit: 256 << 20},
		{Time: t0.Add(200 * time.Millisecond), CPUUsageNs: 2e9 + 50e6, CPULimit: 1, MemoryUsed: 12 << 20, MemoryLimit: 256 << 20},
	}}
	dir := t.TempDir()
	m, err := Sample(context.Background(), rt, "sb", dir, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if m.CPUUsedPct < 25-1e-9 || m.CPUUsedPct > 25+1e-9 || m.CPUCount != 1 {
		t.Errorf("CPU = %v%% of %v cores, want 25%% of 1", m.CPUUsedPct, m.CPUCount)
	}
	if m.MemUsed != 12<<20 || m.MemTotal != 256<<20 {
		t.Errorf("memory = %d of %d", m.MemUsed, m.MemTotal)
	}
	if m.DiskTotal <= 0 || m.DiskUsed < 0 || m.DiskUsed > m.DiskTotal {
		t.Errorf("disk of %s = %d of %d", dir, m.DiskUsed, m.DiskTotal)
	}
	if len(rt.readings) != 0 {
		t.Errorf("Sample read %d times, want 2", 2-len(rt.readings))
	}

	// No disk path: no disk figures.
	rt.readings = []Stats{{Time: t0}, {Time: t0.Add(time.Second)}}
	if m, err := Sample(context.Background(), rt, "sb", "", time.Millisecond); err != nil || m.DiskTotal != 0 || m.DiskUsed != 0 {
		t.Errorf("without a disk path: %+v, %v", m, err)
	}
	// The runtime's error classes come through.
	if _, err := Sample(context.Background(), rt, "nope", dir, time.Millisecond); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
	}
	// A disk path that does not exist is an error, not zeros.
	rt.readings = []Stats{{Time: t0}, {Time: t0.Add(time.Second)}}
	if _, err := Sample(context.Background(), rt, "sb", dir+"/missing", time.Millisecond); err == nil {
		t.Error("missing disk path: no error")
	}
	// Cancellation ends the wait.
	rt.readings = []Stats{{Time: t0}, {Time: t0.Add(time.Second)}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	begin := time.Now()
	if _, err := Sample(ctx, rt, "sb", dir, time.Hour); !errors.Is(err, context.Canceled) || time.Since(begin) > time.Second {
		t.Errorf("cancelled: %v after %v", err, time.Since(begin))
	}
}
