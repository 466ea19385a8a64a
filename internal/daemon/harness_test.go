package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// env is one in-process daemon with its own data and run directories.
type env struct {
	t       *testing.T
	d       *daemon.Daemon
	c       *sdk.Client
	dataDir string
	runDir  string
	stop    func()
}

func shortID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newEnv starts a daemon for the test; it is shut down (and every sandbox deleted, with a
// leak check) when the test ends.
func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWarm is newEnv with warm pools of the given sizes.
func newEnvWarm(t *testing.T, warm map[string]int) *env {
	return newEnvWith(t, func(c *daemon.Config) { c.Warm = warm })
}

// newEnvWith is newEnv with the daemon's configuration adjusted by configure.
func newEnvWith(t *testing.T, configure func(*daemon.Config)) *env {
	t.Helper()
	testutil.RequiresRoot(t)
	bin := testutil.Binaries(t)
	e := &env{t: t, dataDir: t.TempDir(), runDir: "/run/moat-test-" + shortID()}
	e.start(filepath.Join(bin, "moat-init"), configure)
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(e.dataDir, "logs", "*.log"))
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				if len(data) > 4000 {
					data = data[len(data)-4000:]
				}
				t.Logf("moat-init log %s:\n%s", filepath.Base(l), data)
			}
		}
		list, _ := e.c.List(ctx)
		for _, sb := range list {
			_ = e.c.Delete(ctx, sb.ID)
		}
		e.stop() // also deletes warm sandboxes
		e.d.Manager.Wait()
		e.assertNoLeaks(list)
		os.RemoveAll(e.runDir)
	})
	return e
}

func (e *env) start(initPath string, configure func(*daemon.Config)) {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := daemon.Config{
		DataDir: e.dataDir, RunDir: e.runDir, Socket: filepath.Join(e.runDir, "moat.sock"),
		InitPath: initPath, IDBase: testutil.IDBase(e.t), Log: log,
		// Drives are allocated in full: 1 GiB each keeps a test's many sandboxes (and the
		// tests of other packages running at the same time) within the disk.
		DefaultLimits: sandbox.Limits{DiskBytes: 1 << 30},
		RuntimePaths:  testRuntimePaths(),
	}
	if configure != nil {
		configure(&cfg)
	}
	d, stop, err := daemon.Start(context.Background(), cfg)
	if err != nil {
		e.t.Fatalf("starting daemon: %v", err)
	}
	e.d, e.stop = d, stop
	e.c = sdk.NewUnix(filepath.Join(e.runDir, "moat.sock"))
}

// run runs fn as the subtest name of e's test, with a copy of e that reports to the subtest.
func (e *env) run(name string, fn func(t *testing.T, e *env)) bool {
	return e.t.Run(name, func(t *testing.T) {
		sub := *e
		sub.t = t
		fn(t, &sub)
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// create makes a sandbox with small default limits.
func (e *env) create(req v1.CreateSandboxRequest) *v1.Sandbox {
	e.t.Helper()
	if req.MemoryBytes == 0 {
		req.MemoryBytes = 512 << 20
	}
	if req.DiskBytes == 0 {
		req.DiskBytes = 256 << 20
	}
	sb, err := e.c.Create(context.Background(), req)
	if err != nil {
		e.t.Fatalf("create %+v: %v", req, err)
	}
	return sb
}

type result struct {
	stdout, stderr string
	code           int
}

// sh runs a bash line in sandbox id as user ("" = default).
func (e *env) sh(id, user, line string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code, err := e.c.Exec(ctx, id, sdk.ExecRequest{
		Cmd: "/bin/bash", Args: []string{"-l", "-c", line}, User: user, Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		e.t.Fatalf("exec %q in %s: %v", line, id, err)
	}
	return result{out.String(), errb.String(), code}
}

// mustSh runs line and fails the test unless it exits 0; it returns stdout.
func (e *env) mustSh(id, line string) string {
	e.t.Helper()
	r := e.sh(id, "", line)
	if r.code != 0 {
		e.t.Fatalf("%q exited %d\nstdout: %s\nstderr: %s", line, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// assertNoLeaks checks from the host that nothing of the given (deleted) sandboxes
// remains: mounts, runtime state, cgroups, network links, drives, processes, files.
func (e *env) assertNoLeaks(deleted []v1.Sandbox) {
	t := e.t
	t.Helper()
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, e.runDir+"/sandboxes/") {
			t.Errorf("leaked mount: %s", line)
		}
	}
	for _, sb := range deleted {
		for _, p := range []string{
			filepath.Join(e.runDir, "sandboxes", sb.ID),
			filepath.Join(e.dataDir, "drives", sb.ID+".img"),
			"/sys/fs/cgroup/memory/moat/" + sb.ID,
			"/sys/fs/cgroup/pids/moat/" + sb.ID,
		} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("leaked %s", p)
			}
		}
		assertNoProcesses(t, sb)
	}
	for _, rt := range []string{"runc", "runsc"} {
		root := filepath.Join(e.runDir, "runtime", rt)
		if bin, err := exec.LookPath(rt); err == nil {
			out, _ := exec.Command(bin, "--root", root, "list", "-q").Output()
			if s := strings.TrimSpace(string(out)); s != "" {
				t.Errorf("runtime %s still lists containers: %s", rt, s)
			}
		}
	}
	out, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out), "\n") {
		for _, sb := range deleted {
			if strings.Contains(line, sb.ID[3:9]) {
				t.Errorf("leaked link for %s: %s", sb.ID, line)
			}
		}
	}
	// The kernel detaches an autoclear loop device from a workqueue after the last
	// unmount (loop_schedule_rundown): under load that can lag the unmount a little. A
	// leaked one stays attached.
	var leaked []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		leaked = leaked[:0]
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range loops {
			data, _ := os.ReadFile(f)
			if strings.HasPrefix(string(data), e.dataDir) {
				leaked = append(leaked, f+" → "+strings.TrimSpace(string(data)))
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range leaked {
		t.Errorf("leaked loop device %s", l)
	}
}

// processesInRange lists host pids whose real uid lies in [base, base+size).
func processesInRange(base uint32, size uint32) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/status")
	for _, f := range dirs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if strings.Contains(string(data), "\nState:\tZ") {
			continue // a zombie holds nothing but its pid until its parent reaps it
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				fields := strings.Fields(rest)
				if len(fields) > 0 {
					var uid uint64
					for _, c := range fields[0] {
						uid = uid*10 + uint64(c-'0')
					}
					if uid >= uint64(base) && uid < uint64(base)+uint64(size) {
						pid := filepath.Base(filepath.Dir(f))
						cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
						out = append(out, pid+" "+strings.ReplaceAll(string(cmdline), "\x00", " ")+" "+fields[0])
					}
				}
				break
			}
		}
	}
	return out
}

