package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
)

// serve makes sure the test's `moat serve` runs (clidaemon_test.go).
func (c *cli) serve() { c.ensureDaemon() }

// TestCLINames: --name and --label at create, names and unique ID prefixes wherever an ID
// goes (exec, inspect, stop), the errors of a taken name, an ambiguous prefix and a bad
// label or filter, ls --filter / -q / the NAME and EXPIRES columns, prune --dry-run/--json,
// and rm --all, which keeps running sandboxes unless --force.
func TestCLINames(t *testing.T) {
	c := newCLI(t)
	c.serve()
	create := func(args ...string) string {
		t.Helper()
		out, e, code := c.run("", append([]string{"create", "--memory", "256M", "--disk", "128M"}, args...)...)
		id := strings.TrimSpace(out)
		if code != 0 || !strings.HasPrefix(id, "sb-") {
			t.Fatalf("create %v: %q %s", args, out, e)
		}
		return id
	}
	web := create("--name", "web", "--label", "team=a", "--label", "moat.dev/env=dev", "--timeout", "10m")
	other := create("--label", "team=b")
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--name", "web"}, "taken by " + web},
		{[]string{"create", "--name", "a/b"}, "--name"},
		{[]string{"create", "--name", "sb-x"}, "may not start with"},
		{[]string{"create", "--label", "team=a b"}, "--label"},
		{[]string{"ls", "--filter", "colour=red"}, "--filter"},
		{[]string{"ls", "--filter", "state=sleeping"}, "--filter"},
		{[]string{"exec", "sb-", "--", "true"}, web},         // ambiguous: names the candidates
		{[]string{"exec", "nosuch", "--", "true"}, "nosuch"}, // not found
		{[]string{"rm"}, "--all"},                            // nothing to delete
		{[]string{"rm", "--all", web}, "not both"},           // both
	} {
		_, e, code := c.run("", bad.args...)
		if code == 0 || !strings.Contains(e, bad.want) {
			t.Errorf("moat %v: exit %d, stderr %q; want an error mentioning %q", bad.args, code, e, bad.want)
		}
		if len(bad.args) > 1 && bad.args[1] == "sb-" && !strings.Contains(e, other) {
			t.Errorf("the ambiguous prefix's error names %q but not %s", e, other)
		}
	}
	if out, e, _ := c.run("", "exec", "web", "--", "echo by-name"); out != "by-name\n" {
		t.Errorf("exec by name: %q %s", out, e)
	}
	if out, e, _ := c.run("", "exec", other[:9], "--", "echo by-prefix"); out != "by-prefix\n" {
		t.Errorf("exec by ID prefix %s: %q %s", other[:9], out, e)
	}
	if out, e, _ := c.run("", "exec", strings.TrimPrefix(other, "sb-")[:6], "--", "echo by-hex"); out != "by-hex\n" {
		t.Errorf("exec by a bare hex prefix: %q %s", out, e)
	}
	out, _, _ := c.run("", "inspect", "web")
	var sb v1.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.ID != web || sb.Name != "web" || sb.Labels["team"] != "a" || sb.Labels["moat.dev/env"] != "dev" {
		t.Errorf("inspect web: %s", out)
	}
	ids := func(args ...string) string {
		t.Helper()
		out, e, code := c.run("", append([]string{"ls", "-q"}, args...)...)
		if code != 0 {
			t.Fatalf("ls -q %v: %s", args, e)
		}
		f := strings.Fields(out)
		slices.Sort(f)
		return strings.Join(f, " ")
	}
	both := strings.Join(slices.Sorted(slices.Values([]string{web, other})), " ")
	for _, tc := range []struct {
		filters []string
		want    string
	}{
		{nil, both},
		{[]string{"--filter", "label=team=a"}, web},
		{[]string{"--filter", "label=team"}, both},
		{[]string{"--filter", "label=moat.dev/env=dev", "--filter", "state=running"}, web},
		{[]string{"--filter", "label=team=a", "--filter", "state=stopped"}, ""},
		{[]string{"--filter", "name=web"}, web},
		{[]string{"--filter", "template=host"}, both},
		{[]string{"--filter", "template=debian"}, ""},
	} {
		if got := ids(tc.filters...); got != tc.want {
			t.Errorf("ls -q %v = %q, want %q", tc.filters, got, tc.want)
		}
	}
	table, _, _ := c.run("", "ls")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "NAME") || !strings.Contains(lines[0], "EXPIRES") {
		t.Fatalf("ls:\n%s", table)
	}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, web) && !(strings.Contains(l, " web ") && (strings.Contains(l, "in 9m") || strings.Contains(l, "in 10m"))) {
			t.Errorf("ls row of the named sandbox with a 10m timeout: %q", l)
		}
	}
	if _, e, code := c.run("", "stop", other[:9]); code != 0 {
		t.Fatalf("stop by prefix: %s", e)
	}
	out, e, code := c.run("", "prune", "--dry-run", "--json")
	var pr v1.PruneResponse
	if err := json.Unmarshal([]byte(out), &pr); code != 0 || err != nil || !pr.DryRun || len(pr.Deleted) != 1 || pr.Deleted[0].ID != other {
		t.Fatalf("prune --dry-run --json: %d %q %s", code, out, e)
	}
	if got := ids(); got != both {
		t.Fatalf("prune --dry-run deleted something: %q", got)
	}
	out, e, code = c.run("", "rm", "--all")
	if code != 0 || strings.TrimSpace(out) != other || !strings.Contains(e, web+" (running)") || !strings.Contains(e, "--force") {
		t.Fatalf("rm --all: %d %q %q", code, out, e)
	}
	testutil.WaitFor(t, 60*time.Second, "rm --all's deletion", func() bool { return ids() == web })
	// The name is free again only once its sandbox is gone.
	out, e, code = c.run("", "rm", "--all", "--force", "--filter", "name=web")
	if code != 0 || strings.TrimSpace(out) != web {
		t.Fatalf("rm --all --force: %d %q %s", code, out, e)
	}
	testutil.WaitFor(t, 60*time.Second, "the deletions", func() bool { return ids() == "" })
	if _, e, code := c.run("", "inspect", "web"); code == 0 || !strings.Contains(e, "web") {
		t.Errorf("inspect of a deleted name: %d %s", code, e)
	}
	again := create("--name", "web")
	if again == web {
		t.Errorf("a new sandbox got the old ID")
	}
}
