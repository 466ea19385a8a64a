package linux

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// MetadataPrefix is the extended attribute namespace that holds user
// metadata of files, as E2B's envd keeps it.
const MetadataPrefix = "user.e2b."

// ReadMetadata returns the metadata attributes of path (not following a
// final symlink), keys without MetadataPrefix. A filesystem without
// extended attributes has none.
func ReadMetadata(path string) (map[string]string, error) {
	size, err := unix.Llistxattr(path, nil)
	if err != nil || size == 0 {
		if err == nil || errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing attributes of %s: %w", path, err)
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(path, buf)
	if err != nil {
		return nil, fmt.Errorf("listing attributes of %s: %w", path, err)
	}
	var md map[string]string
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		key, ok := strings.CutPrefix(name, MetadataPrefix)
		if !ok || key == "" {
			continue
		}
		val := make([]byte, 4096)
		n, err := unix.Lgetxattr(path, name, val)
		if errors.Is(err, unix.ERANGE) {
			if n, err = unix.Lgetxattr(path, name, nil); err == nil {
				val = make([]byte, n)
				n, err = unix.Lgetxattr(path, name, val)
			}
		}
		if err != nil {
			continue
		}
		if md == nil {
			md = make(map[string]string)
		}
		md[key] = string(val[:n])
	}
	return md, nil
}

// ClearMetadata removes the metadata attributes of path (following symlinks); other
// attributes stay. A filesystem without extended attributes has none to remove.
func ClearMetadata(path string) error {
	size, err := unix.Listxattr(path, nil)
	if err != nil || size == 0 {
		if err == nil || errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return fmt.Errorf("listing attributes of %s: %w", path, err)
	}
	buf := make([]byte, size)
	if size, err = unix.Listxattr(path, buf); err != nil {
		return fmt.Errorf("listing attributes of %s: %w", path, err)
	}
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		if !strings.HasPrefix(name, MetadataPrefix) {
			continue
		}
		if err := unix.Removexattr(path, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("removing metadata %q of %s: %w", name, path, err)
		}
	}
	return nil
}

// WriteMetadata sets the metadata attributes of path (following symlinks).
func WriteMetadata(path string, md map[string]string) error {
	for k, v := range md {
		if err := unix.Setxattr(path, MetadataPrefix+k, []byte(v), 0); err != nil {
			return fmt.Errorf("setting metadata %q on %s: %w", k, path, err)
		}
	}
	return nil
}

// Filesystem magic numbers (statfs f_type) of network and FUSE filesystems,
// on which inotify misses changes made elsewhere. 9p is left out: gVisor's
// gofer mounts report it although the sandbox owns their contents.
func networkFS() map[int64]string {
	return map[int64]string{
		0x6969:     "nfs",
		0x517b:     "smb",
		0xfe534d42: "smb2",
		0xff534d42: "cifs",
		0x65735546: "fuse",
		0x5346414f: "afs",
		0x00c36400: "ceph",
		0x73757245: "coda",
	}
}

// NetworkFS returns the name of the network filesystem path is on, or ""
// when it is on a local one.
func NetworkFS(path string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", fmt.Errorf("statfs %s: %w", path, err)
	}
	return networkFS()[int64(st.Type)], nil
}
