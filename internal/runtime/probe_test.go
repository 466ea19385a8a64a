package runtime

import (
	"context"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	requireRoot(t)
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			r := Probe(context.Background(), name)
			t.Logf("%s: path=%q version=%q works=%v took=%v err=%q hint=%q", name, r.Path, r.Version, r.Works, r.Took, r.Err, r.Hint)
			if r.Path == "" {
				t.Skipf("%s is not installed", name)
			}
			if r.Version == "" {
				t.Errorf("no version for %s", name)
			}
			switch {
			case r.Works:
			case name == "crun" && DetectCgroupMode() == CgroupHybrid:
				// Known: crun 1.8 refuses hybrid hosts. The hint must say so.
				if !strings.Contains(r.Hint, "hybrid") {
					t.Errorf("crun fails on a hybrid host without the cgroup hint: err=%q hint=%q", r.Err, r.Hint)
				}
			default:
				t.Errorf("%s does not work: %s", name, r.Err)
			}
		})
	}
}

func TestAvailableUnknown(t *testing.T) {
	if _, err := Available("docker"); err == nil {
		t.Fatal("Available(docker) succeeded")
	}
}
