package users

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const basePasswd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\n"
const baseGroup = "root:x:0:\nsudo:x:27:user\nuser:x:1000:\n"

func twoUsers() State {
	return State{
		Users: []Account{
			{Name: "alice", UID: 2000, GID: 2000, Groups: []string{"team"}, Sudo: true},
			{Name: "bob", UID: 2001, GID: 2001, Groups: []string{"team"}},
		},
		Groups: []SharedGroup{{Name: "team", GID: 3000}},
	}
}

// TestEditPasswd: record users are written as the record says (replacing what root inside
// made of them), marked accounts not in the record and dropped names go, others stay.
func TestEditPasswd(t *testing.T) {
	in := basePasswd +
		"alice:x:0:0:evil:/root:/bin/bash\n" + // root inside made alice root: the record wins
		"old:x:2005:2005:" + Marker + ":/home/old:/bin/bash\n" // stale marked account
	got := string(EditPasswd([]byte(in), twoUsers(), nil, "/bin/bash"))
	want := basePasswd +
		"alice:x:2000:2000:moat user:/home/alice:/bin/bash\n" +
		"bob:x:2001:2001:moat user:/home/bob:/bin/bash\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// Idempotent.
	if again := string(EditPasswd([]byte(got), twoUsers(), nil, "/bin/bash")); again != got {
		t.Fatalf("not idempotent:\n%s", again)
	}
	// Dropping bob.
	st := twoUsers()
	st.Users = st.Users[:1]
	got = string(EditPasswd([]byte(want), st, []string{"bob"}, "/bin/bash"))
	if strings.Contains(got, "bob") || !strings.Contains(got, "alice:x:2000") || !strings.HasPrefix(got, basePasswd) {
		t.Fatalf("after dropping bob:\n%s", got)
	}
}

func TestEditGroup(t *testing.T) {
	in := baseGroup + "team:x:999:mallory\n" + "video:x:44:alice,user\n"
	got := string(EditGroup([]byte(in), twoUsers(), nil))
	want := "root:x:0:\nsudo:x:27:user\nuser:x:1000:\nvideo:x:44:user\n" +
		"alice:x:2000:\nbob:x:2001:\nteam:x:3000:alice,bob\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if again := string(EditGroup([]byte(got), twoUsers(), nil)); again != got {
		t.Fatalf("not idempotent:\n%s", again)
	}
	st := twoUsers()
	st.Users = st.Users[:1]
	got = string(EditGroup([]byte(want), st, []string{"bob"}))
	if strings.Contains(got, "bob") || !strings.Contains(got, "team:x:3000:alice\n") {
		t.Fatalf("after dropping bob:\n%s", got)
	}
}

func TestEditShadow(t *testing.T) {
	in := "root:*:19000:0:99999:7:::\nalice:$6$secret:19000:0:99999:7:::\n"
	got := string(EditShadow([]byte(in), twoUsers(), nil))
	want := "root:*:19000:0:99999:7:::\nalice:!::0:99999:7:::\nbob:!::0:99999:7:::\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	gs := string(EditGshadow([]byte("root:*::\n"), twoUsers(), nil))
	if gs != "root:*::\nalice:!::\nbob:!::\nteam:!::alice,bob\n" {
		t.Fatalf("gshadow:\n%s", gs)
	}
}

func TestStateCheck(t *testing.T) {
	if err := twoUsers().Check(); err != nil {
		t.Fatal(err)
	}
	for _, st := range []State{
		{Users: []Account{{Name: "../etc", UID: 2000, GID: 2000}}},
		{Users: []Account{{Name: "a:b", UID: 2000, GID: 2000}}},
		{Users: []Account{{Name: "root", UID: 2000, GID: 2000}}},
		{Users: []Account{{Name: "a", UID: 0, GID: 2000}}},
		{Users: []Account{{Name: "a", UID: 2000, GID: 2000, Groups: []string{"nogroup"}}}},
		{Groups: []SharedGroup{{Name: "a\nroot", GID: 3000}}},
		{Groups: []SharedGroup{{Name: "g", GID: 0}}},
	} {
		if err := st.Check(); err == nil {
			t.Errorf("Check(%+v) accepted", st)
		}
		if err := (Files{Root: t.TempDir()}).Apply(st); err == nil {
			t.Errorf("Apply(%+v) accepted", st)
		}
	}
}

func TestStale(t *testing.T) {
	in := basePasswd + "alice:x:2000:2000:" + Marker + ":/home/alice:/bin/bash\nold:x:2005:2005:" + Marker + ":/home/old:/bin/sh\n"
	got := Stale([]byte(in), twoUsers())
	if len(got) != 1 || got[0] != "old" {
		t.Fatalf("Stale = %v, want [old]", got)
	}
}

// testRoot makes a sandbox-like root with the base files.
func testRoot(t *testing.T) Files {
	t.Helper()
	root := t.TempDir()
	for rel, data := range map[string]string{
		"etc/passwd": basePasswd, "etc/group": baseGroup,
		"etc/shadow": "root:*:19000:0:99999:7:::\n", "etc/skel/.bashrc": "# skel\n",
	} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if rel == "etc/shadow" {
			mode = 0o640
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(root, "etc/shadow"), 0, 42); err != nil {
		t.Fatal(err)
	}
	return Files{Root: root}
}

