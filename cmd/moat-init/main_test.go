package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatdev/moat/api/envd/filesystem/filesystemconnect"
	pb "github.com/moatdev/moat/api/envd/process"
	"github.com/moatdev/moat/api/envd/process/processconnect"
)

// These tests run moat-init as a real process, PID 1 of a small sandbox of their own
// (testroot_test.go), serving on a loopback port, and drive it with the generated
// Connect clients, speaking JSON as the E2B SDKs do. They need root: moat-init switches
// users, and the sandbox needs namespaces and mounts.

var (
	binPath  string     // the moat-init binary built by TestMain
	troot    *testRoot  // the root every instance runs in
	testUser *osUser    // a throwaway account of troot, the shared instance's default user
	shared   *instance  // the instance most tests use
	sharedMu sync.Mutex // guards starting shared
)

// sharedEnv is MOAT_ENV of the shared instance.
const sharedEnv = `{"MOAT_TEST_DEFAULT":"from-moat-env","MOAT_TEST_OVERRIDE":"default"}`

type osUser struct {
	name     string
	uid, gid int
	home     string
}

func TestMain(m *testing.M) {
	if ok, err := launcherMain(); ok {
		fmt.Fprintf(os.Stderr, "moat-init test launcher: %v\n", err)
		os.Exit(125)
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "moat-init tests need root; skipping")
		return 0
	}
	before := snapshotHost(hostFiles)
	dir, err := os.MkdirTemp("", "moat-init-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "moat-init")
	// Built as for a sandbox image: static and stripped. MOAT_INIT_RACE=1
	// builds it with the race detector instead (which needs cgo).
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go" // where `make` finds it
	}
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", binPath, "."}
	cgo := "CGO_ENABLED=0"
	if os.Getenv("MOAT_INIT_RACE") != "" {
		args = []string{"build", "-race", "-o", binPath, "."}
		cgo = "CGO_ENABLED=1"
	}
	build := exec.Command(goTool, args...)
	build.Env = append(os.Environ(), cgo)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building moat-init: %v\n%s", err, out)
		return 1
	}
	testUser = newOSUser()
	if troot, err = newTestRoot(dir, binPath, testUser); err != nil {
		fmt.Fprintf(os.Stderr, "preparing the test root: %v\n", err)
		return 1
	}
	code := m.Run()
	if shared != nil {
		shared.stop()
		if strings.Contains(shared.logs(), "DATA RACE") {
			fmt.Fprintf(os.Stderr, "moat-init reported a data race:\n%s", shared.logs())
			code = 1
		}
	}
	if changed := hostChanges(before, snapshotHost(hostFiles)); len(changed) > 0 {
		fmt.Fprintf(os.Stderr, "the tests changed the host: %s\n", strings.Join(changed, "; "))
		code = 1
	}
	return code
}

// instance is one running moat-init.
type instance struct {
	cmd    *exec.Cmd
	url    string
	token  string
	done   chan struct{}
	logMu  sync.Mutex
	log    strings.Builder
	waitMu sync.Mutex
	err    error
}

// startInstance runs moat-init with env added to a minimal environment and
// waits until it serves.
func startInstance(t testing.TB, env ...string) *instance {
	t.Helper()
	return startInstanceArgs(t, nil, env...)
}

// startInstanceArgs is startInstance with extra command-line flags.
func startInstanceArgs(t testing.TB, args []string, env ...string) *instance {
	t.Helper()
	in, err := launchArgs(args, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.stop()
		if strings.Contains(in.logs(), "DATA RACE") {
			t.Errorf("moat-init reported a data race:\n%s", in.logs())
		}
	})
	return in
}

func launch(env ...string) (*instance, error) {
	return launchArgs(nil, env...)
}

// launchArgs is launch with extra command-line flags.
func launchArgs(args []string, env ...string) (*instance, error) {
	in := &instance{token: "tok-" + rand.Text(), done: make(chan struct{})}
	cmd := troot.command(testUser.home, append([]string{"-addr", "127.0.0.1:0", "-log-level", "debug"}, args...),
		append([]string{"PATH=/usr/bin:/bin"}, env...))
	// The token comes on stdin, as from the daemon.
	cmd.Stdin = strings.NewReader(in.token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	in.cmd = cmd
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			in.logMu.Lock()
			in.log.WriteString(line + "\n")
			in.logMu.Unlock()
			if strings.Contains(line, "moat-init serving") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "addr="); ok {
						addrc <- a
					}
				}
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		in.waitMu.Lock()
		in.err = err
		in.waitMu.Unlock()
		close(in.done)
	}()
	select {
	case addr := <-addrc:
		in.url = "http://" + addr
		return in, nil
	case <-in.done:
		return nil, fmt.Errorf("moat-init exited at startup: %v\n%s", in.exitErr(), in.logs())
	case <-time.After(10 * time.Second):
		in.stop()
		return nil, fmt.Errorf("moat-init did not start\n%s", in.logs())
	}
}

