package envd

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// homeOf is u's home directory, or "/" when it has none.
func homeOf(u *users.User) string {
	if u.Home == "" {
		return "/"
	}
	return u.Home
}

// resolvePath makes p absolute for u: "" is u's home, "~" and "~/..." are
// under it, and other relative paths are relative to it. The result is
// lexically clean, so ".." cannot climb above "/"; access itself is
// checked by the kernel against u's credentials when the path is used.
func resolvePath(p string, u *users.User) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", invalidArgument("path %q contains a NUL byte", p)
	}
	home := homeOf(u)
	switch {
	case p == "" || p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = filepath.Join(home, p[2:])
	case !filepath.IsAbs(p):
		p = filepath.Join(home, p)
	}
	return filepath.Clean(p), nil
}
