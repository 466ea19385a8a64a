package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/moatdev/moat/internal/testutil"
)

// exitOf is the exit code of a finished command (-1 when it did not run).
func exitOf(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("running moat: %v", err)
	return -1
}

// TestCLIExitSignals: a command ended by signal N exits 128+N from run (in-process
// daemon) and exec (moat serve), whatever the signal.
func TestCLIExitSignals(t *testing.T) {
	c := newCLI(t)
	if _, e, code := c.run("", "run", "--quiet", "--", "kill -TERM $$"); code != 143 {
		t.Errorf("run kill -TERM $$: exit %d, want 143 (%s)", code, e)
	}
	id := c.create("--memory", "256M", "--disk", "128M")
	for _, tc := range []struct {
		line string
		want int
	}{
		{"kill -TERM $$", 143},
		{"kill -INT $$", 130},
		{"kill -SEGV $$", 139},
		{"kill -USR1 $$", 138},
		{"kill -KILL $$", 137},
		{"kill -38 $$", 166},
		{"exit 7", 7},
	} {
		if _, e, code := c.run("", "exec", id, "--", tc.line); code != tc.want || strings.Contains(e, "without an exit status") {
			t.Errorf("exec %q: exit %d, want %d (%s)", tc.line, code, tc.want, e)
		}
	}
}

// waitExit waits for cmd to end, for at most d (then it is killed and the test fails),
// and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd, d time.Duration, what string) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return exitOf(t, err)
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		t.Errorf("%s: still running after %s", what, d)
		return -1
	}
}

// create makes a sandbox with args and removes it at the end of the test.
func (c *cli) create(args ...string) string {
	c.t.Helper()
	out, e, code := c.run("", append([]string{"create"}, args...)...)
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		c.t.Fatalf("create %v: %d %q %s", args, code, out, e)
	}
	c.t.Cleanup(func() { c.run("", "rm", id) })
	return id
}

// TestCLIOOMExit: a command the OOM killer ends exits 137, moat says so on stderr, and
// `moat events` lists the kill; under runc (the process is killed) and runsc (the
// sandbox's container goes).
func TestCLIOOMExit(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			c := newCLI(t)
			id := c.create("--runtime", rt, "--memory", "64M", "--disk", "128M")
			// tail keeps a line without end in memory: /dev/zero has none.
			_, e, code := c.run("", "exec", id, "--", "tail /dev/zero")
			if code != 137 || !strings.Contains(e, "OOM killer") {
				t.Errorf("exec: exit %d, want 137 and the OOM killer named on stderr: %q", code, e)
			}
			testutil.WaitFor(t, 10*time.Second, "an oom_kill event", func() bool {
				out, _, _ := c.run("", "events", id)
				return strings.Contains(out, "oom_kill")
			})
		})
	}
	t.Run("run", func(t *testing.T) {
		c := newCLI(t)
		_, e, code := c.run("", "run", "--quiet", "--memory", "64M", "--disk", "128M", "--", "tail /dev/zero")
		if code != 137 || !strings.Contains(e, "OOM killer") {
			t.Errorf("run: exit %d, want 137 and the OOM killer named on stderr: %q", code, e)
		}
	})
}

