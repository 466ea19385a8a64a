package build

import (
	"fmt"
	"path"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// ContextPath checks a COPY source and returns it relative to the build context, slash
// separated and clean ("." for the context itself). As in Docker, a leading "/" means the
// context's root. A path that leaves the context (through "..") is refused, as are
// wildcards (not supported), NUL bytes and empty paths; errors wrap
// errdefs.ErrInvalidArgument. It looks at the text only: symbolic links inside the context
// are not followed when files are read (see Build).
func ContextPath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("COPY source is empty: %w", errdefs.ErrInvalidArgument)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("COPY source %q has a NUL byte: %w", p, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsAny(p, "*?[") {
		return "", fmt.Errorf("COPY source %q: wildcards are not supported: %w", p, errdefs.ErrInvalidArgument)
	}
	depth := 0
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return "", fmt.Errorf("COPY source %q is outside the build context: %w", p, errdefs.ErrInvalidArgument)
			}
		default:
			depth++
		}
	}
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		rel = "."
	}
	return rel, nil
}

// ImagePath resolves a destination inside the image (COPY's destination, WORKDIR): an
// absolute path, or one relative to workdir ("/" when unset). The result is clean and
// absolute; dir reports a trailing "/" (the destination is a directory).
func ImagePath(p, workdir string) (clean string, dir bool, err error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return "", false, fmt.Errorf("path %q: %w", p, errdefs.ErrInvalidArgument)
	}
	if workdir == "" {
		workdir = "/"
	}
	dir = strings.HasSuffix(p, "/") || p == "." || strings.HasSuffix(p, "/.")
	if !strings.HasPrefix(p, "/") {
		p = workdir + "/" + p
	}
	return path.Clean(p), dir, nil
}
