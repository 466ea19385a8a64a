package envd

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

func TestResolvePath(t *testing.T) {
	u := &users.User{Name: "user", Home: "/home/user"}
	for in, want := range map[string]string{
		"":                    "/home/user",
		"~":                   "/home/user",
		"~/a/b":               "/home/user/a/b",
		"a.txt":               "/home/user/a.txt",
		"a/../b.txt":          "/home/user/b.txt",
		"../../../etc/passwd": "/etc/passwd",
		"/abs//x/./y/":        "/abs/x/y",
		"/../..":              "/",
		"~user/x":             "/home/user/~user/x",
	} {
		got, err := resolvePath(in, u)
		if err != nil || got != want {
			t.Errorf("resolvePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := resolvePath("a\x00b", u); err == nil {
		t.Error("NUL byte accepted")
	}
	if got, _ := resolvePath("x", &users.User{Name: "nohome"}); got != "/x" {
		t.Errorf("relative path without a home: %q", got)
	}
}

func TestKeepaliveInterval(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"":       0,
		"50":     50 * time.Second,
		" 2 ":    2 * time.Second,
		"-1":     0,
		"1.5":    0,
		"999999": 0,
		"abc":    0,
	} {
		h := http.Header{}
		if v != "" {
			h.Set("Keepalive-Ping-Interval", v)
		}
		if got := keepaliveInterval(h); got != want {
			t.Errorf("keepaliveInterval(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestEndEvent(t *testing.T) {
	for _, tc := range []struct {
		ws     syscall.WaitStatus
		code   int32
		exited bool
		status string
	}{
		{0, 0, true, "exit status 0"},
		{3 << 8, 3, true, "exit status 3"},
		{127 << 8, 127, true, "exit status 127"},
		{syscall.WaitStatus(syscall.SIGKILL), -1, false, "signal: killed"},
		{syscall.WaitStatus(syscall.SIGTERM), -1, false, "signal: terminated"},
		{syscall.WaitStatus(syscall.SIGSEGV) | 0x80, -1, false, "signal: segmentation fault (core dumped)"},
	} {
		e := endEvent(tc.ws, false)
		if e.GetExitCode() != tc.code || e.GetExited() != tc.exited || e.GetStatus() != tc.status {
			t.Errorf("endEvent(%#x) = %v; want %d %v %q", int(tc.ws), e, tc.code, tc.exited, tc.status)
		}
	}
}

// TestEndEventOOM: a process the OOM killer ended keeps its status and carries the
// reason in its error (what E2B's SDK shows as CommandExitError's message); an ordinary
// SIGKILL and a failed exit have their status as their error.
func TestEndEventOOM(t *testing.T) {
	e := endEvent(syscall.WaitStatus(syscall.SIGKILL), true)
	if e.GetStatus() != "signal: killed" || e.GetError() != "signal: killed: "+OOMKilledReason || e.GetExitCode() != -1 {
		t.Errorf("OOM-killed: %v", e)
	}
	if e := endEvent(syscall.WaitStatus(syscall.SIGKILL), false); e.GetError() != "signal: killed" {
		t.Errorf("killed: %v", e)
	}
	if e := endEvent(0, true); e.Error != nil {
		t.Errorf("exit 0 has an error: %v", e)
	}
}

func TestProcessEnv(t *testing.T) {
	u := &users.User{Name: "user", Home: "/home/user", Shell: "/bin/bash"}
	env := processEnv(u, map[string]string{"A": "default", "PATH": "/opt/bin"}, map[string]string{"A": "request", "B": "b"})
	want := map[string]string{
		"HOME": "/home/user", "USER": "user", "LOGNAME": "user", "SHELL": "/bin/bash",
		"PATH": "/opt/bin", "A": "request", "B": "b",
	}
	if !reflect.DeepEqual(env, want) {
		t.Fatalf("got %v, want %v", env, want)
	}
	if got := processEnv(&users.User{Name: "x"}, nil, nil); got["PATH"] != defaultPath || got["SHELL"] != "/bin/sh" || got["HOME"] != "/" {
		t.Fatalf("defaults: %v", got)
	}
	list := envList(map[string]string{"B": "2", "A": "1", "": "x", "C=D": "y", "E": "nul\x00"})
	if !reflect.DeepEqual(list, []string{"A=1", "B=2"}) {
		t.Fatalf("envList = %v", list)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := lookPath("tool", "/nonexistent:"+dir); err != nil || got != exe {
		t.Errorf("lookPath(tool) = %q, %v", got, err)
	}
	if _, err := lookPath("data", dir); err == nil {
		t.Error("found a non-executable file")
	}
	if got, err := lookPath("./rel/x", ""); err != nil || got != "./rel/x" {
		t.Errorf("lookPath with a slash = %q, %v", got, err)
	}
}