// startReady starts `moat args...` in the background and returns once its stdout
// printed a line "ready".
func (c *cli) startReady(args ...string) (*exec.Cmd, *bytes.Buffer) {
	c.t.Helper()
	cmd := exec.Command(c.bin, c.argv(args...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if sc.Text() == "ready" && !ok {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			c.t.Fatalf("moat %v ended before it was ready: %s", args, errb.String())
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		c.t.Fatalf("moat %v: not ready after 2 min: %s", args, errb.String())
	}
	return cmd, &errb
}

// TestCLIInterrupt: ^C (SIGINT) to `moat exec` without a terminal reaches the command's
// process group, which may trap it (the trap runs inside the sandbox and the exit code is
// the trap's); an untrapped command ends with 130 and is gone from the sandbox. The same
// for `moat run`, whose sandbox is then deleted.
func TestCLIInterrupt(t *testing.T) {
	c := newCLI(t)
	// The in-process run first: later commands start the test's moat serve.
	cmd, errb := c.startReady("run", "--quiet", "--", `trap 'exit 5' INT; echo ready; while :; do sleep 0.1; done`)
	cmd.Process.Signal(os.Interrupt)
	if code := waitExit(t, cmd, time.Minute, "run after ^C"); code != 5 {
		t.Errorf("run: exit %d after ^C, want the trap's 5: %s", code, errb)
	}
	if out, e, _ := c.run("", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("the interrupted run left its sandbox: %s %s", out, e)
	}

	id := c.create("--memory", "256M", "--disk", "128M")
	cmd, errb = c.startReady("exec", id, "--", `trap 'echo trapped > /tmp/int; exit 3' INT; echo ready; while :; do sleep 0.1; done`)
	cmd.Process.Signal(os.Interrupt)
	if code := waitExit(t, cmd, time.Minute, "exec after ^C"); code != 3 {
		t.Errorf("exec: exit %d after ^C, want the trap's 3: %s", code, errb)
	}
	if out, e, code := c.run("", "exec", id, "--", "cat /tmp/int"); code != 0 || out != "trapped\n" {
		t.Errorf("the trap did not run in the sandbox: %d %q %s", code, out, e)
	}

	cmd, errb = c.startReady("exec", id, "--", "echo ready; exec sleep 1000")
	cmd.Process.Signal(os.Interrupt)
	if code := waitExit(t, cmd, time.Minute, "exec sleep after ^C"); code != 130 {
		t.Errorf("exec sleep: exit %d after ^C, want 130: %s", code, errb)
	}
	if out, _, code := c.run("", "exec", id, "--", "pgrep -x sleep"); code == 0 {
		t.Errorf("sleep still runs in the sandbox after ^C: %s", out)
	}

	// A command that ignores ^C ends at the second one.
	cmd, errb = c.startReady("exec", id, "--", "trap '' INT; echo ready; while :; do : ignore-int-marker; sleep 0.1; done")
	cmd.Process.Signal(os.Interrupt)
	time.Sleep(300 * time.Millisecond) // the first ^C is ignored: nothing to await
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitOf(t, err); code == 0 {
			t.Errorf("exec ended 0 after a second ^C: %s", errb)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("exec still runs after a second ^C: %s", errb)
	}
	testutil.WaitFor(t, 10*time.Second, "the ignoring command to be gone", func() bool {
		// The pattern does not match its own command line.
		_, _, code := c.run("", "exec", id, "--", "pgrep -f '[i]gnore-int-marker'")
		return code != 0
	})
}

// TestCLICommandArgs: flags after CMD are the command's, with or without `--`; moat's
// own flags go between ID and CMD.
func TestCLICommandArgs(t *testing.T) {
	c := newCLI(t)
	if out, e, code := c.run("", "run", "--quiet", "printf", "%s|", "-x", "--keep"); code != 0 || out != "-x|--keep|" {
		t.Errorf("run printf -x --keep: %d %q %s", code, out, e)
	}
	id := c.create("--memory", "256M", "--disk", "128M")
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"exec", id, "echo", "-n", "hi"}, "hi"},
		{[]string{"exec", id, "--", "echo", "-n", "hi"}, "hi"},
		{[]string{"exec", id, "--workdir", "/tmp", "pwd"}, "/tmp\n"},
		{[]string{"exec", "--user", "root", id, "id", "-u"}, "0\n"},
		{[]string{"exec", id, "--env", "A=1", "--", "printenv", "A"}, "1\n"},
		{[]string{"exec", id, "sh", "-c", "echo $0", "--user"}, "--user\n"},
	} {
		if out, e, code := c.run("", tc.args...); code != 0 || out != tc.out {
			t.Errorf("%v: %d %q %s (want %q)", tc.args, code, out, e, tc.out)
		}
	}
	for _, args := range [][]string{{"exec", id}, {"exec", id, "--"}, {"exec", id, "--workdir", "/tmp"}} {
		if _, e, code := c.run("", args...); code == 0 || !strings.Contains(e, "command") {
			t.Errorf("%v: %d %s; want an error asking for a command", args, code, e)
		}
	}
	if out, e, code := c.run("", "exec", id, "-x"); code == 0 || !strings.Contains(e, "after --") || out != "" {
		t.Errorf("exec ID -x: %d %q %s; want an error saying where a command starting with - goes", code, out, e)
	}
	if out, e, code := c.run("", "exec", id, "--", "-x"); code != 127 || out != "" {
		t.Errorf("exec ID -- -x: %d %q %s; want the command -x run (and not found)", code, out, e)
	}
}

