package linux

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// IDMapMount mounts a read-only, nodev, nosuid view of the directory src at dst (created if
// missing), with ownership mapped through the user namespace file usernsPath: a file owned
// by host uid 0 in src appears as the namespace's root (its first mapped host uid). With
// usernsPath empty it is a plain bind mount. Submounts of src are not included.
//
// nosuid here does not keep set-id programs of src from working in an overlay that has dst
// as a lower: exec honours the flags of the mount the program is run from (the overlay's).
// No host path through dst itself ever runs one with raised privileges.
func IDMapMount(src, dst, usernsPath string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}
	if usernsPath != "" {
		ns, err := unix.Open(usernsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening user namespace %s: %w", usernsPath, err)
		}
		defer unix.Close(ns)
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(ns)
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s to %s: %w", src, dst, err)
	}
	return nil
}

// Overlay mounts an overlay filesystem at target with the mount flags flags (MS_NODEV,
// MS_NOSUID, ...): lowers (first = topmost), with upper and work directories on the same
// filesystem. target is created if missing.
func Overlay(target string, lowers []string, upper, work string, flags uintptr) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	for _, l := range lowers {
		if strings.ContainsAny(l, ",:") {
			return fmt.Errorf("overlay lower %q: path contains ',' or ':'", l)
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,redirect_dir=off,metacopy=off",
		strings.Join(lowers, ":"), upper, work)
	if err := unix.Mount("overlay", target, "overlay", flags, opts); err != nil {
		return fmt.Errorf("mounting overlay at %s: %w", target, err)
	}
	return nil
}

// UnmountAll detaches every mount at or below dir, deepest first. It is idempotent.
func UnmountAll(dir string) error {
	dir = filepath.Clean(dir)
	for range 8 {
		points, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(points) == 0 {
			return nil
		}
		var errs []error
		for i := len(points) - 1; i >= 0; i-- {
			if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil &&
				!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", points[i], err))
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	return fmt.Errorf("mounts under %s keep reappearing", dir)
}

// mountsUnder lists mount points at or below dir, in mount order.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

func mountinfoHas(path string) bool {
	path = filepath.Clean(path)
	points, err := mountsUnder(path)
	if err != nil {
		return false
	}
	for _, p := range points {
		if p == path {
			return true
		}
	}
	return false
}

// unescapeMountinfo undoes the octal escapes (\040 etc.) of /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