func (in *instance) logs() string {
	in.logMu.Lock()
	defer in.logMu.Unlock()
	return in.log.String()
}

func (in *instance) exitErr() error {
	in.waitMu.Lock()
	defer in.waitMu.Unlock()
	return in.err
}

func (in *instance) stop() {
	select {
	case <-in.done:
		return
	default:
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(10 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.done
	}
}

// sharedInstance returns the instance shared by tests that need no special
// configuration. Its default user is testUser.
func sharedInstance(t testing.TB) *instance {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		in, err := launch("MOAT_DEFAULT_USER="+testUser.name, "MOAT_ENV="+sharedEnv)
		if err != nil {
			t.Fatal(err)
		}
		shared = in
	}
	return shared
}

// headers adds fixed headers to every request, unary or streaming.
type headers map[string]string

func (h headers) set(hd http.Header) {
	for k, v := range h {
		hd.Set(k, v)
	}
}

func (h headers) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.set(req.Header())
		return next(ctx, req)
	}
}

func (h headers) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.set(conn.RequestHeader())
		return conn
	}
}

func (h headers) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// clientOpt configures the clients of an instance.
type clientOpt func(headers)

// asUser sends requests as user (Authorization: Basic base64(user:)).
func asUser(user string) clientOpt {
	return func(h headers) {
		h["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
	}
}

// withToken replaces the access token ("" sends none).
func withToken(tok string) clientOpt {
	return func(h headers) {
		if tok == "" {
			delete(h, "X-Access-Token")
		} else {
			h["X-Access-Token"] = tok
		}
	}
}

func withHeader(k, v string) clientOpt { return func(h headers) { h[k] = v } }

func (in *instance) options(opts []clientOpt) []connect.ClientOption {
	h := headers{"X-Access-Token": in.token}
	for _, o := range opts {
		o(h)
	}
	return []connect.ClientOption{connect.WithProtoJSON(), connect.WithInterceptors(h)}
}

func (in *instance) process(opts ...clientOpt) processconnect.ProcessClient {
	return processconnect.NewProcessClient(http.DefaultClient, in.url, in.options(opts)...)
}

func (in *instance) filesystem(opts ...clientOpt) filesystemconnect.FilesystemClient {
	return filesystemconnect.NewFilesystemClient(http.DefaultClient, in.url, in.options(opts)...)
}

// h2cClient speaks HTTP/2 without TLS (prior knowledge).
func (in *instance) h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func (in *instance) processH2C(opts ...clientOpt) processconnect.ProcessClient {
	return processconnect.NewProcessClient(in.h2cClient(), in.url, in.options(opts)...)
}

// result is what a finished process stream carried.
type result struct {
	pid            uint32
	stdout, stderr string
	pty            string
	end            *pb.ProcessEvent_EndEvent
	keepalives     int
}

// collect reads a process stream to its end.
func collect[T interface{ GetEvent() *pb.ProcessEvent }](s interface {
	Receive() bool
	Msg() T
	Err() error
}) (result, error) {
	var r result
	for s.Receive() {
		ev := s.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			r.pid = ev.GetStart().GetPid()
		case ev.GetData() != nil:
			d := ev.GetData()
			r.stdout += string(d.GetStdout())
			r.stderr += string(d.GetStderr())
			r.pty += string(d.GetPty())
		case ev.GetEnd() != nil:
			r.end = ev.GetEnd()
		case ev.GetKeepalive() != nil:
			r.keepalives++
		}
	}
	return r, s.Err()
}

// runCmd starts cmd under bash -l -c, as the SDK's commands.run does, and
// waits for it to end.
func runCmd(t *testing.T, c processconnect.ProcessClient, cmd string, mod ...func(*pb.StartRequest)) result {
	t.Helper()
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}}
	for _, m := range mod {
		m(req)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Start(%q): %v", cmd, err)
	}
	r, err := collect(s)
	if err != nil {
		t.Fatalf("Start(%q) stream: %v", cmd, err)
	}
	if r.end == nil {
		t.Fatalf("Start(%q): no end event", cmd)
	}
	return r
}

// wantCode asserts err is a Connect error with code want.
func wantCode(t *testing.T, err error, want connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("got %v (%v), want %v", got, err, want)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether the process with pid nsPID in the instance's sandbox exists and
// is not a zombie.
func (in *instance) alive(nsPID int) bool {
	pid := hostPID(in.cmd.Process.Pid, nsPID)
	return pid != 0 && alive(pid)
}

// alive reports whether host process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}