// TestCLINeedsTerminal: shell and run -it without a terminal say so and create nothing,
// instead of waiting for keys.
func TestCLINeedsTerminal(t *testing.T) {
	c := newCLI(t)
	if _, e, code := c.run("", "run", "-it", "--", "bash"); code == 0 || !strings.Contains(e, "needs a terminal") {
		t.Errorf("run -it: %d %s", code, e)
	}
	id := c.create("--memory", "256M", "--disk", "128M")
	cmd := exec.Command(c.bin, c.argv("shell", id)...)
	// An open pipe that never ends: a shell on it would wait for ever.
	r, w, _ := os.Pipe()
	defer w.Close()
	cmd.Stdin = r
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if exitOf(t, err) == 0 || !strings.Contains(errb.String(), "needs a terminal") {
			t.Errorf("shell without a terminal: %v %s", err, errb.String())
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("shell without a terminal still waits after a minute")
	}
	if out, _, _ := c.run("", "ls", "--json"); strings.Count(out, `"id"`) != 1 {
		t.Errorf("run -it without a terminal created a sandbox: %s", out)
	}
}

// TestCLIRunInteractive: `moat run -it` on a terminal is a session: keys typed reach the
// command's terminal, its output comes back, and moat exits with its code.
func TestCLIRunInteractive(t *testing.T) {
	c := newCLI(t)
	cmd := exec.Command(c.bin, c.argv("run", "-it", "--quiet", "--", `read -r x; echo "got-$x"; [ -t 0 ] && echo tty; exit 5`)...)
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	out := &testutil.SyncBuffer{}
	go io.Copy(out, tty)
	// Typed ahead: the terminal holds the line until moat reads it for the sandbox.
	if _, err := tty.Write([]byte("abc\r")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitOf(t, err); code != 5 || !strings.Contains(out.String(), "got-abc") || !strings.Contains(out.String(), "tty") {
			t.Errorf("run -it: exit %d (want 5), output %q", code, out.String())
		}
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("run -it did not end: %q", out.String())
	}
}

