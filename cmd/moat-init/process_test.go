package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/moatdev/moat/api/envd/process"
	"github.com/moatdev/moat/api/envd/process/processconnect"
)

func TestHealthIsOpen(t *testing.T) {
	in := sharedInstance(t)
	resp, err := http.Get(in.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET /health = %d, want 204", resp.StatusCode)
	}
}

func TestAuthRequired(t *testing.T) {
	in := sharedInstance(t)
	for name, opt := range map[string]clientOpt{
		"missing": withToken(""),
		"wrong":   withToken("not-" + in.token),
		"prefix":  withToken(in.token[:len(in.token)-1]),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := in.process(opt).List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
			wantCode(t, err, connect.CodeUnauthenticated)

			s, err := in.process(opt).Start(context.Background(), connect.NewRequest(&pb.StartRequest{
				Process: &pb.ProcessConfig{Cmd: "/bin/true"},
			}))
			if err == nil {
				s.Receive()
				err = s.Err()
			}
			wantCode(t, err, connect.CodeUnauthenticated)
		})
	}
	if _, err := in.process().List(context.Background(), connect.NewRequest(&pb.ListRequest{})); err != nil {
		t.Fatalf("List with the token: %v", err)
	}
}

func TestStartOutputAndExitCodes(t *testing.T) {
	c := sharedInstance(t).process()
	for _, tc := range []struct {
		cmd            string
		stdout, stderr string
		code           int32
		status         string
	}{
		{"echo out; echo err >&2", "out\n", "err\n", 0, "exit status 0"},
		{"echo bye; exit 3", "bye\n", "", 3, "exit status 3"},
		{"no-such-command-moat", "", "", 127, "exit status 127"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			r := runCmd(t, c, tc.cmd)
			if r.pid == 0 {
				t.Error("no start event with a pid")
			}
			if r.stdout != tc.stdout {
				t.Errorf("stdout = %q, want %q", r.stdout, tc.stdout)
			}
			if tc.code != 127 && r.stderr != tc.stderr {
				t.Errorf("stderr = %q, want %q", r.stderr, tc.stderr)
			}
			if tc.code == 127 && !strings.Contains(r.stderr, "not found") {
				t.Errorf("stderr = %q, want a not found message", r.stderr)
			}
			if r.end.GetExitCode() != tc.code || !r.end.GetExited() || r.end.GetStatus() != tc.status {
				t.Errorf("end = %v, want exit code %d, exited, status %q", r.end, tc.code, tc.status)
			}
		})
	}
}

func TestStartLargeOutput(t *testing.T) {
	c := sharedInstance(t).process()
	r := runCmd(t, c, "head -c 1000000 /dev/zero | tr '\\0' x")
	if len(r.stdout) != 1000000 || strings.Trim(r.stdout, "x") != "" {
		t.Fatalf("got %d bytes of stdout, want 1000000 x", len(r.stdout))
	}
}

