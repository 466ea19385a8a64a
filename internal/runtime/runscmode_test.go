package runtime

import (
	"strings"
	"testing"
)

// TestCurrentRunsc: a runsc whose flags list --gofer-network-namespace is run as a current
// gVisor (its own network stack, the sandbox's user namespace); runsc 2022-12's flags do
// not, and a flag that merely mentions the name in a description does not count.
func TestCurrentRunsc(t *testing.T) {
	for _, tc := range []struct {
		name, flags string
		want        bool
	}{
		{"current", "  -gofer-network-namespace value\n    \tnetwork namespace for gofers\n  -platform string\n", true},
		{"2022-12", "  -network value\n    \tspecifies which network to use\n  -platform string\n", false},
		{"mentioned only", "  -network value\n    \tsee -gofer-network-namespace\n", false},
		{"none", "", false},
	} {
		if got := currentRunsc([]byte(tc.flags)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if m := RunscMode(true); !strings.Contains(m, "systrap") || !strings.Contains(m, "own network stack") || !strings.Contains(m, "uid range") {
		t.Errorf("current mode %q", m)
	}
	if m := RunscMode(false); !strings.Contains(m, "ptrace") || !strings.Contains(m, "host root") {
		t.Errorf("2022 mode %q", m)
	}
}