// TestCLINoDaemon: without a daemon only run starts one in-process, and not when a socket
// was named; every other command says how to start one; run --keep --timeout is refused
// (nothing would enforce the timeout once run ends); doctor still checks the host.
func TestCLINoDaemon(t *testing.T) {
	c := newCLI(t)
	bare := func(env []string, args ...string) (string, string, int) {
		t.Helper()
		argv := clientArgs(c.args)
		if slices.Contains(args, "run") { // the daemon's flags are run's (and serve's) only
			argv = append(argv, testDaemonFlags...)
		}
		cmd := exec.Command(c.bin, append(argv, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		code := exitOf(t, cmd.Run())
		return out.String(), errb.String(), code
	}
	for _, args := range [][]string{{"ls"}, {"create"}, {"exec", "sb-x", "true"}, {"rm", "sb-x"}, {"template", "ls"}, {"events", "sb-x"}} {
		if _, e, code := bare(nil, args...); code == 0 || !strings.Contains(e, "no moat daemon") || !strings.Contains(e, "moat serve") {
			t.Errorf("%v without a daemon: %d %q", args, code, e)
		}
	}
	sock := filepath.Join(t.TempDir(), "named.sock")
	if _, e, code := bare(nil, "--socket", sock, "run", "true"); code == 0 || !strings.Contains(e, "--socket or MOAT_SOCKET") {
		t.Errorf("run --socket: %d %q", code, e)
	}
	if _, e, code := bare([]string{"MOAT_SOCKET=" + sock}, "run", "true"); code == 0 || !strings.Contains(e, "--socket or MOAT_SOCKET") {
		t.Errorf("MOAT_SOCKET run: %d %q", code, e)
	}
	if _, e, code := bare(nil, "run", "--keep", "--timeout", "1m", "--", "true"); code == 0 || !strings.Contains(e, "--timeout") {
		t.Errorf("run --keep --timeout without a daemon: %d %q", code, e)
	}
	if out, e, code := bare(nil, "doctor", "--json"); code != 0 || !strings.Contains(out, `"runtimes"`) || !strings.Contains(e, "no daemon") {
		t.Errorf("doctor without a daemon: %d %q %q", code, out, e)
	}
	// The in-process run enforces its timeout, and leaves nothing.
	if _, e, code := bare(nil, "run", "--timeout", "2s", "--", "sleep 60"); code != 124 || !strings.Contains(e, "timeout") {
		t.Errorf("run --timeout in-process: %d %q", code, e)
	}
	if out, e, _ := c.run("", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("sandboxes left: %s %s", out, e)
	}
}

// TestCLISocketPermission: a user who may not open the daemon's socket is told that, not
// that no daemon runs.
func TestCLISocketPermission(t *testing.T) {
	testutil.RequiresBinary(t, "setpriv")
	c := newCLI(t)
	c.ensureDaemon()
	// A copy of moat that user nobody can run.
	dir, err := os.MkdirTemp("", "moat-perm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	b, err := os.ReadFile(c.bin)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "moat")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"ls"}, {"run", "true"}} {
		cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, append(clientArgs(c.args), args...)...)...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		code := exitOf(t, cmd.Run())
		if code == 0 || !strings.Contains(errb.String(), "permission denied") || strings.Contains(errb.String(), "no moat daemon") {
			t.Errorf("%v as nobody: %d %q", args, code, errb.String())
		}
	}
}

// TestCLIServeAlone: a second moat serve never takes a live daemon's socket or data
// directory: on the same data directory it refuses (unless --share-data, which an
// exclusive daemon refuses too), on the same socket it refuses before any work, and the
// first daemon keeps serving on its socket. An in-process run on that data directory,
// reaching no daemon at its own socket, is refused too.
func TestCLIServeAlone(t *testing.T) {
	c := newCLI(t)
	c.ensureDaemon()
	data, run := flagValue(c.args, "--data"), flagValue(c.args, "--run-dir")
	other := t.TempDir()
	serve := func(global []string, extra ...string) (string, int) {
		t.Helper()
		args := append(append(append(global, testDaemonFlags...), "--id-base", flagValue(c.args, "--id-base"), "serve", "--warm", "0"), extra...)
		cmd := exec.Command(c.bin, args...)
		var errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &errb, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return errb.String(), exitOf(t, err)
		case <-time.After(time.Minute):
			cmd.Process.Signal(syscall.SIGTERM)
			<-done
			t.Errorf("moat serve %v kept running: %s", args, errb.String())
			return errb.String(), 0
		}
	}
	if e, code := serve([]string{"--data", data, "--run-dir", other}); code == 0 || !strings.Contains(e, "in use by another moat daemon") || !strings.Contains(e, filepath.Join(run, "moat.sock")) {
		t.Errorf("serve on the same data directory: %d %q", code, e)
	}
	if e, code := serve([]string{"--data", data, "--run-dir", other}, "--share-data"); code == 0 || !strings.Contains(e, "does not share") {
		t.Errorf("serve --share-data beside an exclusive daemon: %d %q", code, e)
	}
	if e, code := serve([]string{"--data", filepath.Join(other, "data"), "--run-dir", other, "--socket", filepath.Join(run, "moat.sock")}); code == 0 || !strings.Contains(e, "already listens") {
		t.Errorf("serve on the same socket: %d %q", code, e)
	}
	if _, err := os.Stat(filepath.Join(other, "data", "moat.db")); err == nil {
		t.Errorf("the refused serve made a database before it checked the socket")
	}
	if _, e, code := c.run("", "ls"); code != 0 {
		t.Errorf("the first daemon no longer answers: %s\n%s", e, c.daemon.stderr.String())
	}
	cmd := exec.Command(c.bin, "--data", data, "--run-dir", other, "--id-base", flagValue(c.args, "--id-base"), "run", "true")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if code := exitOf(t, cmd.Run()); code == 0 || !strings.Contains(errb.String(), "does not share it") {
		t.Errorf("in-process run on a served data directory: %d %q", code, errb.String())
	}
}

// TestCLIServeInstall: serve --install writes a unit under --root that runs this binary
// as serve with the flags given (absolute directories, quoted for systemd), starts
// nothing, and checks the flags first.
func TestCLIServeInstall(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := filepath.Join(testutil.Binaries(t), "moat")
	root := t.TempDir()
	data := filepath.Join(t.TempDir(), "my data")
	cmd := exec.Command(bin, "--data", data, "serve", "--install", "--root", root, "--listen", "127.0.0.1:7000", "--warm", "runc:host=1", "--warm", "runc:debian=0")
	cmd.Env = append(os.Environ(), "MOAT_RUN_DIR=/run/moat-x")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("serve --install: %v %s", err, out)
	}
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/moat.service"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ExecStart=" + bin + ` serve "--data=` + data + `" --run-dir=/run/moat-x --listen=127.0.0.1:7000 --warm=runc:host=1 --warm=runc:debian=0` + "\n"
	if !strings.Contains(string(unit), want) || !strings.Contains(string(unit), "KillMode=process") || !strings.Contains(string(unit), "WantedBy=multi-user.target") {
		t.Errorf("unit:\n%s\nwant the line %q", unit, want)
	}
	if !strings.Contains(string(out), "systemctl daemon-reload && systemctl enable --now moat") {
		t.Errorf("no next step printed: %s", out)
	}
	if _, err := os.Stat(data); err == nil {
		t.Errorf("--install made the data directory: it must start nothing")
	}
	// A bad flag writes no unit.
	cmd = exec.Command(bin, "serve", "--install", "--root", root, "--unit", "bad", "--disk-reserve", "lots")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--disk-reserve") {
		t.Errorf("serve --install with a bad flag: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/systemd/system/bad.service")); err == nil {
		t.Errorf("a unit was written for bad flags")
	}
}

