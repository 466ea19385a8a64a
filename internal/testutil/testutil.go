// Package testutil holds helpers shared by moat's tests: root checks, building the moat
// binaries once, and polling.
package testutil

import (
	"bytes"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// RequiresRoot skips the test unless it runs as root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: real namespaces, mounts and runtimes")
	}
}

// RequiresBinary skips the test when name is not in PATH.
func RequiresBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed", name)
	}
	return p
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binaries returns a directory holding freshly built `moat` and `moat-init`. With MOAT_BIN
// set (make test sets it), those are used as they are.
func Binaries(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("MOAT_BIN"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "moat-init")); err == nil {
			return dir
		}
	}
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "moat-bin-")
		if buildErr != nil {
			return
		}
		root := ModuleRoot()
		for _, b := range []struct{ out, pkg string }{{"moat-init", "./cmd/moat-init"}, {"moat", "./cmd/moat"}} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b.out), b.pkg)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = &buildError{string(out), err}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatalf("building moat: %v", buildErr)
	}
	return binDir
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// ModuleRoot is the repository root (the directory holding go.mod).
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// IDBase returns a host uid base for one test daemon: 0x80000000 plus a multiple of 256
// slots, one of 120. Daemons of tests running at the same time on this host — in this
// process, another package's test binary or another checkout — never get the same base:
// each base is claimed by binding the abstract unix socket "@moat-test-idbase-K" (the
// kernel makes the name exclusive, and frees it when the test ends or its process dies;
// nothing is left on the host), which tb's cleanup releases.
func IDBase(tb testing.TB) uint32 {
	tb.Helper()
	var b [1]byte
	_, _ = rand.Read(b[:])
	for i := range 120 {
		k := (int(b[0]) + i) % 120
		l, err := net.Listen("unix", "@moat-test-idbase-"+strconv.Itoa(k))
		if err != nil {
			continue // another test holds it
		}
		tb.Cleanup(func() { l.Close() })
		return 0x80000000 + uint32(k)*256*65536
	}
	tb.Fatalf("no free test uid range: 120 test daemons hold one each")
	return 0
}

// WaitFor polls cond every 20ms until it returns true or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers (a subprocess's
// output written while the test reads it).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
