package daemon_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/doctor"
	moatruntime "github.com/moatdev/moat/internal/runtime"
	"github.com/moatdev/moat/internal/testutil"
)

// TestRuntimeFallback: a runc in moat's runtime directory that does not work on this host
// is passed over for the next one (the system's); the daemon says so in its log, the doctor
// names the binary passed over and the one used, and sandboxes run on the latter.
func TestRuntimeFallback(t *testing.T) {
	testutil.RequiresRoot(t)
	next, err := moatruntime.AvailableIn("runc", "")
	if err != nil {
		t.Skip("no system runc to fall back to")
	}
	dir := t.TempDir()
	broken := filepath.Join(dir, "runc")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'cannot run on this host' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs testutil.SyncBuffer
	e := newEnvWith(t, func(c *daemon.Config) {
		c.RuntimeDir = dir
		delete(c.RuntimePaths, "runc")
		c.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	if s := logs.String(); !strings.Contains(s, "runtime binary does not work on this host") || !strings.Contains(s, broken) ||
		!strings.Contains(s, "using="+next) {
		t.Errorf("daemon log says nothing of the fallback:\n%s", s)
	}

	var r doctor.Report
	if err := e.c.Doctor(context.Background(), &r); err != nil {
		t.Fatal(err)
	}
	var rt doctor.Runtime
	for _, x := range r.Runtimes {
		if x.Name == "runc" {
			rt = x
		}
	}
	if rt.Path != next || rt.Source != moatruntime.SourceSystem || !rt.Usable {
		t.Errorf("doctor: runc %+v, want %s from the system", rt, next)
	}
	if len(rt.Skipped) != 1 || rt.Skipped[0].Path != broken || rt.Skipped[0].Source != moatruntime.SourceMoat ||
		!strings.Contains(rt.Skipped[0].Reason, "cannot run on this host") {
		t.Errorf("doctor: skipped %+v", rt.Skipped)
	}

	sb := e.create(v1.CreateSandboxRequest{Runtime: "runc"})
	if out := e.mustSh(sb.ID, "echo ok"); out != "ok\n" {
		t.Errorf("sandbox on the fallback runc: %q", out)
	}
}

// TestRuntimePathRejected: a daemon refuses a runtime path for an unknown runtime or
// without an executable file, before it starts anything.
func TestRuntimePathRejected(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		paths map[string]string
		want  string
	}{
		{map[string]string{"docker": "/usr/bin/true"}, "unknown runtime"},
		{map[string]string{"runc": "/nonexistent/runc"}, "no such file"},
		{map[string]string{"runc": notExec}, "not an executable file"},
	} {
		err := daemon.CheckRuntimePaths(tc.paths)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckRuntimePaths(%v) = %v, want %q", tc.paths, err, tc.want)
		}
	}
	if err := daemon.CheckRuntimePaths(map[string]string{"runc": "/bin/sh"}); err != nil {
		t.Errorf("an executable: %v", err)
	}
}
