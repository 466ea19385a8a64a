package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestCLIRedteam runs the real binary: with no daemon it starts its own (proxy probes
// run, every probe passes, exit 0, --json parses); against a running `moat serve` the
// probes that need the pinned sink are skipped; bad input exits 1 with a message.
func TestCLIRedteam(t *testing.T) {
	c := newCLI(t)
	// No daemon yet: the in-process one, with the daemon flags of the test.
	args := append(append(append([]string{}, c.args...), testDaemonFlags...), "redteam", "--runtime", "runc", "--json")
	cmd := exec.Command(c.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	var rep struct {
		Runtime string `json:"runtime"`
		Results []struct{ Name, Status, Reason string }
		Passed  int     `json:"passed"`
		Failed  int     `json:"failed"`
		Skipped int     `json:"skipped"`
		Seconds float64 `json:"seconds"`
	}
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("--json: %v\n%s\nstderr %s", jerr, out.String(), errb.String())
	}
	if err != nil || rep.Failed != 0 || rep.Skipped != 0 || rep.Passed != len(rep.Results) || len(rep.Results) < 15 || rep.Runtime != "runc" {
		t.Errorf("in-process: err %v, %+v\nstderr %s", err, rep, errb.String())
	}
	t.Logf("in-process, runc: %d probes in %.1fs", len(rep.Results), rep.Seconds)

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		out    string
		errHas string
	}{
		{"unknown probe", []string{"redteam", "--probe", "raw-socket"}, 1, "", `unknown probe "raw-socket"; the probes are host-filesystem`},
		{"arguments", []string{"redteam", "now"}, 1, "", "unknown command"},
		{"unknown runtime", []string{"redteam", "--runtime", "kata", "--probe", "uid-map"}, 1, "", "kata"},
		{"a running daemon skips the pinned probes", []string{"redteam", "--probe", "uid-map,proxy-tricks"}, 0, "skip    needs sink.redteam.moat.test pinned", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			out, errOut, code := c.run("", tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.errHas) {
				t.Errorf("code %d (want %d)\nstdout %q (want %q)\nstderr %q (want %q)", code, tc.code, out, tc.out, errOut, tc.errHas)
			}
		})
	}
}
