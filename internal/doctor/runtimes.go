package doctor

import (
	"fmt"

	"github.com/moatdev/moat/internal/runtime"
)

// BuildNote says, in words, which build of runtime name the daemon uses: moat's pinned
// build (source "moat", with the version stamp scripts/runtimes.sh wrote), the system's,
// or one configured with serve --runtime-path; and what would bring it to the pinned
// version. dir is moat's runtime directory ("" for the default). Pure.
func BuildNote(name, source, stamp, pinned, dir string) string {
	if dir == "" {
		dir = runtime.DefaultDir
	}
	switch source {
	case runtime.SourceMoat:
		if pinned != "" && stamp == pinned {
			return fmt.Sprintf("moat's pinned build (%s) from %s", pinned, dir)
		}
		if stamp == "" {
			stamp = "no version stamp"
		}
		if pinned == "" {
			return fmt.Sprintf("a build in moat's directory %s (%s)", dir, stamp)
		}
		return fmt.Sprintf("moat's build in %s is %s, not the pinned %s: run `make deps` to rebuild it", dir, stamp, pinned)
	case runtime.SourceSystem:
		if pinned == "" {
			return fmt.Sprintf("the system's %s (moat does not build %s)", name, name)
		}
		return fmt.Sprintf("the system's %s, not moat's pinned %s: `make deps` builds it into %s, which moat then prefers", name, pinned, dir)
	case runtime.SourceConfigured:
		return "named by moat serve --runtime-path"
	}
	return ""
}
