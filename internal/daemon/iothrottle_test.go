package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
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
		c.DefaultLimits = sandbox.Limits{IOBps: 32 << 20, IOIops: 400}
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