// runtimesUnderTest are the runtimes that work on this host.
func runtimesUnderTest(t *testing.T) []string {
	var out []string
	rts := []string{"runc", "runsc"}
	// MOAT_TEST_RUNTIMES=runc: the suites run on those runtimes only.
	if s := os.Getenv("MOAT_TEST_RUNTIMES"); s != "" {
		rts = strings.Split(s, ",")
	}
	for _, rt := range rts {
		if _, err := exec.LookPath(rt); err == nil {
			out = append(out, rt)
		}
	}
	if len(out) == 0 {
		t.Skip("no OCI runtime installed")
	}
	return out
}

// testRuntimePaths are the runtime binaries the test daemons run instead of the ones they
// would choose: MOAT_TEST_RUNC=/usr/sbin/runc, MOAT_TEST_RUNSC, MOAT_TEST_CRUN.
func testRuntimePaths() map[string]string {
	m := map[string]string{}
	for _, rt := range []string{"runc", "crun", "runsc"} {
		if p := os.Getenv("MOAT_TEST_" + strings.ToUpper(rt)); p != "" {
			m[rt] = p
		}
	}
	return m
}

func isNotFound(err error) bool { return errors.Is(err, sdk.ErrNotFound) }

// freeLoopbackAddr returns 127.0.0.1:PORT with a port that was free a moment ago (for a
// daemon's --listen).
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// assertPermissionDenied fails t unless err is a 403 permission_denied whose message says
// each of want.
func assertPermissionDenied(t *testing.T, err error, want ...string) {
	t.Helper()
	var se *sdk.Error
	if !errors.As(err, &se) || se.Status != 403 || !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Fatalf("%v, want 403 permission_denied", err)
	}
	for _, w := range want {
		if !strings.Contains(se.Message, w) {
			t.Errorf("the refusal %q does not say %q", se.Message, w)
		}
	}
}

// assertNoProcesses fails t if a process still runs as one of sandbox sb's host uids
// (killed processes may take a moment to be reaped by the host's init).
func assertNoProcesses(t *testing.T, sb v1.Sandbox) {
	t.Helper()
	if sb.HostUID == 0 {
		return
	}
	var pids []string
	for range 100 {
		if pids = processesInRange(sb.HostUID, 65536); len(pids) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("sandbox %s: processes still running as its uids: %v", sb.ID, pids)
}

// serveProcess is a `moat serve` child process of a test on its own data and run
// directories, in its own process group, so that the test can kill it with SIGKILL and
// start another on the same directories.
type serveProcess struct {
	t                    *testing.T
	bin                  string // moat's binary
	data, run, sock, ids string
}

func newServeProcess(t *testing.T) *serveProcess {
	testutil.RequiresRoot(t)
	run := "/run/moat-test-" + shortID()
	t.Cleanup(func() { os.RemoveAll(run) })
	return &serveProcess{t: t, bin: filepath.Join(testutil.Binaries(t), "moat"), data: t.TempDir(), run: run,
		sock: filepath.Join(run, "moat.sock"), ids: strconv.FormatUint(uint64(testutil.IDBase(t)), 10)}
}

// start starts the daemon with a warm pool of warm (and env added to its environment) and
// waits until its socket answers.
func (p *serveProcess) start(warm int, env ...string) *exec.Cmd {
	p.t.Helper()
	cmd := exec.Command(p.bin, "serve", "--data", p.data, "--run-dir", p.run, "--socket", p.sock,
		"--warm", strconv.Itoa(warm), "--id-base", p.ids)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = testWriter{p.t}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	c := sdk.NewUnix(p.sock)
	testutil.WaitFor(p.t, 20*time.Second, "daemon socket", func() bool { return c.Ping(context.Background()) == nil })
	return cmd
}
