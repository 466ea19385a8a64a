package gitgate

import (
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestProtectedDefaults(t *testing.T) {
	m, err := NewPathMatcher(DefaultProtected(), MatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hits := map[string]string{
		".github/workflows/ci.yml":     ".github/workflows/**",
		".github/workflows/sub/x.yaml": ".github/workflows/**",
		".github/workflows":            ".github/workflows/**", // a file replacing the directory
		".gitlab-ci.yml":               ".gitlab-ci.yml",
		".circleci/config.yml":         ".circleci/**",
		"CODEOWNERS":                   "CODEOWNERS",
		".github/CODEOWNERS":           ".github/CODEOWNERS",
		"docs/CODEOWNERS":              "docs/CODEOWNERS",
		".gitlab/CODEOWNERS":           ".gitlab/CODEOWNERS",
		".moat/policy.yaml":            ".moat/**",
		".moat":                        ".moat/**",
	}
	misses := []string{
		"README.md", "src/.github/workflows/ci.yml", "sub/.gitlab-ci.yml", "src/CODEOWNERS",
		".github/dependabot.yml", ".github/workflowsx/ci.yml", ".moatx", "CODEOWNERS.md",
		".GitHub/workflows/ci.yml", "codeowners", ".gitlab-ci.yaml",
	}
	var paths []string
	for p := range hits {
		paths = append(paths, p)
	}
	paths = append(paths, misses...)
	got, err := m.Match(paths)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(hits) {
		t.Errorf("%d hits, want %d: %+v", len(got), len(hits), got)
	}
	for i, h := range got {
		if hits[h.Path] != h.Glob {
			t.Errorf("hit %+v, want glob %q", h, hits[h.Path])
		}
		if h.Path != paths[i] {
			t.Errorf("hit %d is %q: not in the order given", i, h.Path)
		}
	}
}

func TestPathMatcherGlobs(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		match      bool
	}{
		{"**", "a", true},
		{"**", "a/b/c", true},
		{"**/x", "x", true},
		{"**/x", "a/b/x", true},
		{"**/x", "a/b/xy", false},
		{"a/**/b", "a/b", true},
		{"a/**/b", "a/x/y/b", true},
		{"a/**/b", "a/x/y/c", false},
		{"a/**/b/**/c", "a/1/b/2/b/3/c", true},
		{"a/**/b/**/c", "a/1/b/2/b/3/d", false},
		{"*.yml", "ci.yml", true},
		{"*.yml", "dir/ci.yml", false},
		{"**/*.yml", "dir/ci.yml", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"?", "x", true},
		{"?", "xy", false},
		{"?", "", false},
		{"dir/*", "dir/x", true},
		{"dir/*", "dir", false},
		{"dir/*", "dir/x/y", false},
		{"AGENTS.md", "AGENTS.md", true},
		{"AGENTS.md", "agents.md", false},
	} {
		m, err := NewPathMatcher([]string{tc.glob}, MatcherOptions{})
		if err != nil {
			t.Fatalf("NewPathMatcher(%q): %v", tc.glob, err)
		}
		if tc.path == "" {
			continue // not a valid path; matchComp covers it
		}
		hits, err := m.Match([]string{tc.path})
		if err != nil {
			t.Fatal(err)
		}
		if (len(hits) == 1) != tc.match {
			t.Errorf("%q against %q: %v, want %v", tc.glob, tc.path, hits, tc.match)
		}
	}
	if matchComp("?", "", false) {
		t.Error(`"?" matches ""`)
	}
}

func TestPathMatcherCaseInsensitive(t *testing.T) {
	m, err := NewPathMatcher(DefaultProtected(), MatcherOptions{CaseInsensitive: true})
	if err != nil {
		t.Fatal(err)
	}
	hits, err := m.Match([]string{".GitHub/Workflows/ci.yml", "codeowners", "Docs/CodeOwners", ".MOAT/x", "README"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 4 {
		t.Fatalf("hits %+v, want 4", hits)
	}
}

func TestPathMatcherInvalid(t *testing.T) {
	for _, g := range []string{"", "/abs", "a//b", "a/", "./a", "a/../b", "..", "a**", "**b/c", "**/**", "[ab]", `a\*`, "{a,b}", "a\x00", "a\nb"} {
		if _, err := NewPathMatcher([]string{g}, MatcherOptions{}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("glob %q: %v, want ErrInvalidArgument", g, err)
		}
	}
	m, err := NewPathMatcher(DefaultProtected(), MatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "/etc/passwd", "a/../.github/workflows/x", "../x", "./.moat/x", "a//b", "a/", ".", "a\x00b", "a\rb", strings.Repeat("a", MaxPathLen+1)} {
		if _, err := m.Match([]string{"README", p}); !errdefs.IsInvalidArgument(err) {
			t.Errorf("path %q: %v, want ErrInvalidArgument", p, err)
		}
	}
}
