package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/linux"
)

// TestCloseUnmountsNullNetNS: Close removes runsc's pinned gofer namespace from its root
// (stacked mounts too), so the root can be removed; runc's Close leaves its root alone.
func TestCloseUnmountsNullNetNS(t *testing.T) {
	requireRoot(t)
	for _, name := range []string{"runsc", "runc"} {
		root := filepath.Join(t.TempDir(), "state")
		if err := os.MkdirAll(root, 0o700); err != nil {
			t.Fatal(err)
		}
		pin := filepath.Join(root, nullNetNS)
		if err := os.WriteFile(pin, nil, 0o444); err != nil {
			t.Fatal(err)
		}
		for range 2 { // stacked, as concurrent runsc invocations can leave it
			if err := unix.Mount("/proc/self/ns/net", pin, "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { _ = unmountStacked(pin) })
		o := &OCI{name: name, root: root}
		if err := o.Close(); err != nil {
			t.Fatalf("%s Close: %v", name, err)
		}
		if got, want := linux.IsMountPoint(pin), name != "runsc"; got != want {
			t.Errorf("%s: %s still mounted = %v, want %v", name, pin, got, want)
		}
		if err := o.Close(); err != nil && name == "runsc" {
			t.Errorf("second Close: %v", err)
		}
	}
}
