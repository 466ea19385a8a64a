package build

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// resolveOwner resolves COPY --chown=USER[:GROUP] inside the image root: numbers are used
// as they are, names are looked up in the image's /etc/passwd and /etc/group. Without a
// group, the user's primary group (or, for a number, the same number).
func resolveOwner(root *os.Root, spec string) (uid, gid int, err error) {
	passwd, _ := readSmall(root, "etc/passwd")
	group, _ := readSmall(root, "etc/group")
	return ParseOwner(spec, passwd, group)
}

func readSmall(root *os.Root, name string) (string, error) {
	f, err := root.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4<<20))
	return string(b), err
}

// ParseOwner resolves USER[:GROUP] against passwd and group file contents.
func ParseOwner(spec, passwd, group string) (uid, gid int, err error) {
	u, g, hasGroup := strings.Cut(spec, ":")
	bad := func(what string) error {
		return fmt.Errorf("--chown=%s: %s: %w", spec, what, errdefs.ErrInvalidArgument)
	}
	if u == "" || hasGroup && g == "" {
		return 0, 0, bad("want USER[:GROUP]")
	}
	uid, gid = -1, -1
	if n, ok := idNumber(u); ok {
		uid, gid = n, n
	} else {
		f := lookupEntry(passwd, u)
		if len(f) < 4 {
			return 0, 0, bad("no user " + strconv.Quote(u) + " in the image's /etc/passwd")
		}
		var ok1, ok2 bool
		uid, ok1 = idNumber(f[2])
		gid, ok2 = idNumber(f[3])
		if !ok1 || !ok2 {
			return 0, 0, bad("bad /etc/passwd entry for " + strconv.Quote(u))
		}
	}
	if hasGroup {
		if n, ok := idNumber(g); ok {
			gid = n
		} else {
			f := lookupEntry(group, g)
			if len(f) < 3 {
				return 0, 0, bad("no group " + strconv.Quote(g) + " in the image's /etc/group")
			}
			n, ok := idNumber(f[2])
			if !ok {
				return 0, 0, bad("bad /etc/group entry for " + strconv.Quote(g))
			}
			gid = n
		}
	}
	return uid, gid, nil
}

// idNumber accepts ids inside a sandbox's range (0-65535).
func idNumber(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 65535 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

func lookupEntry(file, name string) []string {
	for _, line := range strings.Split(file, "\n") {
		f := strings.Split(line, ":")
		if len(f) > 0 && f[0] == name {
			return f
		}
	}
	return nil
}