func TestStartBadRequests(t *testing.T) {
	c := sharedInstance(t).process()
	for name, req := range map[string]*pb.StartRequest{
		"no command":  {Process: &pb.ProcessConfig{}},
		"missing cwd": {Process: &pb.ProcessConfig{Cmd: "/bin/true", Cwd: ptr("/no/such/dir")}},
		"missing exe": {Process: &pb.ProcessConfig{Cmd: "/no/such/exe"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := c.Start(context.Background(), connect.NewRequest(req))
			if err == nil {
				for s.Receive() {
				}
				err = s.Err()
			}
			wantCode(t, err, connect.CodeInvalidArgument)
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestEnvAndCwd(t *testing.T) {
	c := sharedInstance(t).process()
	r := runCmd(t, c, `echo "$MOAT_TEST_DEFAULT|$MOAT_TEST_OVERRIDE|$HOME|$USER|$LOGNAME|${MOAT_ACCESS_TOKEN-unset}|$PWD"`,
		func(r *pb.StartRequest) { r.Process.Envs = map[string]string{"MOAT_TEST_OVERRIDE": "request"} })
	want := fmt.Sprintf("from-moat-env|request|%s|%s|%s|unset|%s\n", testUser.home, testUser.name, testUser.name, testUser.home)
	if r.stdout != want {
		t.Errorf("got %q, want %q", r.stdout, want)
	}

	r = runCmd(t, c, "pwd", func(r *pb.StartRequest) { r.Process.Cwd = ptr("/tmp") })
	if r.stdout != "/tmp\n" {
		t.Errorf("pwd with cwd /tmp = %q", r.stdout)
	}
	// A relative cwd is relative to the user's home.
	runCmd(t, sharedInstance(t).process(), "mkdir -p sub")
	r = runCmd(t, c, "pwd", func(r *pb.StartRequest) { r.Process.Cwd = ptr("sub") })
	if want := testUser.home + "/sub\n"; r.stdout != want {
		t.Errorf("pwd with cwd sub = %q, want %q", r.stdout, want)
	}
	r = runCmd(t, c, "echo $PATH")
	if !strings.Contains(r.stdout, "/usr/bin") {
		t.Errorf("PATH = %q", r.stdout)
	}
}

func TestRunsAsUser(t *testing.T) {
	in := sharedInstance(t)
	r := runCmd(t, in.process(), "id -u; id -g")
	if want := fmt.Sprintf("%d\n%d\n", testUser.uid, testUser.gid); r.stdout != want {
		t.Errorf("default user: id = %q, want %q", r.stdout, want)
	}
	r = runCmd(t, in.process(asUser("root")), "id -u")
	if r.stdout != "0\n" {
		t.Errorf("root: id -u = %q", r.stdout)
	}
	r = runCmd(t, in.process(asUser("nobody")), "id -un")
	if r.stdout != "nobody\n" {
		t.Errorf("nobody: id -un = %q", r.stdout)
	}
	s, err := in.process(asUser("no-such-user-moat")).Start(context.Background(), connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/true"},
	}))
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
	}
	wantCode(t, err, connect.CodeUnauthenticated)
	if !strings.Contains(err.Error(), "no-such-user-moat") {
		t.Errorf("error %q does not name the user", err)
	}
}

func TestDefaultUserFallsBackToRoot(t *testing.T) {
	in := startInstance(t, "MOAT_DEFAULT_USER=no-such-user-moat")
	r := runCmd(t, in.process(), "id -u; echo $HOME")
	if r.stdout != "0\n/root\n" {
		t.Fatalf("got %q, want root", r.stdout)
	}
}

// background starts a process and returns its pid, leaving the stream to
// the returned stop function.
func background(t *testing.T, c processconnect.ProcessClient, req *pb.StartRequest) (uint32, *connect.ServerStreamForClient[pb.StartResponse], context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	s, err := c.Start(ctx, connect.NewRequest(req))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if !s.Receive() {
		cancel()
		t.Fatalf("no start event: %v", s.Err())
	}
	pid := s.Msg().GetEvent().GetStart().GetPid()
	if pid == 0 {
		cancel()
		t.Fatalf("first event %v is not a start event", s.Msg())
	}
	return pid, s, cancel
}

func TestStdin(t *testing.T) {
	c := sharedInstance(t).process()
	pid, s, cancel := background(t, c, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/cat"},
		Stdin:   ptr(true),
	})
	defer cancel()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	for _, chunk := range []string{"hello ", "world\n"} {
		_, err := c.SendInput(context.Background(), connect.NewRequest(&pb.SendInputRequest{
			Process: sel,
			Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(chunk)}},
		}))
		if err != nil {
			t.Fatalf("SendInput: %v", err)
		}
	}
	if _, err := c.CloseStdin(context.Background(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	r, err := collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != "hello world\n" || r.end.GetExitCode() != 0 {
		t.Fatalf("cat: stdout %q, end %v", r.stdout, r.end)
	}
}

func TestStdinClosedByDefault(t *testing.T) {
	c := sharedInstance(t).process()
	// Without stdin: true, stdin is /dev/null: cat ends at once.
	r := runCmd(t, c, "cat; echo done")
	if r.stdout != "done\n" {
		t.Fatalf("got %q", r.stdout)
	}
	pid, _, cancel := background(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"5"}}})
	defer cancel()
	_, err := c.SendInput(context.Background(), connect.NewRequest(&pb.SendInputRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}},
	}))
	wantCode(t, err, connect.CodeFailedPrecondition)
	kill(t, c, pid)
}

