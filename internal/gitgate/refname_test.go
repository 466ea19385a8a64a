package gitgate

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

var refNameCases = []struct {
	name string
	ok   bool
}{
	{"refs/heads/main", true},
	{"refs/heads/agent/t/fix-login", true},
	{"refs/heads/agent/t/a.b_c-d+e=f,g", true},
	{"refs/heads/a@b", true},
	{"refs/heads/@", true},
	{"refs/tags/v1.0", true},
	{"refs/heads/" + strings.Repeat("a", MaxRefNameLen-len("refs/heads/")), true},
	{"refs/heads/" + strings.Repeat("a", MaxRefNameLen-len("refs/heads/")+1), false},
	{"", false},
	{"HEAD", false},
	{"main", false},
	{"heads/main", false},
	{"refs/heads/a..b", false},
	{"refs/heads/a/../b", false},
	{"refs/heads/.hidden", false},
	{"refs/heads/a/.b", false},
	{"refs/heads/x.lock", false},
	{"refs/heads/x.lock/y", false},
	{"refs/heads/a.", false},
	{"refs/heads/a/", false},
	{"refs/heads//a", false},
	{"refs//heads/a", false},
	{"refs/heads/a@{1}", false},
	{"refs/heads/a b", false},
	{"refs/heads/a\tb", false},
	{"refs/heads/a\x7fb", false},
	{"refs/heads/a\x00b", false},
	{"refs/heads/a~1", false},
	{"refs/heads/a^", false},
	{"refs/heads/a:b", false},
	{"refs/heads/a?", false},
	{"refs/heads/a*", false},
	{"refs/heads/a[b", false},
	{"refs/heads/a\\b", false},
	{"refs/heads/caf\xc3\xa9", false}, // git allows UTF-8; moat does not
	{"refs/heads/\xff", false},
	{"refs/", false},
	{"refs", false},
	{"/refs/heads/a", false},
}

func TestCheckRefName(t *testing.T) {
	for _, tc := range refNameCases {
		err := CheckRefName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckRefName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("CheckRefName(%q) = %v, not ErrInvalidArgument", tc.name, err)
		}
	}
}

// Every name moat accepts, git accepts too (moat is stricter, never looser).
func TestCheckRefNameAgainstGit(t *testing.T) {
	g := newGitEnv(t)
	dir := t.TempDir()
	for _, tc := range refNameCases {
		if strings.ContainsRune(tc.name, 0) || tc.name == "" {
			continue // not expressible as an argument
		}
		_, _, err := g.run(dir, nil, "check-ref-format", tc.name)
		gitOK := err == nil
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		if tc.ok && !gitOK {
			t.Errorf("moat accepts %q, git check-ref-format does not", tc.name)
		}
		if !tc.ok && gitOK && !hasNonASCII(tc.name) && strings.HasPrefix(tc.name, "refs/") && len(tc.name) <= MaxRefNameLen {
			t.Errorf("git accepts %q but moat does not, with no reason of moat's own", tc.name)
		}
	}
}

func hasNonASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return true
		}
	}
	return false
}
