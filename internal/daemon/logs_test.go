package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/moatdev/moat/api/envd/process"
	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
)

// TestBackgroundLogs: on each runtime, a background command started through the process API
// (E2B's commands.run with background: true: Start, then the client goes away) keeps running,
// and GET /v1/sandboxes/{id}/logs lists it and returns what it wrote after its client left,
// stdout and stderr apart; follow=1 streams until it ends, with its exit status last. A tag
// selects it too.
func TestBackgroundLogs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt})
			// The command waits for a file the test makes after the client left, then
			// writes and ends.
			tag := "server-" + rt
			bctx, bcancel := context.WithCancel(ctx)
			stream, err := e.c.Process(sb.ID, "").Start(bctx, connect.NewRequest(&process.StartRequest{
				Tag: &tag,
				Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c",
					`echo started; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo out-after-client-left; echo err-line >&2; while [ ! -e /tmp/end ]; do sleep 0.1; done; echo bye; exit 3`}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
				t.Fatalf("no start event: %v", stream.Err())
			}
			pid := stream.Msg().GetEvent().GetStart().GetPid()
			bcancel()
			stream.Close()
			e.mustSh(sb.ID, "touch /tmp/go")

			var out, errOut strings.Builder
			read := func(follow bool) *v1.ProcessLog {
				t.Helper()
				out.Reset()
				errOut.Reset()
				var end *v1.ProcessLog
				err := e.c.Logs(ctx, sb.ID, pid, "", follow, func(ch v1.LogChunk) error {
					switch {
					case ch.End != nil:
						end = ch.End
					case ch.Stream == "stderr":
						errOut.Write(ch.Data)
					default:
						out.Write(ch.Data)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return end
			}
			testutil.WaitFor(t, 10*time.Second, "the background command's output", func() bool {
				read(false)
				return strings.Contains(out.String(), "out-after-client-left") && errOut.String() == "err-line\n"
			})
			if out.String() != "started\nout-after-client-left\n" {
				t.Errorf("stdout kept: %q", out.String())
			}
			list, err := e.c.ProcessLogs(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			var found *v1.ProcessLog
			for i := range list {
				if list[i].PID == pid {
					found = &list[i]
				}
			}
			if found == nil || !found.Running || found.Tag != tag || found.Cmd != "/bin/sh" || found.Bytes != int64(len("started\nout-after-client-left\nerr-line\n")) {
				t.Fatalf("the process list: %+v", list)
			}
			// Follow: the stream stays open until the command ends.
			done := make(chan *v1.ProcessLog, 1)
			go func() { done <- read(true) }()
			select {
			case end := <-done:
				t.Fatalf("follow ended while the command runs: %+v", end)
			case <-time.After(300 * time.Millisecond):
			}
			e.mustSh(sb.ID, "touch /tmp/end")
			select {
			case end := <-done:
				if end == nil || end.Running || end.ExitCode == nil || *end.ExitCode != 3 || !strings.HasSuffix(out.String(), "bye\n") {
					t.Errorf("followed to the end: %+v, stdout %q", end, out.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("follow did not end with the command")
			}
			// By tag, after the end.
			var byTag strings.Builder
			if err := e.c.Logs(ctx, sb.ID, 0, tag, false, func(ch v1.LogChunk) error { byTag.Write(ch.Data); return nil }); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(byTag.String(), "bye") {
				t.Errorf("logs by tag: %q", byTag.String())
			}
			if err := e.c.Logs(ctx, sb.ID, 999999, "", false, func(v1.LogChunk) error { return nil }); !isNotFound(err) {
				t.Errorf("logs of an unknown pid: %v", err)
			}
		})
	}
}