func kill(t *testing.T, c processconnect.ProcessClient, pid uint32) {
	t.Helper()
	_, err := c.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		Signal:  pb.Signal_SIGNAL_SIGKILL,
	}))
	if err != nil {
		t.Fatalf("SendSignal: %v", err)
	}
}

func TestPTY(t *testing.T) {
	c := sharedInstance(t).process()
	pid, s, cancel := background(t, c, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"--norc", "--noprofile", "-i"},
			Envs: map[string]string{"PS1": "$ ", "TERM": "xterm"}},
		Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	})
	defer cancel()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	// Output arrives on its own goroutine; out accumulates it.
	outc := make(chan string, 100)
	done := make(chan *pb.ProcessEvent_EndEvent, 1)
	go func() {
		for s.Receive() {
			ev := s.Msg().GetEvent()
			if d := ev.GetData(); d != nil {
				if len(d.GetStdout()) > 0 || len(d.GetStderr()) > 0 {
					outc <- "UNEXPECTED-PIPE-OUTPUT"
				}
				outc <- string(d.GetPty())
			}
			if ev.GetEnd() != nil {
				done <- ev.GetEnd()
				return
			}
		}
		close(done)
	}()
	var out strings.Builder
	expect := func(want string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for !strings.Contains(out.String(), want) {
			select {
			case chunk := <-outc:
				out.WriteString(chunk)
			case <-deadline:
				t.Fatalf("terminal output %q does not contain %q", out.String(), want)
			}
		}
	}
	input := func(s string) {
		t.Helper()
		_, err := c.SendInput(context.Background(), connect.NewRequest(&pb.SendInputRequest{
			Process: sel,
			Input:   &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(s)}},
		}))
		if err != nil {
			t.Fatalf("SendInput: %v", err)
		}
	}
	input("tty; echo pty-$((40+2))\n")
	expect("pty-42")
	if !strings.Contains(out.String(), "/dev/pts/") {
		t.Errorf("tty output %q does not name a pts", out.String())
	}
	input("stty size\n")
	expect("24 80")
	_, err := c.Update(context.Background(), connect.NewRequest(&pb.UpdateRequest{
		Process: sel,
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 40}},
	}))
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	input("stty size\n")
	expect("40 100")
	// CloseStdin is for pipes; a terminal takes Ctrl-D.
	_, err = c.CloseStdin(context.Background(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	wantCode(t, err, connect.CodeFailedPrecondition)
	input("exit 5\n")
	select {
	case end := <-done:
		if end.GetExitCode() != 5 {
			t.Fatalf("end = %v, want exit 5", end)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no end event after exit")
	}
}

func TestUpdateWithoutPTY(t *testing.T) {
	c := sharedInstance(t).process()
	pid, _, cancel := background(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"5"}}})
	defer cancel()
	_, err := c.Update(context.Background(), connect.NewRequest(&pb.UpdateRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 10, Rows: 10}},
	}))
	wantCode(t, err, connect.CodeFailedPrecondition)
	kill(t, c, pid)
}

