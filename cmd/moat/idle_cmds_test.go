package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
)

func TestParseDays(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"7d", 7 * 24 * time.Hour, false},
		{"0", 0, false},
		{"90", 90 * time.Second, false},
		{"5m", 5 * time.Minute, false},
		{"1h30m", 90 * time.Minute, false},
		{"-1d", 0, true},
		{"xd", 0, true},
		{"1w", 0, true},
		{"-5m", 0, true},
	}
	for _, c := range cases {
		got, err := parseDays(c.in)
		if (err != nil) != c.bad || !c.bad && got != c.want {
			t.Errorf("parseDays(%q) = %s, %v; want %s (bad %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

func TestLifecycleFlags(t *testing.T) {
	var req v1.CreateSandboxRequest
	f := lifecycleFlags{idle: "0", deleteAfter: "2d", archive: true}
	if err := f.apply(&req); err != nil {
		t.Fatal(err)
	}
	if req.IdleSeconds == nil || *req.IdleSeconds != 0 || req.DeleteAfterSeconds == nil || *req.DeleteAfterSeconds != 2*86400 || !req.Archive {
		t.Fatalf("request %+v", req)
	}
	req = v1.CreateSandboxRequest{}
	if err := (&lifecycleFlags{}).apply(&req); err != nil || req.IdleSeconds != nil || req.DeleteAfterSeconds != nil {
		t.Fatalf("no flags: %+v %v (want the daemon's defaults: nil)", req, err)
	}
	if err := (&lifecycleFlags{deleteAfter: "0", archive: true}).apply(&req); err == nil {
		t.Errorf("--archive with --delete-after 0 was accepted")
	}
	if err := (&lifecycleFlags{idle: "soon"}).apply(&req); err == nil {
		t.Errorf("--idle soon was accepted")
	}
}

func TestLifecycleColumns(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	in := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	sb := v1.Sandbox{State: "running", Lifecycle: v1.Lifecycle{LastUsedAt: now.Add(-90 * time.Second), IdleStopAt: in(210 * time.Second), DeleteAt: in(7 * 24 * time.Hour), Archive: true}}
	last, idle, del := lifecycleColumns(sb, now)
	if last != "1m ago" || idle != "in 3m" || del != "in 7d (archive)" {
		t.Errorf("running: %q %q %q", last, idle, del)
	}
	sb = v1.Sandbox{State: "stopped", Lifecycle: v1.Lifecycle{LastUsedAt: now.Add(-3 * time.Hour), StopReason: "idle"}}
	if _, idle, del := lifecycleColumns(sb, now); idle != "idle-stopped" || del != "-" {
		t.Errorf("idle-stopped, no deletion: %q %q", idle, del)
	}
}

func TestServeLifecycle(t *testing.T) {
	f := serveLifecycle{idle: "0", deleteAfter: "30d", archiveKeep: "90d"}
	var c daemon.Config
	if err := f.apply(&c); err != nil {
		t.Fatal(err)
	}
	if c.DefaultIdle >= 0 || c.DefaultDeleteAfter != 30*24*time.Hour || c.ArchiveKeep != 90*24*time.Hour {
		t.Errorf("serve --idle 0 --delete-after 30d --archive-keep 90d: idle %s, delete %s, keep %s (want off: negative, 30 and 90 days)", c.DefaultIdle, c.DefaultDeleteAfter, c.ArchiveKeep)
	}
	if err := (&serveLifecycle{archiveKeep: "-1d"}).apply(&c); err == nil {
		t.Error("--archive-keep -1d accepted")
	}
}

// TestCLIIdle: create's lifecycle flags reach the record (create --json, ls --json), ls
// shows the LAST USE / IDLE STOP / DELETE columns, archive ls answers, and bad values are
// refused before anything is created.
func TestCLIIdle(t *testing.T) {
	c := newCLI(t)
	out, errOut, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--idle", "90s", "--delete-after", "2d", "--archive", "--json")
	var sb v1.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); code != 0 || err != nil {
		t.Fatalf("create: %d %v %s", code, err, errOut)
	}
	if sb.IdleSeconds != 90 || sb.DeleteAfterSeconds != 2*86400 || !sb.Archive || sb.IdleStopAt == nil || sb.DeleteAt == nil {
		t.Fatalf("create --json lifecycle: %+v", sb.Lifecycle)
	}
	out, _, _ = c.run("", "ls")
	if !strings.Contains(out, "LAST USE") || !strings.Contains(out, "IDLE STOP") || !strings.Contains(out, "(archive)") || !strings.Contains(out, "in 1m") {
		t.Errorf("ls:\n%s", out)
	}
	if out, e, code := c.run("", "archive", "ls", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("archive ls --json: %d %q %s", code, out, e)
	}
	if _, e, code := c.run("", "archive", "rm", "sb-000000000001"); code == 0 || !strings.Contains(e, "no drive archive of sandbox sb-000000000001") {
		t.Errorf("archive rm of a missing archive: %d %s", code, e)
	}
	for _, args := range [][]string{
		{"create", "--idle", "soon"},
		{"create", "--delete-after", "0", "--archive"},
	} {
		if _, _, code := c.run("", args...); code == 0 {
			t.Errorf("%v was accepted", args)
		}
	}
	if _, _, code := c.run("", "rm", sb.ID); code != 0 {
		t.Errorf("rm")
	}
}
