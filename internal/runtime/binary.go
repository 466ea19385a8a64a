package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// DefaultDir is moat's own runtime directory: `make deps` (scripts/runtimes.sh) builds the
// pinned runc and runsc there, each with a stamp file <name>.version naming the pinned
// module version.
const DefaultDir = "/usr/local/lib/moat"

// systemDirs are where distributions put runtimes, after PATH.
func systemDirs() []string {
	return []string{"/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"}
}

// Binary sources: where a runtime's binary came from.
const (
	SourceMoat       = "moat"       // moat's pinned build in its own directory
	SourceSystem     = "system"     // found in PATH or the system directories
	SourceConfigured = "configured" // named by the operator (serve --runtime-path)
)

// Candidate is one place a runtime's binary may be, with what is known of it there.
type Candidate struct {
	Path   string
	Source string // SourceMoat or SourceSystem
	// Installed: a regular executable file is there. Err: why it cannot be used on this
	// host (a failed probe), "" when it can or was not checked.
	Installed bool
	Err       string
}

// Candidates returns, in order of preference, where the binary of runtime name may be:
// moat's directory dir (skipped when ""), then each directory of pathEnv (a PATH value),
// then the system directories; each path once. It only builds paths.
func Candidates(name, dir, pathEnv string) []Candidate {
	var out []Candidate
	seen := map[string]bool{}
	add := func(d, source string) {
		if d == "" || !filepath.IsAbs(d) {
			return // a relative PATH entry would depend on the daemon's working directory
		}
		p := filepath.Join(d, name)
		if seen[p] {
			return
		}
		seen[p] = true
		out = append(out, Candidate{Path: p, Source: source})
	}
	add(dir, SourceMoat)
	for _, d := range filepath.SplitList(pathEnv) {
		add(d, SourceSystem)
	}
	for _, d := range systemDirs() {
		add(d, SourceSystem)
	}
	return out
}

// Skipped is a candidate passed over, and why.
type Skipped struct {
	Path   string `json:"path"`
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// Choose picks the first installed candidate that works (Err == ""). The candidates passed
// over because they are installed but do not work are returned with their reasons, in
// order (missing ones are not worth a word). ok is false when none is usable; then
// skipped says why each installed one is not. Pure.
func Choose(cs []Candidate) (chosen Candidate, skipped []Skipped, ok bool) {
	for _, c := range cs {
		if !c.Installed {
			continue
		}
		if c.Err != "" {
			skipped = append(skipped, Skipped{Path: c.Path, Source: c.Source, Reason: c.Err})
			continue
		}
		return c, skipped, true
	}
	return Candidate{}, skipped, false
}

// isExecutable reports whether p is a regular file with an execute bit.
func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && ExecutableFile(st)
}

// ExecutableFile reports whether fi is a regular file with an execute bit: what moat takes
// as a runtime binary (selection, --runtime-path, the bench's binaries).
func ExecutableFile(fi os.FileInfo) bool { return fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 }

// Selection is the binary chosen for one runtime.
type Selection struct {
	Name    string
	Path    string
	Source  string    // SourceMoat, SourceSystem or SourceConfigured
	Skipped []Skipped // installed candidates before it that do not work here
	// Others are the installed candidates after it, unchecked: what a failure of Path
	// would fall back to.
	Others []Candidate
}

// Select finds the binary of runtime name: moat's directory dir first, then PATH and the
// system directories. check (nil: none) says why an installed binary does not work on this
// host; it is asked of each installed candidate in order until one passes, except the last
// installed one, which is taken as it is (there is nothing to fall back to; its problems
// show when it is used). It fails with ErrInvalidArgument for an unknown name and
// ErrUnavailable when no candidate is installed or none works.
func Select(ctx context.Context, name, dir string, check func(ctx context.Context, path string) error) (Selection, error) {
	if !slices.Contains(Names(), name) {
		return Selection{}, fmt.Errorf("runtime %q: %w", name, errdefs.ErrInvalidArgument)
	}
	cs := Candidates(name, dir, os.Getenv("PATH"))
	last := -1
	var seen []os.FileInfo
	for i := range cs {
		st, err := os.Stat(cs[i].Path)
		if err != nil || !ExecutableFile(st) {
			continue
		}
		// One file under two names (/bin → /usr/bin) is one candidate.
		if slices.ContainsFunc(seen, func(o os.FileInfo) bool { return os.SameFile(o, st) }) {
			continue
		}
		seen = append(seen, st)
		cs[i].Installed, last = true, i
	}
	if last < 0 {
		return Selection{}, fmt.Errorf("runtime %s is not installed: %w", name, errdefs.ErrUnavailable)
	}
	if check != nil {
		for i := range cs[:last] {
			if !cs[i].Installed {
				continue
			}
			if err := check(ctx, cs[i].Path); err != nil {
				cs[i].Err = err.Error()
				continue
			}
			break
		}
	}
	c, skipped, ok := Choose(cs)
	if !ok {
		var why []string
		for _, s := range skipped {
			why = append(why, s.Path+": "+s.Reason)
		}
		return Selection{}, fmt.Errorf("runtime %s does not work here (%s): %w", name, strings.Join(why, "; "), errdefs.ErrUnavailable)
	}
	sel := Selection{Name: name, Path: c.Path, Source: c.Source, Skipped: skipped}
	after := false
	for _, o := range cs {
		if after && o.Installed {
			sel.Others = append(sel.Others, o)
		}
		after = after || o.Path == c.Path
	}
	return sel, nil
}

// AvailableIn returns the path of the runtime called name, preferring moat's directory dir
// ("" for none) over PATH and the system directories; it does not check that the binary
// works (Select with a check does). It fails with ErrInvalidArgument for an unknown name and
// ErrUnavailable when the binary is not installed.
func AvailableIn(name, dir string) (string, error) {
	s, err := Select(context.Background(), name, dir, nil)
	return s.Path, err
}

// Available is AvailableIn with moat's default directory.
func Available(name string) (string, error) { return AvailableIn(name, DefaultDir) }
