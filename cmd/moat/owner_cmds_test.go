package main

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestCLIOwners: `moat key create --owner NAME --admin` (the apikey alias) stores the owner
// and admin flag, which `apikey ls` and its JSON show; a name with an escape is refused and
// nothing is stored. `moat create --visibility team` makes a team sandbox, `moat ls` shows
// its OWNER ("operator (team)"), `inspect` its visibility; `moat visibility ID private`
// changes it (JSON too), records the event, and refuses anything but private or team.
func TestCLIOwners(t *testing.T) {
	c := newCLI(t)
	out, e, code := c.run("", "key", "create", "--owner", "alice", "--admin", "--json")
	var k v1.APIKey
	if code != 0 || json.Unmarshal([]byte(out), &k) != nil || k.Owner != "alice" || !k.Admin || !strings.HasPrefix(k.Key, "e2b_") {
		t.Fatalf("key create --owner --admin: %d %q %s", code, out, e)
	}
	if _, e, code := c.run("", "apikey", "create", "--owner", "evil\x1b[2Jname"); code == 0 || !strings.Contains(e, "owner name") {
		t.Errorf("apikey create with an escape in the owner name: %d %s", code, e)
	}
	if out, _, _ := c.run("", "apikey", "ls"); !strings.Contains(out, k.ID) || !strings.Contains(out, "owner=alice\tadmin") {
		t.Errorf("apikey ls:\n%s", out)
	}
	out, _, _ = c.run("", "apikey", "ls", "--json")
	var keys []v1.APIKey
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 1 || keys[0].Owner != "alice" || !keys[0].Admin {
		t.Errorf("apikey ls --json: %v\n%s", err, out)
	}

	id := c.create("--memory", "256M", "--disk", "128M", "--visibility", "team")
	out, _, _ = c.run("", "ls")
	if lines := strings.Split(out, "\n"); !strings.Contains(lines[0], "OWNER") || !strings.Contains(out, "operator (team)") {
		t.Errorf("ls:\n%s", out)
	}
	out, _, _ = c.run("", "inspect", id)
	var sb v1.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.Visibility != v1.VisibilityTeam || sb.Owner != "" {
		t.Errorf("inspect: %v\n%s", err, out)
	}
	out, e, code = c.run("", "visibility", id, "private", "--json")
	sb = v1.Sandbox{}
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.Visibility != v1.VisibilityPrivate {
		t.Errorf("visibility private --json: %d %q %s", code, out, e)
	}
	if out, e, code := c.run("", "visibility", id, "team"); code != 0 || strings.TrimSpace(out) != id+" team" {
		t.Errorf("visibility team: %d %q %s", code, out, e)
	}
	if _, e, code := c.run("", "visibility", id, "public"); code == 0 || !strings.Contains(e, "want private or team") {
		t.Errorf("visibility public: %d %s", code, e)
	}
	if out, _, _ := c.run("", "events", id); !strings.Contains(out, "team -> private") || !strings.Contains(out, "private -> team") {
		t.Errorf("events:\n%s", out)
	}
	if _, e, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--visibility", "everyone"); code == 0 || !strings.Contains(e, `visibility "everyone"`) {
		t.Errorf("create --visibility everyone: %d %s", code, e)
	}
}
