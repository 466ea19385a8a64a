package secrets

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// FuzzCheckName holds the hand-written name check to NameRule, and its accepted names to
// what an environment variable name needs. Seeds: testdata/fuzz/FuzzCheckName.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"A", "_", "GITHUB_TOKEN", "A1", "1A", "a", "", "A=B", "A\x00", strings.Repeat("Z", 64), strings.Repeat("Z", 65), "ÄB", "A\n"} {
		f.Add(s)
	}
	rule := regexp.MustCompile(NameRule)
	f.Fuzz(func(t *testing.T, name string) {
		err := CheckName(name)
		want := rule.MatchString(name) // RE2: $ is the end of the text, even after a newline
		if (err == nil) != want {
			t.Fatalf("CheckName(%q) = %v, rule says valid=%v", name, err, want)
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("CheckName(%q): %v is not an invalid argument", name, err)
			}
			return
		}
		if len(name) == 0 || len(name) > 64 || strings.ContainsAny(name, "=\x00") || name[0] >= '0' && name[0] <= '9' {
			t.Fatalf("CheckName accepts %q, not a portable environment variable name", name)
		}
	})
}
