package main

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestParseAddUser: create's --add-user NAME[,group=G...][,sudo].
func TestParseAddUser(t *testing.T) {
	for _, c := range []struct {
		in   string
		want v1.UserRequest
		err  string
	}{
		{"alice", v1.UserRequest{Name: "alice"}, ""},
		{"alice,sudo", v1.UserRequest{Name: "alice", Sudo: true}, ""},
		{"bob,group=team,group=ops", v1.UserRequest{Name: "bob", Groups: []string{"team", "ops"}}, ""},
		{"", v1.UserRequest{}, "no user name"},
		{",sudo", v1.UserRequest{}, "no user name"},
		{"a,group=", v1.UserRequest{}, "unknown option"},
		{"a,admin", v1.UserRequest{}, "unknown option"},
		{"a,groups=x", v1.UserRequest{}, "unknown option"},
	} {
		got, err := parseAddUser(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseAddUser(%q) = %+v, %v; want error %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got.Name != c.want.Name || got.Sudo != c.want.Sudo || strings.Join(got.Groups, ",") != strings.Join(c.want.Groups, ",") {
			t.Errorf("parseAddUser(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// TestCLIUsers: create --add-user, moat user add/ls/rm (with --json), exec --user as an
// added user, inspect showing users, and the errors of bad input.
func TestCLIUsers(t *testing.T) {
	c := newCLI(t)
	c.serve()
	out, e, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--add-user", "ann,group=team", "--add-user", "ben,sudo")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create --add-user: %q %s", out, e)
	}
	out, e, code = c.run("", "user", "add", id, "cid", "--group", "team", "--json")
	var cid v1.User
	if code != 0 || json.Unmarshal([]byte(out), &cid) != nil || cid.Name != "cid" || cid.UID < 2000 || cid.Home != "/home/cid" || cid.Groups[0] != "team" {
		t.Fatalf("user add --json: %d %q %s", code, out, e)
	}
	if out, e, _ := c.run("", "user", "add", id, "dee"); !strings.HasPrefix(out, "added dee (uid ") {
		t.Errorf("user add: %q %s", out, e)
	}
	out, e, _ = c.run("", "user", "ls", id, "--json")
	var list v1.UserList
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Users) != 4 || len(list.Groups) != 1 ||
		strings.Join(list.Groups[0].Members, ",") != "ann,cid" || !list.Users[1].Sudo {
		t.Fatalf("user ls --json: %q %s (%v)", out, e, err)
	}
	if out, _, _ := c.run("", "user", "ls", id); !strings.Contains(out, "NAME") || !strings.Contains(out, "ann") || !strings.Contains(out, "/shared/team") {
		t.Errorf("user ls: %q", out)
	}
	if out, e, _ := c.run("", "exec", "--user", "cid", id, "--", "sh", "-c", "id -un; echo $HOME"); out != "cid\n/home/cid\n" {
		t.Errorf("exec --user cid: %q %s", out, e)
	}
	var sb v1.Sandbox
	if out, _, _ := c.run("", "inspect", id); json.Unmarshal([]byte(out), &sb) != nil || len(sb.Users) != 4 || len(sb.SharedGroups) != 1 {
		t.Errorf("inspect does not show the users: %q", out)
	}
	if out, e, code := c.run("", "user", "rm", id, "dee", "--keep-home"); code != 0 || !strings.Contains(out, "home kept") {
		t.Errorf("user rm --keep-home: %d %q %s", code, out, e)
	}
	if _, e, code := c.run("", "user", "rm", id, "cid"); code != 0 {
		t.Errorf("user rm: %s", e)
	}
	if out, _, _ := c.run("", "user", "ls", id, "--json"); json.Unmarshal([]byte(out), &list) != nil || len(list.Users) != 2 {
		t.Errorf("after rm: %q", out)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"user", "add", id, "Bad"}, "not valid"},
		{[]string{"user", "add", id, "root"}, "reserved"},
		{[]string{"user", "add", id, "ann"}, "already exists"},
		{[]string{"user", "add", id, "daemon"}, "existing account"},
		{[]string{"user", "add", id, "eve", "--group", "sudo"}, "existing account or group"},
		{[]string{"user", "add", "sb-000000000000", "eve"}, "not found"},
		{[]string{"user", "rm", id, "nosuch"}, "no user"},
		{[]string{"user", "add", id}, "accepts 2 arg"},
		{[]string{"create", "--add-user", "x,admin"}, "--add-user"},
		{[]string{"create", "--add-user", "x,group=root"}, "reserved"},
	} {
		_, e, code := c.run("", bad.args...)
		if code == 0 || !strings.Contains(e, bad.want) {
			t.Errorf("moat %v: exit %d, stderr %q; want an error mentioning %q", bad.args, code, e, bad.want)
		}
	}
}