// TestCLIExecTTYInterrupt: ^C typed into `moat exec -t` reaches the sandbox's terminal,
// whose foreground command ends with SIGINT: moat exits 130.
func TestCLIExecTTYInterrupt(t *testing.T) {
	c := newCLI(t)
	id := c.create("--memory", "256M", "--disk", "128M")
	cmd := exec.Command(c.bin, c.argv("exec", "-t", id, "--", "echo ready; exec sleep 1000")...)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	out := &testutil.SyncBuffer{}
	go io.Copy(out, tty)
	testutil.WaitFor(t, time.Minute, "the command to start", func() bool { return strings.Contains(out.String(), "ready") })
	if _, err := tty.Write([]byte{0x03}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitOf(t, err); code != 130 {
			t.Errorf("exec -t after ^C: exit %d, want 130; output %q", code, out.String())
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("exec -t did not end after ^C: %q", out.String())
	}
}

// TestCLIServeSocketActivation: `moat serve` started as systemd starts a socket-activated
// service (the socket on fd 3, LISTEN_PID, LISTEN_FDS) serves on that socket; a client that
// connected before the daemon was up is answered; the daemon leaves the socket file, which
// is systemd's, in place when it stops. serve --install --socket-unit writes the unit.
func TestCLIServeSocketActivation(t *testing.T) {
	c := newCLI(t)
	sock := filepath.Join(flagValue(c.args, "--run-dir"), "activated.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f, err := l.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append(append([]string{"-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`, c.bin}, c.args...), testDaemonFlags...), "serve", "--warm", "0")
	d := exec.Command("sh", argv...)
	d.ExtraFiles = []*os.File{f}
	var derr testutil.SyncBuffer
	d.Stdout, d.Stderr = &derr, &derr
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	stopped := false
	defer func() {
		if !stopped {
			d.Process.Kill()
			d.Wait()
		}
	}()
	// At once: the connection waits in the socket's backlog until the daemon accepts.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ls := exec.CommandContext(ctx, c.bin, "--socket", sock, "ls", "--json")
	out, err := ls.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "[]" {
		t.Fatalf("ls through the activated socket: %v %s\ndaemon: %s", err, out, derr.String())
	}
	if strings.Contains(derr.String(), "already listens") {
		t.Errorf("the daemon refused its own socket: %s", derr.String())
	}
	d.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, d, time.Minute, "activated serve after SIGTERM"); code != 0 {
		t.Errorf("activated serve exit %d: %s", code, derr.String())
	}
	stopped = true
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the daemon removed the activated socket: %v", err)
	}

	root := t.TempDir()
	inst := exec.Command(c.bin, "--socket", "/run/moat-x/api.sock", "serve", "--install", "--socket-unit", "--root", root)
	if out, err := inst.CombinedOutput(); err != nil || !strings.Contains(string(out), "enable --now moat.socket") {
		t.Fatalf("serve --install --socket-unit: %v %s", err, out)
	}
	unit, _ := os.ReadFile(filepath.Join(root, "etc/systemd/system/moat.socket"))
	if !strings.Contains(string(unit), "ListenStream=/run/moat-x/api.sock\n") || !strings.Contains(string(unit), "SocketMode=0600") {
		t.Errorf("socket unit:\n%s", unit)
	}
	svc, _ := os.ReadFile(filepath.Join(root, "etc/systemd/system/moat.service"))
	if !strings.Contains(string(svc), "--socket=/run/moat-x/api.sock") {
		t.Errorf("the service does not name the socket:\n%s", svc)
	}
}