func statOf(t *testing.T, p string) (os.FileMode, uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fi.Mode(), st.Uid, st.Gid
}

// TestApply: files, homes, shared directories and sudoers as the record says, modes and
// owners kept, idempotent; a user taken out of the record loses sudo; Remove with and
// without keep_home.
func TestApply(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (chown)")
	}
	fsys := testRoot(t)
	st := twoUsers()
	if err := fsys.Apply(st); err != nil {
		t.Fatal(err)
	}
	p := func(rel string) string { return filepath.Join(fsys.Root, rel) }
	if m, uid, gid := statOf(t, p("etc/shadow")); m.Perm() != 0o640 || uid != 0 || gid != 42 {
		t.Errorf("shadow %v %d:%d, want mode and owner kept (0640 0:42)", m, uid, gid)
	}
	if m, uid, gid := statOf(t, p("home/alice")); m.Perm() != 0o700 || !m.IsDir() || uid != 2000 || gid != 2000 {
		t.Errorf("home/alice %v %d:%d", m, uid, gid)
	}
	if _, uid, _ := statOf(t, p("home/bob/.bashrc")); uid != 2001 {
		t.Errorf("skel copy not bob's: %d", uid)
	}
	if m, uid, gid := statOf(t, p("shared/team")); m.Perm() != 0o770 || m&os.ModeSetgid == 0 || uid != 0 || gid != 3000 {
		t.Errorf("shared/team %v %d:%d, want 2770 0:3000", m, uid, gid)
	}
	if m, _, _ := statOf(t, p("etc/sudoers.d/moat-alice")); m.Perm() != 0o440 {
		t.Errorf("sudoers mode %v", m)
	}
	if _, err := os.Stat(p("etc/sudoers.d/moat-bob")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("bob has a sudoers file: %v", err)
	}
	passwd, _ := os.ReadFile(p("etc/passwd"))
	if !bytes.Contains(passwd, []byte("alice:x:2000:2000:moat user:/home/alice:")) {
		t.Errorf("passwd:\n%s", passwd)
	}
	// Root inside edits the files: the next Apply restores the record.
	os.WriteFile(p("etc/passwd"), []byte(basePasswd), 0o644)
	os.Chmod(p("home/alice"), 0o755)
	os.WriteFile(p("etc/sudoers.d/moat-bob"), []byte(SudoersLine("bob")), 0o440)
	if err := fsys.Apply(st); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(p("etc/passwd")); !bytes.Equal(again, passwd) {
		t.Errorf("passwd not restored:\n%s", again)
	}
	if m, _, _ := statOf(t, p("home/alice")); m.Perm() != 0o700 {
		t.Errorf("home/alice mode not restored: %v", m)
	}
	if _, err := os.Stat(p("etc/sudoers.d/moat-bob")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("bob's sudoers file survived: %v", err)
	}
	// No temporary files left.
	if left, _ := filepath.Glob(p("etc/*.moat-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// Remove bob keeping his home, then alice without.
	rest := st
	rest.Users = st.Users[:1]
	if err := fsys.Remove(rest, "bob", 2001, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p("home/bob")); err != nil {
		t.Errorf("kept home gone: %v", err)
	}
	rest.Users = nil
	if err := fsys.Remove(rest, "alice", 2000, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p("home/alice")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("alice's home survived: %v", err)
	}
	if _, err := os.Stat(p("etc/sudoers.d/moat-alice")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("alice's sudoers survived: %v", err)
	}
	passwd, _ = os.ReadFile(p("etc/passwd"))
	group, _ := os.ReadFile(p("etc/group"))
	if string(passwd) != basePasswd || strings.Contains(string(group), "alice") || strings.Contains(string(group), "bob") {
		t.Errorf("after removals:\n%s\n%s", passwd, group)
	}
}

// FuzzEditPasswd: whatever the sandbox's files hold, the edit keeps exactly one line per
// record user, as the record says, and is idempotent.
func FuzzEditPasswd(f *testing.F) {
	f.Add([]byte(basePasswd))
	f.Add([]byte("alice:x:0:0::/:/bin/sh\nalice\n:::\n\n#c\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st := twoUsers()
		out := EditPasswd(data, st, nil, "/bin/sh")
		if again := EditPasswd(out, st, nil, "/bin/sh"); !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n%q\n%q", out, again)
		}
		lines, _ := ParsePasswd(bytes.NewReader(out))
		n := 0
		for _, l := range lines {
			if l.Name == "alice" {
				n++
				if l.UID != 2000 || l.GID != 2000 {
					t.Fatalf("alice is %+v", l)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%d alice lines in %q", n, out)
		}
		gout := EditGroup(data, st, nil)
		if again := EditGroup(gout, st, nil); !bytes.Equal(again, gout) {
			t.Fatalf("group not idempotent:\n%q\n%q", gout, again)
		}
	})
}
