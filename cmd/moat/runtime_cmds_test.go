package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/doctor"
	moatruntime "github.com/moatdev/moat/internal/runtime"
)

// TestCLIRuntimePath: serve and run refuse a bad --runtime-path with a clear error, and a
// daemon given one runs sandboxes on that binary, which the doctor reports as configured.
func TestCLIRuntimePath(t *testing.T) {
	c := newCLI(t)
	sys, err := moatruntime.AvailableIn("runc", "")
	if err != nil {
		t.Skip("no runc in PATH or the system directories")
	}
	notExec := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"serve", "run"} {
		for _, tc := range []struct{ val, want string }{
			{"docker=/usr/bin/true", `unknown runtime "docker" (want one of runc, crun, runsc)`},
			{"runc", "want NAME=PATH"},
			{"runc=", "want NAME=PATH"},
			{"runc=bin/runc", "want an absolute path"},
			{"runc=/nonexistent/runc", "no such file or directory"},
			{"runc=" + notExec, "is not an executable file"},
		} {
			argv := append(clientArgs(c.args), cmd, "--runtime-path", tc.val)
			if cmd == "run" {
				argv = append(argv, "--", "true")
			}
			_, stderr, code := c.bare(argv...)
			if code == 0 || !strings.Contains(stderr, "--runtime-path") || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s --runtime-path %s: exit %d, stderr %q; want %q", cmd, tc.val, code, stderr, tc.want)
			}
		}
	}
	if _, stderr, code := c.bare(append(clientArgs(c.args), "serve", "--runtime-path", "runc="+sys, "--runtime-path", "runc="+sys)...); code == 0 || !strings.Contains(stderr, "runc given twice") {
		t.Errorf("runc twice: exit %d, %q", code, stderr)
	}

	// A daemon told to run the system's runc does.
	c.args = append(c.args, "--runtime-path", "runc="+sys)
	out, stderr, code := c.run("", "doctor", "--json")
	if code != 0 {
		t.Fatalf("doctor: exit %d: %s", code, stderr)
	}
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, rt := range r.Runtimes {
		if rt.Name != "runc" {
			continue
		}
		found = true
		if rt.Path != sys || rt.Source != moatruntime.SourceConfigured || !rt.Usable || rt.Release == "" {
			t.Errorf("doctor's runc: %+v, want %s configured", rt, sys)
		}
	}
	if !found {
		t.Errorf("doctor: no runc in %s", out)
	}
	if out, stderr, code := c.run("", "run", "--runtime", "runc", "--", "echo ok"); code != 0 || out != "ok\n" {
		t.Errorf("run on the configured runc: exit %d %q %q", code, out, stderr)
	}
	if !strings.Contains(c.daemon.stderr.String(), "path="+sys) || !strings.Contains(c.daemon.stderr.String(), "source=configured") {
		t.Errorf("the daemon does not say which runc it runs:\n%s", c.daemon.stderr.String())
	}
}

// bare runs the moat binary with argv as given (no daemon started for it).
func (c *cli) bare(argv ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	var out, errb strings.Builder
	cmd := exec.Command(c.bin, argv...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	code = exitOf(c.t, cmd.Run())
	return out.String(), errb.String(), code
}

// TestServeInstallRuntimePath: the unit serve --install writes gives the daemon each
// --runtime-path as it was given.
func TestServeInstallRuntimePath(t *testing.T) {
	a := &app{}
	root := a.rootCmd()
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.ParseFlags([]string{"--runtime-path", "runsc=/bin/true", "--runtime-path", "runc=/bin/sh"}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(serveArgs(serve), " ")
	if !strings.Contains(got, "--runtime-path=runc=/bin/sh --runtime-path=runsc=/bin/true") {
		t.Errorf("serveArgs: %s", got)
	}
	if p := a.runtimePaths.m; p["runc"] != "/bin/sh" || p["runsc"] != "/bin/true" || len(p) != 2 {
		t.Errorf("parsed %v", p)
	}
}
