package doctor

import (
	"strconv"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/testutil"
)

// TestPerSandboxKernelLimits: on this host the daemon can give each sandbox's user namespace
// to the sandbox's own uid, and doctor says so; the tool it needs is found.
func TestPerSandboxKernelLimits(t *testing.T) {
	testutil.RequiresRoot(t)
	var found bool
	for _, c := range kernelChecks(ClassifyKVM(ReadKVMFacts("/"))) {
		if c.Name == "per-sandbox kernel limits" {
			found = true
			if !c.OK {
				t.Errorf("%s: %s", c.Name, c.Detail)
			}
		}
	}
	if !found {
		t.Error("no per-sandbox kernel limits check")
	}
	for _, c := range toolChecks() {
		if c.Name == "unshare" && !c.OK {
			t.Errorf("unshare: %s (fix: %s)", c.Detail, c.Fix)
		}
	}
}

// TestDataFilesystem: the finding says how many default sandboxes still fit, fails with a
// fix when none does, and says when drives are overcommitted.
func TestDataFilesystem(t *testing.T) {
	size := func(n int64) string { return strconv.FormatInt(n>>20, 10) + "M" }
	d := DataFS{FS: "/var/lib/moat", Free: 50 << 30, Promised: 10 << 30, Reserve: 1 << 30, DefaultDisk: 10 << 30, Fits: 3, Size: size}
	if c := DataFilesystem(d); !c.OK || c.Fix != "" || !strings.Contains(c.Detail, "room for 3 more sandboxes with the default 10240M drive") ||
		!strings.Contains(c.Detail, "10240M of it promised") {
		t.Errorf("room: %+v", c)
	}
	d.Fits = 0
	if c := DataFilesystem(d); c.OK || !strings.Contains(c.Fix, "refused (429)") {
		t.Errorf("full: %+v", c)
	}
	d.Fits = -1
	if c := DataFilesystem(d); !c.OK || !strings.Contains(c.Detail, "overcommitted") {
		t.Errorf("overcommit: %+v", c)
	}
}
