package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestCheckAccountName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"alice", true}, {"_svc", true}, {"a", true}, {"agent-1", true}, {"a_b-c9", true},
		{strings.Repeat("a", 32), true},
		{"", false}, {"root", false}, {"Alice", false}, {"1abc", false}, {"-a", false},
		{"a b", false}, {"a.b", false}, {"a:b", false}, {"a/b", false}, {"a\nb", false},
		{strings.Repeat("a", 33), false}, {"é", false}, {"a$", false},
	} {
		err := CheckAccountName("user", c.name)
		if (err == nil) != c.ok {
			t.Errorf("CheckAccountName(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CheckAccountName(%q): %v is not ErrInvalidArgument", c.name, err)
		}
	}
}

func TestCheckUserSpecs(t *testing.T) {
	for _, c := range []struct {
		specs []UserSpec
		want  string // "" ok
	}{
		{[]UserSpec{{Name: "a", Groups: []string{"g"}}, {Name: "b", Groups: []string{"g"}, Sudo: true}}, ""},
		{[]UserSpec{{Name: "a"}, {Name: "a"}}, "given twice"},
		{[]UserSpec{{Name: "a", Groups: []string{"g", "g"}}}, "given twice"},
		{[]UserSpec{{Name: "a", Groups: []string{"a"}}}, "private group"},
		{[]UserSpec{{Name: "a", Groups: []string{"b"}}, {Name: "b"}}, "name of a user"},
		{[]UserSpec{{Name: "a", Groups: []string{"Bad"}}}, "not valid"},
		{[]UserSpec{{Name: "a", Groups: make([]string, MaxUserGroups+1)}}, "at most"},
	} {
		err := CheckUserSpecs(c.specs)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("CheckUserSpecs(%+v) = %v, want %q", c.specs, err, c.want)
		}
	}
}

func TestCheckUser(t *testing.T) {
	if err := CheckUser(User{Name: "a", Sudo: true, Egress: &UserEgress{Allow: []string{"example.com"}}}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "sudo") {
		t.Errorf("sudo with egress: %v", err)
	}
	for _, u := range []User{{Name: "a", Sudo: true}, {Name: "a", Egress: &UserEgress{}}} {
		if err := CheckUser(u); err != nil {
			t.Errorf("CheckUser(%+v) = %v", u, err)
		}
	}
}

const testPasswd = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\nuser:x:1000:1000::/home/user:/bin/bash\n" +
	"svc:x:2000:2001::/:/bin/sh\n" // the template uses uid 2000 and gid 2001
const testGroup = "root:x:0:\nsudo:x:27:user\nuser:x:1000:\nbig:x:3000:\n"

// TestPlanUser: ids clear of the template's uids and gids and of the record's, names that
// are the system's refused (invalid argument) and the record's (already exists).
func TestPlanUser(t *testing.T) {
	db := parseAccountDB([]byte(testPasswd), []byte(testGroup))
	u, added, err := planUser(db, nil, nil, UserSpec{Name: "alice", Groups: []string{"team"}, Sudo: true})
	if err != nil {
		t.Fatal(err)
	}
	// 2000 is svc's uid, 2001 svc's gid: 2002; 3000 is a group's: 3001.
	if u.UID != 2002 || u.GID != 2002 || !u.Sudo || len(added) != 1 || added[0] != (SharedGroup{"team", 3001}) {
		t.Fatalf("alice: %+v %+v", u, added)
	}
	users, shared := []User{u}, added
	b, added, err := planUser(db, users, shared, UserSpec{Name: "bob", Groups: []string{"team", "ops"}})
	if err != nil {
		t.Fatal(err)
	}
	if b.UID != 2003 || len(added) != 1 || added[0] != (SharedGroup{"ops", 3002}) {
		t.Fatalf("bob: %+v %+v", b, added)
	}
	users, shared = append(users, b), append(shared, added...)
	for _, c := range []struct {
		spec UserSpec
		want error
	}{
		{UserSpec{Name: "alice"}, errdefs.ErrAlreadyExists},
		{UserSpec{Name: "daemon"}, errdefs.ErrInvalidArgument},
		{UserSpec{Name: "sudo"}, errdefs.ErrInvalidArgument}, // a group of the system
		{UserSpec{Name: "team"}, errdefs.ErrInvalidArgument}, // a shared group
		{UserSpec{Name: "carol", Groups: []string{"sudo"}}, errdefs.ErrInvalidArgument},
		{UserSpec{Name: "carol", Groups: []string{"user"}}, errdefs.ErrInvalidArgument},
		{UserSpec{Name: "carol", Groups: []string{"alice"}}, errdefs.ErrInvalidArgument},
		{UserSpec{Name: "root"}, errdefs.ErrInvalidArgument},
	} {
		if _, _, err := planUser(db, users, shared, c.spec); !errors.Is(err, c.want) {
			t.Errorf("planUser(%+v) = %v, want %v", c.spec, err, c.want)
		}
	}
	// A removed user's uid is never given again.
	db.retire([]uint32{2004})
	if c, _, err := planUser(db, users, shared, UserSpec{Name: "carol"}); err != nil || c.UID != 2005 {
		t.Errorf("after retiring 2004: %+v %v, want uid 2005", c, err)
	}
	// The range runs out.
	var many []User
	for n := uint32(FirstUserID); n <= LastUserID; n++ {
		many = append(many, User{Name: "u", UID: n, GID: n})
	}
	if _, _, err := planUser(db, many, nil, UserSpec{Name: "zed"}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("full range: %v", err)
	}
}

