package doctor

import (
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/runtime"
)

func TestBuildNote(t *testing.T) {
	for _, tc := range []struct {
		name, source, stamp, pinned, dir string
		want                             []string
	}{
		{"runc", runtime.SourceMoat, "v1.5.3", "v1.5.3", "", []string{"moat's pinned build (v1.5.3) from /usr/local/lib/moat"}},
		{"runc", runtime.SourceMoat, "v1.5.2", "v1.5.3", "/opt/m", []string{"is v1.5.2, not the pinned v1.5.3", "make deps", "/opt/m"}},
		{"runc", runtime.SourceMoat, "", "v1.5.3", "", []string{"no version stamp, not the pinned v1.5.3"}},
		{"crun", runtime.SourceMoat, "", "", "", []string{"a build in moat's directory"}},
		{"runc", runtime.SourceSystem, "", "v1.5.3", "", []string{"the system's runc, not moat's pinned v1.5.3", "make deps"}},
		{"crun", runtime.SourceSystem, "", "", "", []string{"the system's crun (moat does not build crun)"}},
		{"runsc", runtime.SourceConfigured, "", runtime.PinnedRunsc, "", []string{"--runtime-path"}},
	} {
		got := BuildNote(tc.name, tc.source, tc.stamp, tc.pinned, tc.dir)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("BuildNote(%s, %s, %q, %q) = %q, want %q in it", tc.name, tc.source, tc.stamp, tc.pinned, got, w)
			}
		}
	}
	if got := BuildNote("runc", "", "", "", ""); got != "" {
		t.Errorf("no source: %q", got)
	}
}
