// Package users reads the sandbox's own user database (/etc/passwd and
// /etc/group) without cgo or NSS: moat-init is static and the sandbox's
// files are the only source of truth.
package users

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrUnknown is returned for a user that is not in the database.
var ErrUnknown = errors.New("unknown user")

// User is an account from /etc/passwd, with its groups from /etc/group.
type User struct {
	Name  string
	UID   uint32
	GID   uint32
	Home  string
	Shell string
	// Groups are the supplementary groups: the primary group first, then
	// every group that lists the user as a member.
	Groups []uint32
}

// PasswdEntry is one line of /etc/passwd.
type PasswdEntry struct {
	Name  string
	UID   uint32
	GID   uint32
	Home  string
	Shell string
}

// GroupEntry is one line of /etc/group.
type GroupEntry struct {
	Name    string
	GID     uint32
	Members []string
}

// maxLine bounds one line of a database file; longer lines are skipped.
const maxLine = 64 << 10

// ParsePasswd parses passwd(5) lines. Blank, comment ("#") and malformed
// lines (wrong field count, empty name, ids that are not 32-bit numbers,
// NIS "+"/"-" entries) are skipped, as libc does.
func ParsePasswd(r io.Reader) ([]PasswdEntry, error) {
	var out []PasswdEntry
	err := eachLine(r, func(line string) {
		f := strings.Split(line, ":")
		if len(f) != 7 || !validName(f[0]) {
			return
		}
		uid, err1 := parseID(f[2])
		gid, err2 := parseID(f[3])
		if err1 != nil || err2 != nil {
			return
		}
		out = append(out, PasswdEntry{Name: f[0], UID: uid, GID: gid, Home: f[5], Shell: f[6]})
	})
	return out, err
}

// ParseGroup parses group(5) lines, skipping malformed ones like
// ParsePasswd.
func ParseGroup(r io.Reader) ([]GroupEntry, error) {
	var out []GroupEntry
	err := eachLine(r, func(line string) {
		f := strings.Split(line, ":")
		if len(f) != 4 || !validName(f[0]) {
			return
		}
		gid, err := parseID(f[2])
		if err != nil {
			return
		}
		g := GroupEntry{Name: f[0], GID: gid}
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				g.Members = append(g.Members, m)
			}
		}
		out = append(out, g)
	})
	return out, err
}

func eachLine(r io.Reader, fn func(string)) error {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Skip the rest of an overlong line.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("reading user database: %w", err)
			}
			continue
		}
		if len(line) > 0 && len(line) <= maxLine {
			line = bytes.TrimRight(line, "\r\n")
			if len(line) > 0 && line[0] != '#' {
				fn(string(line))
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading user database: %w", err)
		}
	}
}

func validName(s string) bool {
	return s != "" && s[0] != '+' && s[0] != '-' && !strings.ContainsAny(s, " \t\x00/")
}

func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err
}

// DB is a cached view of a passwd and a group file, re-read when either
// changes. It is safe for concurrent use.
type DB struct {
	passwdPath, groupPath string

	mu     sync.Mutex
	stamp  [2]fileStamp
	passwd []PasswdEntry
	group  []GroupEntry
}

type fileStamp struct {
	ino, size int64
	mtime     syscall.Timespec
}

// NewDB returns a DB over the given files (normally /etc/passwd and
// /etc/group). Missing files read as empty.
func NewDB(passwdPath, groupPath string) *DB {
	return &DB{passwdPath: passwdPath, groupPath: groupPath}
}

func stampOf(path string) fileStamp {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{}
	}
	return fileStamp{ino: int64(st.Ino), size: st.Size, mtime: st.Mtim}
}

func (db *DB) load() ([]PasswdEntry, []GroupEntry, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	stamp := [2]fileStamp{stampOf(db.passwdPath), stampOf(db.groupPath)}
	if db.passwd != nil && stamp == db.stamp {
		return db.passwd, db.group, nil
	}
	pw, err := parseFile(db.passwdPath, ParsePasswd)
	if err != nil {
		return nil, nil, err
	}
	gr, err := parseFile(db.groupPath, ParseGroup)
	if err != nil {
		return nil, nil, err
	}
	if pw == nil {
		pw = []PasswdEntry{}
	}
	db.stamp, db.passwd, db.group = stamp, pw, gr
	return pw, gr, nil
}

func parseFile[T any](path string, parse func(io.Reader) ([]T, error)) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer f.Close()
	out, err := parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// Lookup returns the user called name, or an error wrapping ErrUnknown.
func (db *DB) Lookup(name string) (*User, error) {
	pw, gr, err := db.load()
	if err != nil {
		return nil, err
	}
	for _, p := range pw {
		if p.Name != name {
			continue
		}
		u := &User{Name: p.Name, UID: p.UID, GID: p.GID, Home: p.Home, Shell: p.Shell}
		u.Groups = append(u.Groups, p.GID)
		for _, g := range gr {
			if g.GID == p.GID {
				continue
			}
			for _, m := range g.Members {
				if m == name {
					u.Groups = append(u.Groups, g.GID)
					break
				}
			}
		}
		return u, nil
	}
	return nil, fmt.Errorf("user %q: %w", name, ErrUnknown)
}

// UserName returns the name of uid, or uid in decimal when it has none.
func (db *DB) UserName(uid uint32) string {
	if pw, _, err := db.load(); err == nil {
		for _, p := range pw {
			if p.UID == uid {
				return p.Name
			}
		}
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// GroupName returns the name of gid, or gid in decimal when it has none.
func (db *DB) GroupName(gid uint32) string {
	if _, gr, err := db.load(); err == nil {
		for _, g := range gr {
			if g.GID == gid {
				return g.Name
			}
		}
	}
	return strconv.FormatUint(uint64(gid), 10)
}
