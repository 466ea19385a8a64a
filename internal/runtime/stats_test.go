package runtime

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// execDetached runs argv inside container id, detached (runc and crun only).
func execDetached(t *testing.T, o *OCI, id string, argv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The detached process keeps the runtime's stdio: a file, not a pipe to wait for.
	out, err := os.CreateTemp(t.TempDir(), "exec-")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := o.command(ctx, append([]string{"exec", "--detach", id}, argv...))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s exec %v: %v: %s", o.Name(), argv, err, readFileString(out.Name()))
	}
}

// TestStatsRunc starts a runc container limited to one core and 256 MiB, runs a CPU
// burner and a 64 MiB allocation in it, and checks what Stats reads.
func TestStatsRunc(t *testing.T) {
	o := newDriver(t, "runc")
	sb := newTestSandbox(t, "runc")
	sb.spec.Limits.CPUs = 1
	id := sb.spec.ID
	startContainer(t, o, sb)
	initReport(t, sb.logPath) // testinit has done its own work
	ctx := context.Background()

	// dd holds a 64 MiB buffer it filled, blocked writing to a pipe nobody reads.
	execDetached(t, o, id, "/bin/sh", "-c", "dd if=/dev/zero bs=64M count=1 2>/dev/null | sleep 1000")
	execDetached(t, o, id, "/bin/sh", "-c", "while :; do :; done")

	var s sandbox.Stats
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if s, err = o.Stats(ctx, id); err != nil {
			t.Fatal(err)
		}
		if s.MemoryUsed >= 64<<20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("stats: %+v", s)
	if s.MemoryUsed < 64<<20 || s.MemoryUsed > s.MemoryLimit {
		t.Errorf("MemoryUsed = %d, want ≥ 64 MiB and ≤ the limit %d", s.MemoryUsed, s.MemoryLimit)
	}
	if s.MemoryLimit != testLimits.MemoryBytes {
		t.Errorf("MemoryLimit = %d, want %d", s.MemoryLimit, testLimits.MemoryBytes)
	}
	if math.Abs(s.CPULimit-1) > 0.001 {
		t.Errorf("CPULimit = %v, want 1", s.CPULimit)
	}
	if time.Since(s.Time) > time.Minute || s.Time.After(time.Now()) {
		t.Errorf("Time = %v", s.Time)
	}

	// The burner spins one core: about 0.5 s of CPU in 0.5 s (a noisy two-core host).
	a, err := o.Stats(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	b, err := o.Stats(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cpu := time.Duration(b.CPUUsageNs - a.CPUUsageNs)
	t.Logf("CPU %v in %v", cpu, b.Time.Sub(a.Time))
	// The burner runs flat out but shares two cores with the rest of the test suite: it
	// must show CPU time, and never more than its one-core limit allows (plus slack for a
	// CFS period on either side).
	if wall := b.Time.Sub(a.Time); cpu < 20*time.Millisecond || cpu > wall+250*time.Millisecond {
		t.Errorf("CPU time in %v = %v, want some and at most about %v (the 1-core limit)", wall, cpu, wall)
	}

	// Sample on top: the burner saturates its one core.
	m, err := sandbox.Sample(ctx, o, id, sb.dir, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sample: %+v", m)
	if m.CPUCount != 1 || m.CPUUsedPct <= 2 || m.CPUUsedPct > 100 || m.MemTotal != testLimits.MemoryBytes || m.DiskTotal <= 0 {
		t.Errorf("sample = %+v", m)
	}

	// A paused container burns nothing.
	if err := o.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	a, _ = o.Stats(ctx, id)
	time.Sleep(200 * time.Millisecond)
	b, err = o.Stats(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(b.CPUUsageNs - a.CPUUsageNs); d > 20*time.Millisecond {
		t.Errorf("paused container used %v of CPU", d)
	}

	if err := o.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Stats(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stats after Stop: %v, want ErrNotFound", err)
	}
}

// TestStatsRunsc: runsc's sandbox process, which runs the whole guest, sits in the same
// /moat/<id> cgroup with the spec's limits.
func TestStatsRunsc(t *testing.T) {
	o := newDriver(t, "runsc")
	sb := newTestSandbox(t, "runsc")
	id := sb.spec.ID
	startContainer(t, o, sb)
	initReport(t, sb.logPath)
	s, err := o.Stats(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", s)
	if s.MemoryUsed <= 0 || s.MemoryUsed > s.MemoryLimit || s.MemoryLimit != testLimits.MemoryBytes {
		t.Errorf("memory %d of %d, want > 0 of %d", s.MemoryUsed, s.MemoryLimit, testLimits.MemoryBytes)
	}
	if math.Abs(s.CPULimit-testLimits.CPUs) > 0.001 || s.CPUUsageNs == 0 {
		t.Errorf("CPU %d ns, limit %v; want > 0, limit %v", s.CPUUsageNs, s.CPULimit, testLimits.CPUs)
	}
}

func TestStatsUnknown(t *testing.T) {
	o := newDriver(t, "runc")
	ctx := context.Background()
	if _, err := o.Stats(ctx, "sb-000000000000"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown container: %v, want ErrNotFound", err)
	}
	if _, err := o.OOMKills(ctx, "sb-000000000000"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("OOM kills of an unknown container: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"", "..", "../../memory", "a/b"} {
		if _, err := o.Stats(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("id %q: %v, want ErrInvalidArgument", id, err)
		}
		if _, err := o.OOMKills(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("OOM kills of id %q: %v, want ErrInvalidArgument", id, err)
		}
	}
}

// TestStatsLayouts reads fake cgroup trees: v1 with cpu and cpuacct co-mounted (reached
// through the usual symlinks) and unlimited values, and v2.
func TestStatsLayouts(t *testing.T) {
	root := t.TempDir()
	old := cgroupRoot
	cgroupRoot = root
	t.Cleanup(func() { cgroupRoot = old })
	write := func(dir string, files map[string]string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			writeFile(t, filepath.Join(dir, name), content)
		}
	}

	write(filepath.Join(root, "memory/moat/sb-1"), map[string]string{
		"memory.usage_in_bytes": "300000\n",
		"memory.stat":           "cache 200000\ninactive_file 7\ntotal_cache 200000\ntotal_inactive_file 100000\n",
		"memory.limit_in_bytes": "9223372036854771712\n",
	})
	write(filepath.Join(root, "cpu,cpuacct/moat/sb-1"), map[string]string{
		"cpuacct.usage": "123456789\n", "cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n",
	})
	for _, l := range []string{"cpu", "cpuacct"} {
		if err := os.Symlink("cpu,cpuacct", filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := statsV1("sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUUsageNs != 123456789 || s.CPULimit != 0 || s.MemoryUsed != 200000 || s.MemoryLimit != 0 {
		t.Errorf("v1: %+v", s)
	}
	// (ErrUnavailable on a host that has no v1 memory hierarchy mounted at all.)
	if _, err := statsV1("sb-2"); !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("v1 missing cgroup: %v", err)
	}

	dir := filepath.Join(root, "moat/sb-3")
	write(dir, map[string]string{
		"cpu.stat":       "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
		"memory.current": "4096000\n",
		"memory.stat":    "anon 4000000\nfile 96000\nactive_file 1000\ninactive_file 95000\n",
		"memory.max":     "268435456\n",
		"cpu.max":        "150000 100000\n",
	})
	s, err = statsV2(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUUsageNs != 2500000 || s.CPULimit != 1.5 || s.MemoryUsed != 4001000 || s.MemoryLimit != 268435456 {
		t.Errorf("v2: %+v", s)
	}
	write(dir, map[string]string{"memory.max": "max\n", "cpu.max": "max 100000\n"})
	if s, err = statsV2(dir); err != nil || s.CPULimit != 0 || s.MemoryLimit != 0 {
		t.Errorf("v2 unlimited: %+v, %v", s, err)
	}
	if _, err := statsV2(filepath.Join(root, "moat/sb-4")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("v2 missing cgroup: %v", err)
	}
}
