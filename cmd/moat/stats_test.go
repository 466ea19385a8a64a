package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestCLIStatsLogs: moat stats (table and --json) and moat logs (every process, one by
// --pid with stdout and stderr apart, --json, -f when nothing runs) against the real binary
// and daemon, on a sandbox addressed by name.
func TestCLIStatsLogs(t *testing.T) {
	c := newCLI(t)
	c.serve()
	if out, e, code := c.run("", "create", "--name", "obs", "--memory", "256M", "--disk", "128M", "--pids", "100"); code != 0 {
		t.Fatalf("create: %q %s", out, e)
	}
	if out, e, code := c.run("", "exec", "obs", "--", "echo hello-out; echo hello-err >&2"); code != 0 || out != "hello-out\n" {
		t.Fatalf("exec: %d %q %s", code, out, e)
	}
	out, e, code := c.run("", "stats", "obs")
	for _, want := range []string{"CPU", "MEMORY", "of 256.0 MiB", "TASKS", "of 100", "DISK", "NET RX", "NET TX"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("stats: %d, no %q in\n%s%s", code, want, out, e)
		}
	}
	out, e, _ = c.run("", "stats", "obs", "--json")
	var st v1.SandboxStats
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.MemoryLimitBytes != 256<<20 || st.Pids == nil || *st.PidsLimit != 100 || st.NetRxBytes == nil {
		t.Errorf("stats --json: %q %s", out, e)
	}
	out, e, _ = c.run("", "logs", "obs", "--json")
	var procs []v1.ProcessLog
	if err := json.Unmarshal([]byte(out), &procs); err != nil {
		t.Fatalf("logs --json: %q %s", out, e)
	}
	var pid uint32
	for _, p := range procs {
		if strings.Contains(strings.Join(p.Args, " "), "hello-out") {
			pid = p.PID
			if p.Running || p.ExitCode == nil || *p.ExitCode != 0 {
				t.Errorf("the exec's process: %+v", p)
			}
		}
	}
	if pid == 0 {
		t.Fatalf("logs --json has no exec process: %s", out)
	}
	out, e, code = c.run("", "logs", "obs")
	if code != 0 || !strings.Contains(out, "==> pid "+strconv.Itoa(int(pid))) || !strings.Contains(out, "hello-out\n") || !strings.Contains(e, "hello-err\n") {
		t.Errorf("logs: %d %q %q", code, out, e)
	}
	out, e, code = c.run("", "logs", "obs", "--pid", strconv.Itoa(int(pid)))
	if code != 0 || out != "hello-out\n" || e != "hello-err\n" {
		t.Errorf("logs --pid: %d %q %q", code, out, e)
	}
	if _, e, code := c.run("", "logs", "obs", "-f"); code == 0 || !strings.Contains(e, "no process") {
		t.Errorf("logs -f with nothing running: %d %s", code, e)
	}
	if _, e, code := c.run("", "logs", "obs", "--pid", "1", "--tag", "x"); code == 0 || !strings.Contains(e, "not both") {
		t.Errorf("logs --pid --tag: %d %s", code, e)
	}
}
