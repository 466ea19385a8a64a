package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
)

// TestIOThrottle (issue 20, item 7): a sandbox's drive I/O is throttled per sandbox: the
// daemon's default applies to a sandbox that asks for nothing, a sandbox's own value
// overrides it, and the blkio cgroup at the host holds them for the sandbox's own loop
// device; the sandbox's synced writes are charged to that cgroup on that device (so the
// throttle applies to them). For runc and runsc.
func TestIOThrottle(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) {
		c.DefaultLimits = sandbox.Limits{DiskBytes: 1 << 30, IOBps: 32 << 20, IOIops: 400}
	})
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			def := e.create(v1.CreateSandboxRequest{Runtime: rt})
			own := e.create(v1.CreateSandboxRequest{Runtime: rt, IOBps: 8 << 20, IOIops: 100})
			if def.Limits.IOBps != 32<<20 || def.Limits.IOIops != 400 || own.Limits.IOBps != 8<<20 || own.Limits.IOIops != 100 {
				t.Errorf("limits: default sandbox %+v, own %+v", def.Limits, own.Limits)
			}
			for _, sb := range []*v1.Sandbox{def, own} {
				dev := driveDevice(t, e, sb.ID)
				for file, want := range map[string]int64{
					"blkio.throttle.read_bps_device": sb.Limits.IOBps, "blkio.throttle.write_bps_device": sb.Limits.IOBps,
					"blkio.throttle.read_iops_device": sb.Limits.IOIops, "blkio.throttle.write_iops_device": sb.Limits.IOIops,
				} {
					if got := cgroupValue(t, "blkio", sb.ID, file); got != fmt.Sprintf("%s %d", dev, want) {
						t.Errorf("%s %s: %q, want %q", sb.ID, file, got, fmt.Sprintf("%s %d", dev, want))
					}
				}
			}
			// 16 MiB of synced writes are charged to the sandbox's cgroup on its drive.
			e.mustSh(own.ID, "dd if=/dev/zero of=$HOME/sync bs=1M count=16 oflag=dsync status=none")
			dev := driveDevice(t, e, own.ID)
			var written int64
			for _, l := range strings.Split(cgroupValue(t, "blkio", own.ID, "blkio.throttle.io_service_bytes"), "\n") {
				if f := strings.Fields(l); len(f) == 3 && f[0] == dev && f[1] == "Write" {
					written, _ = strconv.ParseInt(f[2], 10, 64)
				}
			}
			if written < 16<<20 {
				t.Errorf("the sandbox's cgroup was charged %d bytes written to its drive %s, want ≥ 16 MiB", written, dev)
			}
		})
	}
}

// envInt is the integer in environment variable name, or def.
func envInt(name string, def int64) int64 {
	if n, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return n
	}
	return def
}

// driveDevice is "MAJOR:MINOR" of sandbox id's drive, as the host sees it.
func driveDevice(t *testing.T, e *env, id string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(e.runDir, "sandboxes", id, "drive"), &st); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/sys/dev/block/%d:%d/loop", unix.Major(st.Dev), unix.Minor(st.Dev))); err != nil {
		t.Errorf("the drive of %s is not on a loop device: %v", id, err)
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
}

// fsyncProbe prints the p50 and p90, in microseconds, of 4 KiB write+fsync pairs.
const fsyncProbe = `python3 - <<'PY'
import os, time
fd = os.open(os.path.expanduser("~/probe"), os.O_WRONLY | os.O_CREAT, 0o600)
lat = []
for i in range(%d):
    t = time.perf_counter()
    os.pwrite(fd, b"x" * 4096, (i %% 256) * 4096)
    os.fsync(fd)
    lat.append(time.perf_counter() - t)
lat.sort()
print(int(lat[len(lat) // 2] * 1e6), int(lat[len(lat) * 9 // 10] * 1e6))
PY`

// noisyWriter writes 1 MiB blocks with O_DSYNC until killed.
const noisyWriter = `setsid bash -c 'while :; do dd if=/dev/zero of=$HOME/noise bs=1M count=64 oflag=dsync status=none; done' >/dev/null 2>&1 </dev/null & echo $! > /tmp/noisy.pid`

// TestNoisyNeighbourIO is a benchmark (MOAT_BENCH_IO=1; it asserts nothing about speed):
// a peer's fsync p90 alone, next to a neighbour doing synced writes, and next to the same
// neighbour throttled (MOAT_BENCH_IO_BPS, MOAT_BENCH_IO_IOPS: default 8 MiB/s and 200 IOPS), as ratios to the alone figure of the same run.
func TestNoisyNeighbourIO(t *testing.T) {
	if os.Getenv("MOAT_BENCH_IO") == "" {
		t.Skip("a benchmark: set MOAT_BENCH_IO=1")
	}
	// The daemon's default throttle so high that it is none: the neighbour is unthrottled
	// unless it asks.
	e := newEnvWith(t, func(c *daemon.Config) {
		c.DefaultLimits = sandbox.Limits{DiskBytes: 1 << 30, IOBps: 1 << 40, IOIops: 1 << 30}
	})
	const n = 300
	peer := e.create(v1.CreateSandboxRequest{})
	probe := func() (p50, p90 int64) {
		out := strings.Fields(e.mustSh(peer.ID, fmt.Sprintf(fsyncProbe, n)))
		p50, _ = strconv.ParseInt(out[0], 10, 64)
		p90, _ = strconv.ParseInt(out[1], 10, 64)
		return
	}
	probe() // warm up: the probe file exists and is allocated
	rounds := 5
	bps, iops := envInt("MOAT_BENCH_IO_BPS", 8<<20), envInt("MOAT_BENCH_IO_IOPS", 200)
	var alone, noisy, throttled []int64
	for range rounds {
		_, p90 := probe()
		alone = append(alone, p90)
		for _, tc := range []struct {
			req v1.CreateSandboxRequest
			to  *[]int64
		}{{v1.CreateSandboxRequest{}, &noisy}, {v1.CreateSandboxRequest{IOBps: bps, IOIops: iops}, &throttled}} {
			nb := e.create(tc.req)
			e.mustSh(nb.ID, noisyWriter)
			_, p90 := probe()
			*tc.to = append(*tc.to, p90)
			e.sh(nb.ID, "root", "kill -KILL -- -$(cat /tmp/noisy.pid)")
			if err := e.c.Delete(t.Context(), nb.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	med := func(v []int64) int64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	a, nz, th := med(alone), med(noisy), med(throttled)
	t.Logf("peer fsync p90 (median of %d rounds of %d): alone %d µs; with a synced-writing neighbour %d µs (%.2f×); neighbour throttled to %d B/s, %d IOPS %d µs (%.2f×)",
		rounds, n, a, nz, float64(nz)/float64(a), bps, iops, th, float64(th)/float64(a))
	t.Logf("rounds: alone %v noisy %v throttled %v", alone, noisy, throttled)
}
