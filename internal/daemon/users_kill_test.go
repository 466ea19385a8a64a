package daemon_test

import (
	"bytes"
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestUsersKill9: a daemon killed with SIGKILL between recording a new user and making it
// inside, or between removing a user inside and dropping it from the record, leaves the
// record the truth: after a restart the recorded user exists inside (exec as it works), and
// a removal cut short can be done again.
func TestUsersKill9(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, point := range []string{"user-recorded", "user-removed-inside"} {
		t.Run(point, func(t *testing.T) {
			p := newServeProcess(t)
			data, run := p.data, p.run
			c := sdk.NewUnix(p.sock)
			ctx := context.Background()
			start := func(failpoint string) *exec.Cmd { return p.start(0, daemon.KillFailpointEnv+"="+failpoint) }
			whoami := func(id, user string) (string, error) {
				var out bytes.Buffer
				_, err := c.Exec(ctx, id, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "id -un"}, User: user, Stdout: &out})
				return out.String(), err
			}
			d := start("")
			var sb *v1.Sandbox
			defer func() {
				if sb != nil {
					_ = c.Delete(ctx, sb.ID)
					testutil.WaitFor(t, 60*time.Second, "deletion", func() bool { l, _ := c.List(ctx); return len(l) == 0 })
				}
				_ = d.Process.Signal(syscall.SIGTERM)
				_ = d.Wait()
				if sb != nil {
					e := &env{t: t, dataDir: data, runDir: run}
					e.assertNoLeaks([]v1.Sandbox{*sb})
				}
			}()
			sb, err := c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if point == "user-removed-inside" {
				if _, err := c.AddUser(ctx, sb.ID, v1.UserRequest{Name: "kim"}); err != nil {
					t.Fatal(err)
				}
			}
			_ = d.Process.Signal(syscall.SIGTERM)
			_ = d.Wait()
			d = start(point)
			if point == "user-recorded" {
				_, err = c.AddUser(ctx, sb.ID, v1.UserRequest{Name: "kim"})
			} else {
				err = c.RemoveUser(ctx, sb.ID, "kim", false)
			}
			if err == nil {
				t.Fatalf("the failpoint %s was not reached", point)
			}
			if st, _ := d.Process.Wait(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("daemon ended %v, want killed at the failpoint", st)
			}
			d = start("")
			list, err := c.Users(ctx, sb.ID)
			if err != nil || len(list.Users) != 1 || list.Users[0].Name != "kim" {
				t.Fatalf("users after the restart: %+v %v", list, err)
			}
			if out, err := whoami(sb.ID, "kim"); err != nil || out != "kim\n" {
				t.Fatalf("kim after the restart: %q %v (the record was not re-applied)", out, err)
			}
			if err := c.RemoveUser(ctx, sb.ID, "kim", false); err != nil {
				t.Fatal(err)
			}
			if _, err := whoami(sb.ID, "kim"); err == nil {
				t.Fatal("kim still there after the removal")
			}
		})
	}
}
