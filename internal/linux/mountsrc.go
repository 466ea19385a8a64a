package linux

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// MountedFrom reports whether some mount in this mount namespace shows the directory dir
// (or something below it) as its root: a bind or idmapped mount of a layer, for example.
// Such a directory must not be deleted while the mount lives.
func MountedFrom(dir string) (bool, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	real = filepath.Clean(real)
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	type mnt struct{ dev, root, point string }
	var mounts []mnt
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mounts = append(mounts, mnt{fields[2], unescapeMountinfo(fields[3]), unescapeMountinfo(fields[4])})
	}
	// The mount through which real is reached: the longest mount point above it (the
	// last one mounted, if several are stacked there).
	var home *mnt
	for i := range mounts {
		m := &mounts[i]
		if m.point == real || m.point == "/" || strings.HasPrefix(real, m.point+"/") {
			if home == nil || len(m.point) >= len(home.point) {
				home = m
			}
		}
	}
	if home == nil {
		return false, nil
	}
	// real's path relative to its filesystem's root, as mountinfo's root field spells it.
	rel := filepath.Join(home.root, strings.TrimPrefix(real, home.point))
	for _, m := range mounts {
		if m.dev != home.dev || m.point == home.point && m.root == home.root {
			continue
		}
		if m.root == rel || strings.HasPrefix(m.root, rel+"/") {
			return true, nil
		}
	}
	return false, nil
}
