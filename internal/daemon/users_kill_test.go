package daemon_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	bin := testutil.Binaries(t)
	for _, point := range []string{"user-recorded", "user-removed-inside"} {
		t.Run(point, func(t *testing.T) {
			data := t.TempDir()
			run := "/run/moat-test-" + shortID()
			sock := filepath.Join(run, "moat.sock")
			idBase := strconv.FormatUint(uint64(testutil.IDBase(t)), 10)
			defer os.RemoveAll(run)
			c := sdk.NewUnix(sock)
			ctx := context.Background()
			start := func(failpoint string) *exec.Cmd {
				cmd := exec.Command(filepath.Join(bin, "moat"), "serve", "--data", data, "--run-dir", run, "--socket", sock,
					"--warm", "0", "--id-base", idBase)
				cmd.Env = append(os.Environ(), daemon.KillFailpointEnv+"="+failpoint)
				cmd.Stderr = testWriter{t}
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				testutil.WaitFor(t, 20*time.Second, "daemon socket", func() bool { return c.Ping(ctx) == nil })
				return cmd
			}
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
