package doctor

import (
	"testing"

	"github.com/moatdev/moat/internal/testutil"
)

// TestPerSandboxKernelLimits: on this host the daemon can give each sandbox's user namespace
// to the sandbox's own uid, and doctor says so; the tool it needs is found.
func TestPerSandboxKernelLimits(t *testing.T) {
	testutil.RequiresRoot(t)
	var found bool
	for _, c := range kernelChecks() {
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
