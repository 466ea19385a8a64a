package gitgate

import (
	"fmt"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// MaxRefNameLen bounds a ref name. Git has no limit of its own beyond the pkt-line; 1024
// bytes is far beyond any branch name people use and keeps reports and audit events short.
const MaxRefNameLen = 1024

// CheckRefName reports whether name is a full ref name that moat accepts in a push: it
// starts with "refs/" (as git-receive-pack requires) and follows git check-ref-format's
// rules, plus one of moat's own. Rejected, as errdefs.ErrInvalidArgument:
//
//   - anything not under "refs/", an empty component ("//", a leading or trailing "/");
//   - a component that starts with "." or ends with ".lock";
//   - "..", "@{", a trailing ".";
//   - ASCII control characters (below 0x20, and DEL), space, "~", "^", ":", "?", "*", "[",
//     and "\";
//   - (moat) any byte outside ASCII: git allows UTF-8 there, moat does not, so every ref
//     name it reports or audits reads as what it is (no look-alike characters, no invalid
//     UTF-8);
//   - names longer than MaxRefNameLen.
func CheckRefName(name string) error {
	if err := checkRefName(name); err != nil {
		return fmt.Errorf("ref name %q: %s: %w", truncate(name, 80), err, errdefs.ErrInvalidArgument)
	}
	return nil
}

func checkRefName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty")
	case len(name) > MaxRefNameLen:
		return fmt.Errorf("longer than %d bytes", MaxRefNameLen)
	case !strings.HasPrefix(name, "refs/"):
		return fmt.Errorf(`not under "refs/"`)
	case strings.HasSuffix(name, "."):
		return fmt.Errorf(`ends with "."`)
	case strings.HasSuffix(name, "/"):
		return fmt.Errorf(`ends with "/"`)
	case strings.Contains(name, ".."):
		return fmt.Errorf(`contains ".."`)
	case strings.Contains(name, "@{"):
		return fmt.Errorf(`contains "@{"`)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("contains control character 0x%02x", c)
		case c >= 0x80:
			return fmt.Errorf("contains non-ASCII byte 0x%02x", c)
		case strings.IndexByte(" ~^:?*[\\", c) >= 0:
			return fmt.Errorf("contains %q", c)
		}
	}
	for comp := range strings.SplitSeq(name, "/") {
		switch {
		case comp == "":
			return fmt.Errorf("has an empty component")
		case comp[0] == '.':
			return fmt.Errorf("component %q starts with %q", truncate(comp, 40), ".")
		case strings.HasSuffix(comp, ".lock"):
			return fmt.Errorf("component %q ends with %q", truncate(comp, 40), ".lock")
		}
	}
	return nil
}

// truncate shortens s for an error message; callers quote the result with %q.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
