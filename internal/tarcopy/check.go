// Package tarcopy moves file trees as tar streams, for `moat cp` and uploads: [WriteTree]
// makes a stream of a directory or file that keeps modes and copies symlinks as links
// (never following one below the top), and [Extract] writes a stream under an [os.Root],
// refusing every entry that would land outside it. The decision where an entry may go is
// the pure [Checker], which also refuses an entry that passes through a symlink the same
// stream made (the "symlink, then write through it" escape).
//
// The stream holds directories, regular files and symlinks only; hard links, devices,
// FIFOs and sockets are refused by the Checker and left out by WriteTree. Modes keep the
// permission bits (0o777) only: set-user-ID, set-group-ID and sticky bits are dropped
// both ways, and ownership is never taken from the stream (what Extract makes belongs to
// whoever runs it).
package tarcopy

import (
	"archive/tar"
	"fmt"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// Limits on names in a stream (Linux's own).
const (
	maxName      = 4096
	maxComponent = 255
)

// Checker decides, entry by entry, where the entries of one tar stream go under a
// destination directory. It is pure: it looks at headers only and remembers the symlinks
// the stream made, so that no later entry is written through one. Use one Checker per
// stream.
type Checker struct {
	top   string          // replaces the first component of every entry; "" keeps names
	first string          // the first component of the first entry (top mode)
	links map[string]bool // relative paths of the symlinks this stream made
	seen  map[string]byte // relative paths written so far, and their type
}

// NewChecker returns a Checker for one stream. When top is not "", every entry of the
// stream must share its first path component (the tree's own name, as WriteTree makes
// it), and that component is replaced by top: `moat cp ID:/a/src dst` extracts the tree
// named "src" as "dst". top must itself be one clean component.
func NewChecker(top string) (*Checker, error) {
	if top != "" {
		if _, err := cleanName(top); err != nil || strings.Contains(top, "/") || top == "." {
			return nil, fmt.Errorf("destination name %q: want one path component: %w", top, errdefs.ErrInvalidArgument)
		}
	}
	return &Checker{top: top, links: map[string]bool{}, seen: map[string]byte{}}, nil
}

// Check returns the slash-separated path relative to the destination where h goes, or
// an error (class ErrInvalidArgument) when the entry must not be extracted: a name that
// is empty, absolute, has a ".." component or a NUL byte, or is too long; a type other
// than directory, regular file or symlink; a symlink without a target; a path below a
// symlink this stream made; a second entry for a path already written other than a
// directory again; in top mode, an entry outside the tree's top. The returned path is
// always local (filepath.IsLocal) and never "." unless h is the destination directory
// itself (a directory entry "." or "./" when top is "").
func (c *Checker) Check(h *tar.Header) (string, error) {
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
	case 0x00: // the pre-POSIX regular-file type (tar.TypeRegA; tar.Reader already maps it)
		h.Typeflag = tar.TypeReg
	case tar.TypeLink:
		return "", invalid(h.Name, "is a hard link (not supported)")
	default:
		return "", invalid(h.Name, fmt.Sprintf("has type %q: only directories, regular files and symlinks are copied", h.Typeflag))
	}
	rel, err := cleanName(h.Name)
	if err != nil {
		return "", err
	}
	if c.top != "" {
		if rel == "." {
			return "", invalid(h.Name, "names no tree (an entry \".\" in a stream of one named tree)")
		}
		head, rest, _ := strings.Cut(rel, "/")
		if c.first == "" {
			c.first = head
		} else if head != c.first {
			return "", invalid(h.Name, fmt.Sprintf("is outside the tree %q the stream began with", c.first))
		}
		rel = c.top
		if rest != "" {
			rel += "/" + rest
		}
	}
	if rel == "." && h.Typeflag != tar.TypeDir {
		return "", invalid(h.Name, "names the destination itself")
	}
	// No entry may pass through a symlink this stream made: its target is the sandbox's
	// to choose, and a file written through it could land anywhere it points.
	for i := 0; i < len(rel); i++ {
		if rel[i] == '/' && c.links[rel[:i]] {
			return "", invalid(h.Name, fmt.Sprintf("is below %q, a symlink made earlier in the same stream", rel[:i]))
		}
	}
	if t, ok := c.seen[rel]; ok && (t != tar.TypeDir || h.Typeflag != tar.TypeDir) {
		return "", invalid(h.Name, "appears twice in the stream")
	}
	if h.Typeflag == tar.TypeSymlink {
		if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 || len(h.Linkname) > maxName {
			return "", invalid(h.Name, "is a symlink with an empty, overlong or NUL-holding target")
		}
		c.links[rel] = true
	}
	if h.Typeflag == tar.TypeReg && h.Size < 0 {
		return "", invalid(h.Name, "has a negative size")
	}
	c.seen[rel] = h.Typeflag
	return rel, nil
}

// cleanName turns a tar entry name into a clean relative path: "" and "." components are
// dropped, a trailing "/" is ignored; an absolute name, a ".." component, a NUL byte, an
// empty name or one over the length limits is refused. The root itself is ".".
func cleanName(name string) (string, error) {
	if name == "" {
		return "", invalid(name, "is empty")
	}
	if len(name) > maxName {
		return "", invalid(name[:64]+"...", "is longer than 4096 bytes")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", invalid(name, "holds a NUL byte")
	}
	if strings.HasPrefix(name, "/") {
		return "", invalid(name, "is absolute")
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", invalid(name, "has a \"..\" component")
		}
		if len(p) > maxComponent {
			return "", invalid(name, "has a component longer than 255 bytes")
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

func invalid(name, why string) error {
	return fmt.Errorf("tar entry %q %s: %w", name, why, errdefs.ErrInvalidArgument)
}