// FuzzAccountDB: whatever a sandbox's files hold, a planned user's ids are in moat's
// ranges and used by none of the files' entries.
func FuzzAccountDB(f *testing.F) {
	f.Add([]byte(testPasswd), []byte(testGroup))
	f.Add([]byte("a:x:2000:2000\n:::\n#x:x:2001\nb:x:99999999999:2002:\n"), []byte("g:x:3000:a,b\n\x00:x:2002:"))
	f.Fuzz(func(t *testing.T, passwd, group []byte) {
		db := parseAccountDB(passwd, group)
		u, added, err := planUser(db, nil, nil, UserSpec{Name: "zz-fuzz", Groups: []string{"zz-team"}})
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if u.UID < FirstUserID || u.UID > LastUserID || db.uids[u.UID] || db.gids[u.GID] {
			t.Fatalf("uid %d/%d collides or is out of range", u.UID, u.GID)
		}
		for _, g := range added {
			if g.GID < FirstGroupID || g.GID > LastGroupID || db.gids[g.GID] {
				t.Fatalf("gid %d collides or is out of range", g.GID)
			}
		}
	})
}

func FuzzCheckAccountName(f *testing.F) {
	for _, s := range []string{"alice", "root", "", "A", "a-b_c", strings.Repeat("x", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckAccountName("user", s) != nil {
			return
		}
		// An accepted name is safe in every file and path moat writes it into.
		if len(s) > 32 || s == "root" || strings.ContainsAny(s, ":,\n/ .\x00") || s[0] == '-' {
			t.Fatalf("accepted %q", s)
		}
	})
}

// TestAccountsOf: a fork's record gets its parent's users, groups and retired uids as they
// are, sharing no slice with the parent's record; no users: nothing.
func TestAccountsOf(t *testing.T) {
	if accountsOf(&Sandbox{}) != nil {
		t.Fatal("accounts of a sandbox without users")
	}
	p := &Sandbox{
		Users:        []User{{Name: "a", UID: 2000, GID: 2000, Groups: []string{"g"}, Egress: &UserEgress{Allow: []string{"x.test"}}}},
		SharedGroups: []SharedGroup{{"g", 3000}}, RetiredUIDs: []uint32{2001},
	}
	var child Sandbox
	accountsOf(p).applyTo(&child)
	if len(child.Users) != 1 || child.Users[0].UID != 2000 || child.SharedGroups[0].GID != 3000 || child.RetiredUIDs[0] != 2001 ||
		child.Users[0].Egress.Allow[0] != "x.test" {
		t.Fatalf("child: %+v", child)
	}
	child.Users[0].Groups[0], child.Users[0].Egress.Allow[0], child.SharedGroups[0].GID, child.RetiredUIDs[0] = "h", "y.test", 1, 1
	if p.Users[0].Groups[0] != "g" || p.Users[0].Egress.Allow[0] != "x.test" || p.SharedGroups[0].GID != 3000 || p.RetiredUIDs[0] != 2001 {
		t.Fatalf("the fork's record shares slices with its parent's: %+v", p)
	}
}
