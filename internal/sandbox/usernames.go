package sandbox

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
)

// Agents as Linux users (issue 15): the pure decisions — which names are accepted and which
// uids and gids a new user and its shared groups get. useradd.go applies them.

// The id ranges moat gives its accounts: users (and their private groups, same number)
// from FirstUserID, shared groups from FirstGroupID; never an id the sandbox's own
// /etc/passwd or /etc/group uses.
const (
	FirstUserID  = 2000
	LastUserID   = 2999
	FirstGroupID = 3000
	LastGroupID  = 3999
	// MaxUserGroups bounds the shared groups of one user.
	MaxUserGroups = 16
)

// UserSpec is what a caller asks for: a name, shared groups, sudo.
type UserSpec struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
	Sudo   bool     `json:"sudo,omitempty"`
}

// SharedGroup is a group moat made for users to share, with /shared/NAME in the sandbox.
// Its gid is fixed for the sandbox's life (Sandbox.SharedGroups).
type SharedGroup struct {
	Name string `json:"name"`
	GID  uint32 `json:"gid"`
}

// CheckAccountName checks a user or group name: POSIX-ish [a-z_][a-z0-9_-]{0,31}, not
// root. what is "user" or "group", for the message.
func CheckAccountName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s name is empty: %w", what, errdefs.ErrInvalidArgument)
	case !userRE.MatchString(name):
		return fmt.Errorf("%s name %q is not valid: lower-case letters, digits, '_' and '-', starting with a letter or '_', at most 32 characters: %w",
			what, name, errdefs.ErrInvalidArgument)
	case name == "root":
		return fmt.Errorf("%s name %q is reserved: %w", what, name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CheckUserSpec checks one requested user: its name, its groups (valid, distinct, not its
// own name, at most MaxUserGroups).
func CheckUserSpec(s UserSpec) error {
	if err := CheckAccountName("user", s.Name); err != nil {
		return err
	}
	if len(s.Groups) > MaxUserGroups {
		return fmt.Errorf("user %q: %d groups, at most %d: %w", s.Name, len(s.Groups), MaxUserGroups, errdefs.ErrInvalidArgument)
	}
	for i, g := range s.Groups {
		if err := CheckAccountName("group", g); err != nil {
			return fmt.Errorf("user %q: %w", s.Name, err)
		}
		if g == s.Name {
			return fmt.Errorf("user %q: group %q is the user's own private group: %w", s.Name, g, errdefs.ErrInvalidArgument)
		}
		if slices.Contains(s.Groups[:i], g) {
			return fmt.Errorf("user %q: group %q given twice: %w", s.Name, g, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckUserSpecs checks the users of a create: each valid, no name twice, no user named
// like another's group.
func CheckUserSpecs(specs []UserSpec) error {
	for i, s := range specs {
		if err := CheckUserSpec(s); err != nil {
			return err
		}
		for _, o := range specs[:i] {
			if o.Name == s.Name {
				return fmt.Errorf("user %q given twice: %w", s.Name, errdefs.ErrInvalidArgument)
			}
		}
	}
	for _, s := range specs {
		for _, o := range specs {
			if slices.Contains(o.Groups, s.Name) {
				return fmt.Errorf("group %q of user %q is the name of a user: %w", s.Name, o.Name, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// CheckUser refuses a user whose settings contradict each other: per-user egress for a
// sudo user, who can become any uid and so escape rules bound to its own.
func CheckUser(u User) error {
	if u.Sudo && u.Egress != nil {
		return fmt.Errorf("user %q has sudo, so it can become any user (root included): per-user egress cannot bind it; "+
			"give it no sudo, or no per-user egress: %w", u.Name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// accountDB is what a sandbox's /etc/passwd and /etc/group hold: names and ids in use.
type accountDB struct {
	users, groups map[string]bool
	uids, gids    map[uint32]bool
}

// parseAccountDB reads the names and ids of passwd(5) and group(5) data. Lines that are
// not NAME:…:ID:… are skipped; an id that is not a number is no id. The data comes from
// inside the sandbox: nothing in it is trusted beyond "this name or id is in use".
func parseAccountDB(passwd, group []byte) accountDB {
	db := accountDB{users: map[string]bool{}, groups: map[string]bool{}, uids: map[uint32]bool{}, gids: map[uint32]bool{}}
	each := func(data []byte, names map[string]bool, idField int, ids map[uint32]bool) {
		for _, line := range bytes.Split(data, []byte("\n")) {
			f := strings.Split(strings.TrimRight(string(line), "\r"), ":")
			if f[0] == "" || strings.HasPrefix(f[0], "#") {
				continue
			}
			names[f[0]] = true
			if len(f) > idField {
				if n, err := strconv.ParseUint(f[idField], 10, 32); err == nil {
					ids[uint32(n)] = true
				}
			}
		}
	}
	each(passwd, db.users, 2, db.uids)
	each(group, db.groups, 2, db.gids)
	if len(passwd) > 0 {
		// A passwd line's gid (field 3) is a group in use even if group does not list it.
		for _, line := range bytes.Split(passwd, []byte("\n")) {
			if f := strings.Split(string(line), ":"); len(f) > 3 {
				if n, err := strconv.ParseUint(f[3], 10, 32); err == nil {
					db.gids[uint32(n)] = true
				}
			}
		}
	}
	return db
}

// retire marks the uids (and same-numbered gids) of removed users as in use.
func (db accountDB) retire(ids []uint32) {
	for _, id := range ids {
		db.uids[id], db.gids[id] = true, true
	}
}

// planUser decides a new user's uid, gid and the gids of the shared groups it is the
// first member of. db is the sandbox's database (moat's own accounts included), users and
// shared the record's. Names already in the record are ErrAlreadyExists; names the
// sandbox's system uses (not moat's) are ErrInvalidArgument.
func planUser(db accountDB, users []User, shared []SharedGroup, s UserSpec) (User, []SharedGroup, error) {
	if err := CheckUserSpec(s); err != nil {
		return User{}, nil, err
	}
	isShared := func(name string) bool {
		return slices.ContainsFunc(shared, func(g SharedGroup) bool { return g.Name == name })
	}
	isUser := func(name string) bool {
		return slices.ContainsFunc(users, func(u User) bool { return u.Name == name })
	}
	switch {
	case isUser(s.Name):
		return User{}, nil, fmt.Errorf("user %q already exists in the sandbox: %w", s.Name, errdefs.ErrAlreadyExists)
	case isShared(s.Name):
		return User{}, nil, fmt.Errorf("%q is a shared group of the sandbox; a user cannot have its name: %w", s.Name, errdefs.ErrInvalidArgument)
	case db.users[s.Name] || db.groups[s.Name]:
		return User{}, nil, fmt.Errorf("%q is an existing account or group of the sandbox's system: choose another name: %w", s.Name, errdefs.ErrInvalidArgument)
	}
	usedID := func(n uint32) bool {
		if db.uids[n] || db.gids[n] {
			return true
		}
		return slices.ContainsFunc(users, func(u User) bool { return u.UID == n || u.GID == n })
	}
	id, ok := firstFree(FirstUserID, LastUserID, usedID)
	if !ok {
		return User{}, nil, fmt.Errorf("no free uid left in %d-%d: %w", FirstUserID, LastUserID, errdefs.ErrResourceExhausted)
	}
	var added []SharedGroup
	for _, g := range s.Groups {
		if isShared(g) {
			continue
		}
		switch {
		case isUser(g):
			return User{}, nil, fmt.Errorf("group %q is the name of a user of the sandbox: %w", g, errdefs.ErrInvalidArgument)
		case db.users[g] || db.groups[g]:
			return User{}, nil, fmt.Errorf("group %q is an existing account or group of the sandbox's system: shared groups are moat's own; choose another name: %w",
				g, errdefs.ErrInvalidArgument)
		}
		usedGID := func(n uint32) bool {
			return db.gids[n] || slices.ContainsFunc(shared, func(o SharedGroup) bool { return o.GID == n }) ||
				slices.ContainsFunc(added, func(o SharedGroup) bool { return o.GID == n })
		}
		gid, ok := firstFree(FirstGroupID, LastGroupID, usedGID)
		if !ok {
			return User{}, nil, fmt.Errorf("no free gid left in %d-%d: %w", FirstGroupID, LastGroupID, errdefs.ErrResourceExhausted)
		}
		added = append(added, SharedGroup{Name: g, GID: gid})
	}
	return User{Name: s.Name, UID: id, GID: id, Groups: slices.Clone(s.Groups), Sudo: s.Sudo}, added, nil
}

func firstFree(from, to uint32, used func(uint32) bool) (uint32, bool) {
	for n := from; n <= to; n++ {
		if !used(n) {
			return n, true
		}
	}
	return 0, false
}
