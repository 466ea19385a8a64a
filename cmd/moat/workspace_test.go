package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestCLIWorkspace: moat diff (patch, --stat, --json) and moat export (text, --json) of a
// --repo sandbox; a path with an escape sequence reaches the terminal escaped; export to
// a branch outside agent/ fails naming the rule.
func TestCLIWorkspace(t *testing.T) {
	c := newCLI(t)
	repo := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.email=t@example.test", "-c", "user.name=t"}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "README")
	git("commit", "-q", "-m", "first")
	id, errOut, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--repo", repo)
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	defer c.run("", "rm", id)
	if _, e, code := c.run("", "exec", id, "--", `cd /workspace && echo two >> README && printf 'x\n' > "$(printf 'evil\033[31mred')"`); code != 0 {
		t.Fatalf("exec: %s", e)
	}
	patch, e, code := c.run("", "diff", id)
	if code != 0 || !strings.Contains(patch, "diff --git a/README b/README") || !strings.Contains(patch, "+two") {
		t.Errorf("diff: %d %q %s", code, patch, e)
	}
	stat, _, _ := c.run("", "diff", "--stat", id)
	if !strings.Contains(stat, " README | +1 -0") || !strings.Contains(stat, `evil\x1b[31mred`) || strings.Contains(stat, "\x1b") {
		t.Errorf("diff --stat: %q", stat)
	}
	out, _, _ := c.run("", "diff", "--json", id)
	var d v1.WorkspaceDiff
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Base != git("rev-parse", "HEAD") {
		t.Errorf("diff --json: %v %s", err, out)
	}
	// A name with a control character is not a valid repository path (as for pushes):
	// refused, named escaped; the operator may export it anyway.
	if _, e, code := c.run("", "export", id); code == 0 || !strings.Contains(e, `evil\\x1b[31mred`) || strings.Contains(e, "\x1b") {
		t.Errorf("export of an invalid path: %d %q", code, e)
	}
	out, e, code = c.run("", "export", "--allow-protected", id)
	if code != 0 || !strings.Contains(out, "created refs/heads/agent/"+id) {
		t.Errorf("export: %d %q %s", code, out, e)
	}
	if got := git("show", "agent/"+id+":README"); got != "one\ntwo" {
		t.Errorf("exported README: %q", got)
	}
	out, _, _ = c.run("", "export", "--json", "--allow-protected", id)
	var res v1.ExportResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || !res.Unchanged {
		t.Errorf("export --json again: %v %s", err, out)
	}
	if _, e, code := c.run("", "export", "--branch", "main", id); code == 0 || !strings.Contains(e, "agent/") {
		t.Errorf("export --branch main: %d %s", code, e)
	}
}
