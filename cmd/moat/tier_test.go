package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestCLITiers: `moat serve --tiers FILE` adds an operator tier; moat tier ls (table and
// --json) and show list and describe the tiers; create --tier records the tier, and
// inspect shows it with its effective rules; a flag asking beyond the tier, an unknown
// tier and a bad tiers file are refused with errors naming what is wrong.
func TestCLITiers(t *testing.T) {
	c := newCLI(t)
	file := filepath.Join(t.TempDir(), "tiers.yaml")
	if err := os.WriteFile(file, []byte("tiers:\n  - name: review\n    description: look and comment, push nothing\n    credentials: {mode: as-bound}\n    git: {push: none}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("tiers:\n  - name: x\n    credentials: {mode: everything}\n    git: {push: none}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A bad file stops serve before it starts, naming the tier and the field.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(ctx, c.bin, append(append([]string{}, c.args...), "--tiers", bad, "serve")...).CombinedOutput()
	if !strings.Contains(string(out), `--tiers `+bad+`: tiers file: tier 1 ("x"): credentials.mode: "everything" is not none, read-only or as-bound`) {
		t.Errorf("serve with a bad tiers file: %s", out)
	}

	c.args = append(c.args, "--tiers", file)
	c.serve()
	stdout, e, code := c.run("", "tier", "ls", "--json")
	var list []v1.Tier
	if code != 0 || json.Unmarshal([]byte(stdout), &list) != nil || len(list) != 5 || list[4].Name != "review" || list[4].Builtin {
		t.Fatalf("tier ls --json: %d %s %s", code, stdout, e)
	}
	stdout, _, _ = c.run("", "tier", "ls")
	for _, want := range []string{"NAME", "read", "GET/HEAD only", "read-only (GET/HEAD)", "operate", "each use approved", "review", "no push"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("tier ls lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, _ = c.run("", "tier", "show", "integrate")
	for _, want := range []string{"tier:        integrate (built-in)", "setup phase that also allows registries", "agent branch; protected paths held"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("tier show integrate lacks %q:\n%s", want, stdout)
		}
	}
	if _, e, code := c.run("", "tier", "show", "nope"); code == 0 || !strings.Contains(e, `tier "nope": no such tier (have read, edit, integrate, operate, review)`) {
		t.Errorf("tier show nope: %d %s", code, e)
	}

	stdout, e, code = c.run("", "create", "--memory", "256M", "--disk", "128M", "--tier", "read", "--allow", "docs.example.com")
	id := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create --tier read: %d %q %s", code, stdout, e)
	}
	stdout, _, _ = c.run("", "inspect", id)
	var sb v1.Sandbox
	if err := json.Unmarshal([]byte(stdout), &sb); err != nil || sb.Tier != "read" || sb.GitPush != "none" || strings.Join(sb.Policy.Phases["run"].HTTP, ";") != "docs.example.com GET,HEAD" {
		t.Errorf("inspect of a read sandbox: %s", stdout)
	}
	// run --tier edit: the setup command runs in the tier's setup phase, the main one in
	// run; without --setup, the main command runs in run.
	stdout, e, code = c.run("", "run", "--memory", "256M", "--disk", "128M", "--tier", "edit", "--setup", "echo setup-ran", "--", "echo main-ran")
	if code != 0 || !strings.Contains(stdout, "setup-ran") || !strings.Contains(stdout, "main-ran") || !strings.Contains(e, "moat: run phase:") {
		t.Errorf("run --tier edit --setup: %d %q %s", code, stdout, e)
	}
	stdout, e, code = c.run("", "create", "--memory", "256M", "--disk", "128M", "--tier", "edit")
	edit := strings.TrimSpace(stdout)
	if code != 0 {
		t.Fatalf("create --tier edit: %s", e)
	}
	if out, _, _ := c.run("", "policy", "show", edit); !strings.Contains(out, "setup") {
		t.Errorf("policy show of an edit sandbox: %s", out)
	}
	for _, c2 := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--tier", "edit", "--git-hold"}, "tier edit: git_protected: this tier refuses pushes that touch protected paths"},
		{[]string{"create", "--tier", "read", "--net", "allow-all"}, "tier read: policy: this tier limits the network"},
		{[]string{"create", "--tier", "nope"}, `tier "nope": no such tier`},
		{[]string{"run", "--tier", "read", "--setup", "true", "--", "true"}, "--setup: tier read has no setup phase"},
	} {
		if _, e, code := c.run("", c2.args...); code == 0 || !strings.Contains(e, c2.want) {
			t.Errorf("moat %v: %d %s; want %q", c2.args, code, e, c2.want)
		}
	}
}
