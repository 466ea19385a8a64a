package doctor

import (
	"strings"
	"testing"
)

func TestMemoryCheckpoint(t *testing.T) {
	for _, c := range []struct {
		name   string
		f      MemoryCheckpointFacts
		ok     bool
		detail []string
		fix    string
	}{
		{"runsc hostinet", MemoryCheckpointFacts{Runtime: "runsc", Reason: "hostinet refused", Fix: "none with this runsc"},
			false, []string{"unavailable", "filesystem only", "hostinet refused"}, "none with this runsc"},
		{"runc criu broken", MemoryCheckpointFacts{Runtime: "runc", Reason: "`criu check` fails: vdso", Fix: "CRIU ≥ 4.1"},
			false, []string{"unavailable", "criu check", "vdso"}, "CRIU ≥ 4.1"},
		{"runc can, not built", MemoryCheckpointFacts{Runtime: "runc", RuntimeCan: true, Reason: "criu check passes"},
			false, []string{"could (criu check passes)", "not built yet", "filesystem only"}, ""},
		{"built", MemoryCheckpointFacts{Runtime: "runsc", RuntimeCan: true, Built: true, Reason: "runsc checkpoint"},
			true, []string{"saves the processes' memory"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := MemoryCheckpoint(c.f)
			if got.OK != c.ok {
				t.Errorf("OK = %v, want %v", got.OK, c.ok)
			}
			if got.Name != "memory checkpoint ("+c.f.Runtime+")" {
				t.Errorf("name %q", got.Name)
			}
			for _, d := range c.detail {
				if !strings.Contains(got.Detail, d) {
					t.Errorf("detail %q lacks %q", got.Detail, d)
				}
			}
			if got.Fix != c.fix {
				t.Errorf("fix %q, want %q", got.Fix, c.fix)
			}
		})
	}
}
