package users

// Accounts moat adds to a sandbox (issue 15, "agents as Linux users"): the daemon's record
// is the truth, and Apply makes the sandbox's files match it each time it is sent (at add,
// at every start, after a daemon restart), whatever root inside did to them meanwhile.

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Marker is the GECOS field of every account moat made: an account carrying it that the
// record no longer names is one moat removes.
const Marker = "moat user"

// Account is one user of the record: its private group has its name and GID.
type Account struct {
	Name   string   `json:"name"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []string `json:"groups,omitempty"`
	Sudo   bool     `json:"sudo,omitempty"`
}

// SharedGroup is a group shared by users of the record, with its directory /shared/NAME.
type SharedGroup struct {
	Name string `json:"name"`
	GID  uint32 `json:"gid"`
}

// State is the whole of moat's accounts in a sandbox.
type State struct {
	Users  []Account     `json:"users"`
	Groups []SharedGroup `json:"groups"`
}

// nameRE is the daemon's rule for user and group names (sandbox.CheckAccountName),
// checked again here: names become paths and file lines.
var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// Check refuses a state whose names could not safely become lines and paths, or that
// gives root's ids.
func (st State) Check() error {
	for _, a := range st.Users {
		if !nameRE.MatchString(a.Name) || a.Name == "root" || a.UID == 0 || a.GID == 0 {
			return fmt.Errorf("user %q (%d:%d) is not valid", a.Name, a.UID, a.GID)
		}
		for _, g := range a.Groups {
			if !st.hasGroup(g) {
				return fmt.Errorf("user %q: group %q is not in the state", a.Name, g)
			}
		}
	}
	for _, g := range st.Groups {
		if !nameRE.MatchString(g.Name) || g.Name == "root" || g.GID == 0 {
			return fmt.Errorf("group %q (%d) is not valid", g.Name, g.GID)
		}
	}
	return nil
}

// Stale names the marked accounts in passwd that st does not hold (removed from the
// record while the sandbox could not be told, or by a daemon that crashed midway).
func Stale(passwd []byte, st State) []string {
	var out []string
	forLines(passwd, func(line string) string {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[4] == Marker && !st.hasUser(f[0]) {
			out = append(out, f[0])
		}
		return line
	})
	return out
}

func (st State) hasUser(name string) bool {
	return slices.ContainsFunc(st.Users, func(a Account) bool { return a.Name == name })
}

func (st State) hasGroup(name string) bool {
	return slices.ContainsFunc(st.Groups, func(g SharedGroup) bool { return g.Name == name })
}

// members are the record's users in shared group g, sorted.
func (st State) members(g string) []string {
	var out []string
	for _, a := range st.Users {
		if slices.Contains(a.Groups, g) {
			out = append(out, a.Name)
		}
	}
	slices.Sort(out)
	return out
}

// forLines calls fn with every line of data (without its newline) and joins what fn
// returns ("" drops the line) with newlines, ending with one.
func forLines(data []byte, fn func(string) string) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if out := fn(line); out != "" {
			b.WriteString(out)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func field0(line string) string { name, _, _ := strings.Cut(line, ":"); return name }

// EditPasswd returns passwd with st's users as the record says (home /home/NAME, the
// given shell, GECOS Marker) and without the names in drop and marked accounts st does
// not hold. Other lines stay as they were, in their order.
func EditPasswd(passwd []byte, st State, drop []string, shell string) []byte {
	out := forLines(passwd, func(line string) string {
		f := strings.Split(line, ":")
		name := f[0]
		if st.hasUser(name) || slices.Contains(drop, name) || (len(f) == 7 && f[4] == Marker) {
			return ""
		}
		return line
	})
	for _, a := range st.Users {
		out = append(out, a.Name+":x:"+u32(a.UID)+":"+u32(a.GID)+":"+Marker+":/home/"+a.Name+":"+shell+"\n"...)
	}
	return out
}

// EditGroup returns group with each of st's users' private group and each shared group
// as the record says (members exactly the record's), without the groups named in drop,
// and with st's users and those in drop taken out of every other group's members (the
// record says which groups moat's users are in).
func EditGroup(group []byte, st State, drop []string) []byte {
	out := dropMembers(group, st, drop)
	for _, a := range st.Users {
		out = append(out, a.Name+":x:"+u32(a.GID)+":\n"...)
	}
	for _, g := range st.Groups {
		out = append(out, g.Name+":x:"+u32(g.GID)+":"+strings.Join(st.members(g.Name), ",")+"\n"...)
	}
	return out
}

// dropMembers returns the lines of group or gshadow (NAME:PASSWORD:X:MEMBERS) without the
// groups of st and drop, and with st's users and those in drop taken out of every other
// group's members.
func dropMembers(data []byte, st State, drop []string) []byte {
	ours := func(name string) bool {
		return st.hasUser(name) || st.hasGroup(name) || slices.Contains(drop, name)
	}
	return forLines(data, func(line string) string {
		f := strings.Split(line, ":")
		if ours(f[0]) {
			return ""
		}
		if len(f) != 4 || f[3] == "" {
			return line
		}
		var keep []string
		for _, m := range strings.Split(f[3], ",") {
			if !st.hasUser(m) && !slices.Contains(drop, m) {
				keep = append(keep, m)
			}
		}
		f[3] = strings.Join(keep, ",")
		return strings.Join(f, ":")
	})
}

// EditShadow returns shadow with each of st's users' password locked ("!") and without
// the names in drop.
func EditShadow(shadow []byte, st State, drop []string) []byte {
	out := forLines(shadow, func(line string) string {
		if name := field0(line); st.hasUser(name) || slices.Contains(drop, name) {
			return ""
		}
		return line
	})
	for _, a := range st.Users {
		out = append(out, a.Name+":!::0:99999:7:::\n"...)
	}
	return out
}

// EditGshadow is EditShadow for gshadow: every group of st without a password, members
// as in EditGroup.
func EditGshadow(gshadow []byte, st State, drop []string) []byte {
	out := dropMembers(gshadow, st, drop)
	for _, a := range st.Users {
		out = append(out, a.Name+":!::\n"...)
	}
	for _, g := range st.Groups {
		out = append(out, g.Name+":!::"+strings.Join(st.members(g.Name), ",")+"\n"...)
	}
	return out
}

// SudoersLine is the content of /etc/sudoers.d/moat-NAME of a sudo user.
func SudoersLine(name string) string { return name + " ALL=(ALL) NOPASSWD:ALL\n" }

func u32(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
