package gitgate

import (
	"fmt"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// DefaultProtected returns the path globs protected in every sandbox (a new slice each
// call): CI definitions that run with the repository's secrets, CODEOWNERS at every place
// GitHub and GitLab read it, and moat's own files.
func DefaultProtected() []string {
	return []string{
		".github/workflows/**",
		".gitlab-ci.yml",
		".circleci/**",
		"CODEOWNERS",
		".github/CODEOWNERS",
		"docs/CODEOWNERS",
		".gitlab/CODEOWNERS",
		".moat/**",
	}
}

// MaxPathLen bounds a path given to PathMatcher.Match (git itself allows longer paths; moat
// treats a longer one as invalid, which the caller refuses).
const MaxPathLen = 4096

// PathMatcher matches repository paths against protected path globs. A glob is matched
// against the whole path from the repository root, component by component:
//
//	**      any number of components, including none (".moat/**" matches ".moat" too)
//	*       any run of bytes within one component
//	?       one byte within one component
//
// Everything else matches itself, byte for byte: no case folding (git's paths are
// case-sensitive; see CaseInsensitive). "[", "\" and "{" are not allowed in a glob, nor are
// empty, "." or ".." components. A PathMatcher is immutable and safe for concurrent use.
type PathMatcher struct {
	globs [][]string
	text  []string
	fold  bool
}

// MatcherOptions change how a PathMatcher compares.
type MatcherOptions struct {
	// CaseInsensitive compares ASCII letters without case, as a checkout on a
	// case-insensitive filesystem (macOS, Windows) would see them: there
	// ".GitHub/Workflows/x.yml" and ".github/workflows/x.yml" are the same file.
	CaseInsensitive bool
}

// Hit is one protected path a push touches and the glob that protects it (the first that
// matched, in the order given to NewPathMatcher).
type Hit struct {
	Path string
	Glob string
}

// NewPathMatcher compiles globs (typically DefaultProtected() plus the operator's list). An
// invalid glob is errdefs.ErrInvalidArgument.
func NewPathMatcher(globs []string, opts MatcherOptions) (*PathMatcher, error) {
	m := &PathMatcher{fold: opts.CaseInsensitive}
	for _, g := range globs {
		comps, err := compileGlob(g)
		if err != nil {
			return nil, err
		}
		m.globs = append(m.globs, comps)
		m.text = append(m.text, g)
	}
	return m, nil
}

func compileGlob(g string) ([]string, error) {
	bad := func(why string) error {
		return fmt.Errorf("protected path glob %q: %s: %w", truncate(g, 80), why, errdefs.ErrInvalidArgument)
	}
	if g == "" || len(g) > MaxPathLen {
		return nil, bad("empty or too long")
	}
	if strings.ContainsAny(g, "[\\{") {
		return nil, bad(`"[", "\" and "{" are not supported`)
	}
	if err := checkPathBytes(g); err != nil {
		return nil, bad(err.Error())
	}
	comps := strings.Split(g, "/")
	for i, c := range comps {
		switch {
		case c == "" || c == "." || c == "..":
			return nil, bad("empty, \".\" or \"..\" component")
		case strings.Contains(c, "**") && c != "**":
			return nil, bad(`"**" must be a whole component`)
		case c == "**" && i > 0 && comps[i-1] == "**":
			return nil, bad(`"**/**"`)
		}
	}
	return comps, nil
}

// CheckPath reports whether path is a repository path as git stores it: relative, "/"
// separated, no empty, "." or ".." components, no NUL or other control bytes, at most
// MaxPathLen bytes. Otherwise it is errdefs.ErrInvalidArgument.
func CheckPath(path string) error {
	if err := checkPath(path); err != nil {
		return fmt.Errorf("path %q: %s: %w", truncate(path, 80), err, errdefs.ErrInvalidArgument)
	}
	return nil
}

func checkPath(path string) error {
	if path == "" || len(path) > MaxPathLen {
		return fmt.Errorf("empty or longer than %d bytes", MaxPathLen)
	}
	if path[0] == '/' {
		return fmt.Errorf("absolute")
	}
	if err := checkPathBytes(path); err != nil {
		return err
	}
	for c := range strings.SplitSeq(path, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("has an empty, %q or %q component", ".", "..")
		}
	}
	return nil
}

func checkPathBytes(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("contains control character 0x%02x", c)
		}
	}
	return nil
}

// Match returns the protected paths among paths (those the push touches: added,
// modified, deleted, renamed from or to, mode or type changed), each with its glob, in the
// order of paths. An invalid path (CheckPath) is an error: the caller refuses the push, as
// git itself never stores one.
func (m *PathMatcher) Match(paths []string) ([]Hit, error) {
	var hits []Hit
	for _, p := range paths {
		if err := CheckPath(p); err != nil {
			return nil, err
		}
		if g, ok := m.match(p); ok {
			hits = append(hits, Hit{Path: p, Glob: g})
		}
	}
	return hits, nil
}

func (m *PathMatcher) match(path string) (string, bool) {
	comps := strings.Split(path, "/")
	for i, g := range m.globs {
		if matchComps(g, comps, m.fold) {
			return m.text[i], true
		}
	}
	return "", false
}

// matchComps matches glob components against path components. "**" backtracks only to
// the latest "**", which is enough for a correct answer and keeps the time
// O(len(glob)·len(path)) per glob.
func matchComps(g, p []string, fold bool) bool {
	gi, pi := 0, 0
	starG, starP := -1, -1
	for pi < len(p) {
		switch {
		case gi < len(g) && g[gi] == "**":
			starG, starP = gi, pi
			gi++
		case gi < len(g) && matchComp(g[gi], p[pi], fold):
			gi++
			pi++
		case starG >= 0:
			starP++
			gi, pi = starG+1, starP
		default:
			return false
		}
	}
	for gi < len(g) && g[gi] == "**" {
		gi++
	}
	return gi == len(g)
}

// matchComp matches one component with "*" and "?", iteratively (same backtracking idea).
func matchComp(g, s string, fold bool) bool {
	gi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case gi < len(g) && g[gi] == '*':
			star, mark = gi, si
			gi++
		case gi < len(g) && (g[gi] == '?' || eqByte(g[gi], s[si], fold)):
			gi++
			si++
		case star >= 0:
			mark++
			gi, si = star+1, mark
		default:
			return false
		}
	}
	for gi < len(g) && g[gi] == '*' {
		gi++
	}
	return gi == len(g)
}

func eqByte(a, b byte, fold bool) bool {
	if a == b {
		return true
	}
	if !fold {
		return false
	}
	if 'A' <= a && a <= 'Z' {
		a += 'a' - 'A'
	}
	if 'A' <= b && b <= 'Z' {
		b += 'a' - 'A'
	}
	return a == b
}
