package daemon_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
)

// TestRefusesDynamicInit: a `moat serve` that finds a dynamically linked moat-init next to
// its executable (as a daemon built at the repository root found the moat-init once
// committed there) refuses to start, naming the file and how to build the right one, and
// stages nothing; a daemon with the static moat-init of `make build` creates and runs
// sandboxes.
func TestRefusesDynamicInit(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := testutil.Binaries(t)
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "moat-init"), "./testdata/dynamic")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a dynamic program: %v\n%s", err, out)
	}
	moat, err := os.ReadFile(filepath.Join(bin, "moat"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "moat"), moat, 0o755); err != nil {
		t.Fatal(err)
	}

	runDir := "/run/moat-test-" + shortID()
	t.Cleanup(func() { os.RemoveAll(runDir) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	serve := exec.CommandContext(ctx, filepath.Join(dir, "moat"), "--data", t.TempDir(), "--run-dir", runDir,
		"--socket", filepath.Join(runDir, "moat.sock"), "serve", "--warm", "0")
	serve.Cancel = func() error { return serve.Process.Signal(syscall.SIGTERM) }
	var stderr bytes.Buffer
	serve.Stdout, serve.Stderr = &stderr, &stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatalf("moat serve started with a dynamic moat-init:\n%s", stderr.String())
	}
	if err == nil {
		t.Fatalf("moat serve exited 0:\n%s", stderr.String())
	}
	for _, want := range []string{filepath.Join(dir, "moat-init"), "not a static executable", "make build"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("moat serve's error does not mention %q:\n%s", want, stderr.String())
		}
	}
	if staged, _ := filepath.Glob(filepath.Join(runDir, "bin", "*")); len(staged) > 0 {
		t.Errorf("staged %v", staged)
	}

	e := newEnv(t)
	sb := e.create(v1.CreateSandboxRequest{})
	if out := e.mustSh(sb.ID, "echo ok"); strings.TrimSpace(out) != "ok" {
		t.Fatalf("static moat-init: %q", out)
	}
}
