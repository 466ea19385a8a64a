package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/testutil"
)

// TestCLIStrict (the real binary, no daemon): an unknown subcommand under a group, or at
// the top, exits non-zero on one line with a suggestion; a group alone prints its help;
// the daemon's flags are offered only by serve, run and bench; no flag's placeholder is a
// word taken from its help text.
func TestCLIStrict(t *testing.T) {
	bin := filepath.Join(testutil.Binaries(t), "moat")
	run := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--socket", filepath.Join(t.TempDir(), "none.sock")}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		code := exitOf(t, cmd.Run())
		return out.String(), errb.String(), code
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"template", "buidl"}, `unknown command "buidl" for "moat template"; did you mean build?`},
		{[]string{"archive", "lss"}, `did you mean ls?`},
		{[]string{"apikey", "nope"}, `unknown command "nope" for "moat apikey"`},
		{[]string{"fooo"}, `unknown command "fooo" for "moat"; did you mean fork`},
	} {
		_, e, code := run(c.args...)
		if code == 0 || !strings.Contains(e, c.want) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
			t.Errorf("moat %v: exit %d, %q; want non-zero and one line with %q", c.args, code, e, c.want)
		}
	}
	if out, e, code := run("template"); code != 0 || !strings.Contains(out, "Available Commands:") {
		t.Errorf("moat template alone: %d %q %s", code, out, e)
	}
	daemonFlag := regexp.MustCompile(`(?m)^\s+--(egress-hosts|egress-dns|egress-ca|default-disk|git-protected|log-level) `)
	placeholder := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--[a-z-]+ ([a-z][a-z-]*)\s`)
	types := map[string]bool{"string": true, "int": true, "int64": true, "uint32": true, "float": true, "stringArray": true, "strings": true, "duration": true}
	for _, cmd := range [][]string{{}, {"ls"}, {"exec"}, {"create"}, {"template", "build"}, {"serve"}, {"run"}, {"bench"}, {"policy", "set"}, {"cp"}, {"fork"}} {
		out, _, code := run(append(cmd, "--help")...)
		if code != 0 {
			t.Fatalf("moat %v --help: exit %d", cmd, code)
		}
		daemon := len(cmd) == 1 && (cmd[0] == "serve" || cmd[0] == "run" || cmd[0] == "bench")
		if got := daemonFlag.MatchString(out); got != daemon {
			t.Errorf("moat %v --help offers the daemon's flags: %v, want %v", cmd, got, daemon)
		}
		for _, m := range placeholder.FindAllStringSubmatch(out, -1) {
			if !types[m[1]] {
				t.Errorf("moat %v --help: placeholder %q in %q", cmd, m[1], strings.TrimSpace(m[0]))
			}
		}
	}
}
