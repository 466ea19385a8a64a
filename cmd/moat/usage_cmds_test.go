package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestCLIUsage: moat usage against the real binary and daemon: a sandbox's row (table and
// --json) with running time and its template, kept after rm; --by template and --by api-key
// group it; bad --by and --since are refused with a clear error before any request.
func TestCLIUsage(t *testing.T) {
	c := newCLI(t)
	c.serve()
	if out, e, code := c.run("", "create", "--name", "metered", "--memory", "256M", "--disk", "128M"); code != 0 {
		t.Fatalf("create: %q %s", out, e)
	}
	id, _, _ := c.run("", "inspect", "metered")
	var sb v1.Sandbox
	if err := json.Unmarshal([]byte(id), &sb); err != nil {
		t.Fatalf("inspect: %q", id)
	}
	if _, e, code := c.run("", "rm", "metered"); code != 0 {
		t.Fatalf("rm: %s", e)
	}
	// rm returns once the sandbox is deleting; the record goes when its teardown is done.
	var rep v1.UsageReport
	var row *v1.UsageRow
	var out, e string
	var code int
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, e, code = c.run("", "usage", "--json")
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
			t.Fatalf("usage --json: %d %q %s", code, out, e)
		}
		row = nil
		for i := range rep.Rows {
			if rep.Rows[i].Key == sb.ID {
				row = &rep.Rows[i]
			}
		}
		if row == nil || row.DeletedAt != nil {
			break
		}
	}
	if row == nil || row.DeletedAt == nil || row.RunningSeconds <= 0 || row.Template != sb.Template || row.APIKey != "" || rep.APICalls[""] == 0 {
		t.Fatalf("usage --json: %s", out)
	}
	out, e, code = c.run("", "usage")
	if code != 0 || !strings.Contains(out, sb.ID+" (deleted)") || !strings.Contains(out, "CPU-S") || !strings.Contains(out, "API calls: (operator)") {
		t.Errorf("usage: %d\n%s%s", code, out, e)
	}
	out, e, code = c.run("", "usage", "--by", "template", "--since", "1h")
	if code != 0 || !strings.Contains(out, "TEMPLATE") || !strings.Contains(out, sb.Template) {
		t.Errorf("usage --by template: %d\n%s%s", code, out, e)
	}
	out, e, code = c.run("", "usage", "--by", "api-key", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || rep.By != "api-key" || len(rep.Rows) != 1 || rep.Rows[0].Key != "" || rep.Rows[0].Sandboxes < 1 {
		t.Errorf("usage --by api-key: %d %q %s", code, out, e)
	}
	for _, bad := range [][]string{{"--by", "owner"}, {"--since", "yesterday"}, {"--since", "1h", "--until", "2h"}} {
		if _, e, code := c.run("", append([]string{"usage"}, bad...)...); code == 0 || !strings.Contains(e, "usage") {
			t.Errorf("usage %v: %d %q", bad, code, e)
		}
	}
}
