package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/doctor"
)

func TestPrintCheckpoint(t *testing.T) {
	var b bytes.Buffer
	printCheckpoint(&b, &v1.Checkpoint{Method: "filesystem", Reason: "runc: criu broken", Note: "processes start afresh",
		Snapshot: v1.Snapshot{ID: "snap-1", Sandbox: "sb-1"}, TookMS: 12.34})
	want := "snap-1\t(filesystem checkpoint of sb-1, 12.3 ms)\nmemory not saved: runc: criu broken\nnote: processes start afresh\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	printCheckpoint(&b, &v1.Checkpoint{Method: "memory", Snapshot: v1.Snapshot{ID: "snap-2", Sandbox: "sb-2"}})
	if strings.Contains(b.String(), "not saved") {
		t.Errorf("a memory checkpoint printed a reason: %q", b.String())
	}
}

// TestCLICheckpoint: `moat checkpoint ID --json` falls back to a filesystem snapshot with
// the runtime's reason (as `moat doctor --json` gives it), the text form says what was not
// saved, and bad input is refused.
func TestCLICheckpoint(t *testing.T) {
	c := newCLI(t)
	var rep doctor.Report
	out, errOut, code := c.run("", "doctor", "--json")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json: %d %v %s", code, err, errOut)
	}
	var line *doctor.Check
	for i, k := range rep.Storage {
		if k.Name == "memory checkpoint (runc)" {
			line = &rep.Storage[i]
		}
	}
	if line == nil {
		t.Fatalf("doctor has no memory checkpoint line for runc: %+v", rep.Storage)
	}
	if line.OK {
		t.Skipf("runc can checkpoint memory here: %s", line.Detail)
	}
	id, errOut, code := c.run("", "create", "--memory", "256M", "--disk", "128M")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	defer c.run("", "rm", id)
	out, errOut, code = c.run("", "checkpoint", id, "--name", "cli-ck", "--json")
	var cp v1.Checkpoint
	if err := json.Unmarshal([]byte(out), &cp); code != 0 || err != nil {
		t.Fatalf("checkpoint --json: %d %v %s %s", code, err, out, errOut)
	}
	defer c.run("", "snapshot", "rm", cp.Snapshot.ID)
	reason, _ := strings.CutPrefix(cp.Reason, "runc: ")
	if cp.Method != "filesystem" || reason == "" || !strings.Contains(line.Detail, reason) || cp.Snapshot.Name != "cli-ck" {
		t.Errorf("checkpoint --json: %+v (doctor: %s)", cp, line.Detail)
	}
	out, errOut, code = c.run("", "checkpoint", id)
	if code != 0 || !strings.Contains(out, "filesystem checkpoint of "+id) || !strings.Contains(out, "memory not saved: runc: ") || !strings.Contains(out, "note: ") {
		t.Errorf("checkpoint: %d %q %s", code, out, errOut)
	}
	if snap := strings.Fields(out); len(snap) > 0 {
		defer c.run("", "snapshot", "rm", snap[0])
	}
	if _, errOut, code := c.run("", "checkpoint"); code == 0 || !strings.Contains(errOut, "accepts 1 arg") {
		t.Errorf("checkpoint without an ID: %d %s", code, errOut)
	}
	if _, errOut, code := c.run("", "checkpoint", "sb-000000000000"); code == 0 || !strings.Contains(errOut, "sb-000000000000") {
		t.Errorf("checkpoint of an unknown sandbox: %d %s", code, errOut)
	}
}
