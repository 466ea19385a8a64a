package main

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/moatdev/moat/api/envd/process"
)

// TestSendSignalInterrupt: SIGNAL_SIGINT (moat's addition to envd's enum) reaches the
// process group as a terminal's ^C does: the shell's child (sleep) ends, the shell's trap
// runs and sets the exit code.
func TestSendSignalInterrupt(t *testing.T) {
	c := sharedInstance(t).process()
	pid, s, cancel := background(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash",
		Args: []string{"-c", `trap 'echo trapped; exit 4' INT; echo ready; while :; do sleep 10; done`}}})
	defer cancel()
	if !s.Receive() || !strings.Contains(string(s.Msg().GetEvent().GetData().GetStdout()), "ready") {
		t.Fatalf("first output %v, err %v", s.Msg(), s.Err())
	}
	// Signals outside the enum stay refused.
	_, err := c.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		Signal:  pb.Signal(10),
	}))
	wantCode(t, err, connect.CodeInvalidArgument)
	if _, err := c.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}},
		Signal:  pb.Signal_SIGNAL_SIGINT,
	})); err != nil {
		t.Fatalf("SendSignal SIGINT: %v", err)
	}
	r, err := collect(s)
	if err != nil {
		t.Fatal(err)
	}
	if r.stdout != "trapped\n" || !r.end.GetExited() || r.end.GetExitCode() != 4 {
		t.Fatalf("after SIGINT: stdout %q, end %v; want the trap's output and exit 4", r.stdout, r.end)
	}
}