func TestConnectListAndSignal(t *testing.T) {
	c := sharedInstance(t).process()
	tag := "tag-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pid, _, cancel := background(t, c, &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "for i in $(seq 100); do echo tick $i; sleep 0.1; done"}},
		Tag:     &tag,
	})
	// Leaving the Start stream does not stop the process.
	cancel()

	list, err := c.List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid {
			found = true
			if p.GetTag() != tag || p.GetConfig().GetCmd() != "/bin/bash" {
				t.Errorf("listed %v", p)
			}
		}
	}
	if !found {
		t.Fatalf("pid %d not in List: %v", pid, list.Msg)
	}

	ctx, cancelConn := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelConn()
	s, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || s.Msg().GetEvent().GetStart().GetPid() != pid {
		t.Fatalf("Connect: first event %v, err %v", s.Msg(), s.Err())
	}
	if !s.Receive() || !strings.Contains(string(s.Msg().GetEvent().GetData().GetStdout()), "tick") {
		t.Fatalf("Connect: second event %v, err %v", s.Msg(), s.Err())
	}
	_, err = c.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}},
		Signal:  pb.Signal_SIGNAL_SIGTERM,
	}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if r.end.GetExited() || r.end.GetStatus() != "signal: terminated" || r.end.GetExitCode() != -1 {
		t.Fatalf("end = %v, want signal: terminated", r.end)
	}
	waitFor(t, 5*time.Second, "process to leave List", func() bool {
		list, err := c.List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Msg.GetProcesses() {
			if p.GetPid() == pid {
				return false
			}
		}
		return true
	})
	_, err = c.Connect(context.Background(), connect.NewRequest(&pb.ConnectRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
	}))
	if err == nil {
		s, _ := c.Connect(context.Background(), connect.NewRequest(&pb.ConnectRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		}))
		for s.Receive() {
		}
		err = s.Err()
	}
	wantCode(t, err, connect.CodeNotFound)
}

func TestSigkill(t *testing.T) {
	c := sharedInstance(t).process()
	pid, s, cancel := background(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"30"}}})
	defer cancel()
	kill(t, c, pid)
	r, err := collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if r.end.GetStatus() != "signal: killed" || r.end.GetExited() {
		t.Fatalf("end = %v", r.end)
	}
}

func TestDeadlineKillsStartedProcess(t *testing.T) {
	c := sharedInstance(t).process()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	s, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "sleep 30"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	for s.Receive() {
		if p := s.Msg().GetEvent().GetStart().GetPid(); p != 0 {
			pid = p
		}
	}
	wantCode(t, s.Err(), connect.CodeDeadlineExceeded)
	if pid == 0 {
		t.Fatal("no start event")
	}
	waitFor(t, 5*time.Second, "the process to be killed", func() bool { return !sharedInstance(t).alive(int(pid)) })
}

func TestDeadlineOnConnectLeavesProcess(t *testing.T) {
	c := sharedInstance(t).process()
	pid, _, cancel := background(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"30"}}})
	defer cancel()
	ctx, cancelConn := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelConn()
	s, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	for s.Receive() {
	}
	wantCode(t, s.Err(), connect.CodeDeadlineExceeded)
	time.Sleep(200 * time.Millisecond)
	if !sharedInstance(t).alive(int(pid)) {
		t.Fatal("the Connect deadline killed the process")
	}
	kill(t, c, pid)
}

func TestKeepalive(t *testing.T) {
	c := sharedInstance(t).process(withHeader("Keepalive-Ping-Interval", "1"))
	r := runCmd(t, c, "sleep 2.5; echo done")
	if r.keepalives < 2 || r.stdout != "done\n" {
		t.Fatalf("got %d keepalives, stdout %q", r.keepalives, r.stdout)
	}
}

func TestBackgroundChildDoesNotHoldStream(t *testing.T) {
	c := sharedInstance(t).process()
	start := time.Now()
	// The background sleep keeps stdout open; the end event must not wait.
	r := runCmd(t, c, "sleep 20 & echo started")
	if r.stdout != "started\n" || r.end.GetExitCode() != 0 {
		t.Fatalf("got %q, %v", r.stdout, r.end)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

func TestH2C(t *testing.T) {
	in := sharedInstance(t)
	resp, err := in.h2cClient().Get(in.url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("got %s %d, want HTTP/2 204", resp.Proto, resp.StatusCode)
	}
}

func TestStreamInputOverH2C(t *testing.T) {
	in := sharedInstance(t)
	c := in.processH2C()
	pid, s, cancel := background(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/cat"}, Stdin: ptr(true)})
	defer cancel()
	stream := c.StreamInput(context.Background())
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	msgs := []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("one ")}}}}},
		{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("two\n")}}}}},
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.CloseAndReceive(); err != nil {
		t.Fatalf("StreamInput: %v", err)
	}
	if _, err := c.CloseStdin(context.Background(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	r, err := collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != "one two\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
}
