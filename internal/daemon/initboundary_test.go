package daemon_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/initlog"
	"github.com/moatdev/moat/internal/testutil"
)

// TestInitOutputCapped: root inside a sandbox writes 200 MiB to moat-init's stdout
// (/proc/1/fd/1: gVisor lets it; under runc the FIFO's host owner refuses the open),
// signals PID 1 and floods its port with bad requests, across a daemon restart. The host's log files of the sandbox stay under their cap, the drop is noted,
// and the daemon and the sandbox keep working.
func TestInitOutputCapped(t *testing.T) {
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) {
			e := newEnv(t) // its own: the test restarts it
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt})
			logPath := filepath.Join(e.dataDir, "logs", sb.ID+".log")
			onHost := func() int64 {
				var n int64
				for _, p := range []string{logPath, logPath + ".1"} {
					if fi, err := os.Stat(p); err == nil {
						n += fi.Size()
					}
				}
				return n
			}
			written := false
			flood := func(what string) {
				// 200 MiB straight into the daemon's pipe. Under runc, root inside may not
				// open it (the FIFO belongs to host root); under runsc it can.
				r := e.sh(sb.ID, "root", `if exec 4>/proc/1/fd/1; then head -c 200M /dev/zero | tr '\0' x >&4; echo written; else echo refused; fi`)
				switch r.stdout {
				case "written\n":
					written = true
				case "refused\n":
					t.Logf("%s: root inside cannot open /proc/1/fd/1: %s", what, strings.TrimSpace(r.stderr))
				default:
					t.Fatalf("%s: writing to /proc/1/fd/1: %+v", what, r)
				}
				// Signals to PID 1 and bad HTTP/2 prefaces on moat-init's port: lines moat-init
				// logs itself.
				t0 := time.Now()
				e.sh(sb.ID, "root", `for i in $(seq 100); do kill -HUP 1; done
for i in $(seq 100); do exec 3<>/dev/tcp/127.0.0.1/49983 || continue
  printf 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0garbage' >&3; timeout 0.5 head -c 1 <&3 >/dev/null; exec 3>&-; done`)
				t.Logf("%s: signals and bad requests took %v; %d bytes of log", what, time.Since(t0), onHost())
				if n := onHost(); n > 2*initlog.DefaultLimits.MaxBytes {
					t.Fatalf("%s: %d bytes of log on the host, cap %d", what, n, 2*initlog.DefaultLimits.MaxBytes)
				}
			}
			testutil.WaitFor(t, 10*time.Second, "moat-init's first line in the log", func() bool {
				b, _ := os.ReadFile(logPath)
				return strings.Contains(string(b), "moat-init serving")
			})
			start := time.Now()
			flood("first flood")
			e.stop()
			// No daemon reads the FIFO now: moat-init's lines about these signals meet
			// EPIPE, which must not end it.
			var killErr error
			bin, global, err := daemon.RuntimeArgs(e.runDir, testRuntimePaths())(rt) // the daemon's binary
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				// runsc's control socket lives in the sandbox's network namespace.
				out, err := exec.Command("nsenter", append([]string{"--net=" + filepath.Join(e.runDir, "sandboxes", sb.ID, "netns"), bin},
					append(global, "kill", sb.ID, "HUP")...)...).CombinedOutput()
				if err != nil {
					killErr = fmt.Errorf("%s kill HUP: %v: %s", rt, err, out)
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			e.start(filepath.Join(testutil.Binaries(t), "moat-init"), nil)
			if killErr != nil {
				t.Fatalf("signalling moat-init while no daemon reads its output: %v", killErr)
			}
			if got, err := e.c.Get(context.Background(), sb.ID); err != nil || got.State != "running" {
				t.Fatalf("after signals with no daemon reading its output: %+v, %v", got, err)
			}
			flood("after a daemon restart")
			elapsed := time.Since(start)

			// Two buckets (one per daemon), each a burst plus the rate over the time.
			lim := initlog.DefaultLimits
			n := onHost()
			if max := 2*lim.Burst + int64(elapsed.Seconds()+1)*lim.Rate; n > max {
				t.Errorf("%d bytes of log on the host after 400 MiB in %v, want at most %d", n, elapsed, max)
			}
			data, _ := os.ReadFile(logPath)
			old, _ := os.ReadFile(logPath + ".1")
			if written && !strings.Contains(string(old)+string(data), "bytes of output dropped") {
				t.Errorf("the log does not say that output was dropped")
			}
			t.Logf("%s: 400 MiB (written: %v) in %v left %d bytes on the host", rt, written, elapsed, n)
			if out := e.mustSh(sb.ID, "echo still serving"); out != "still serving\n" {
				t.Errorf("the sandbox after the flood: %q", out)
			}
			other := e.create(v1.CreateSandboxRequest{Runtime: rt})
			if out := e.mustSh(other.ID, "echo fine"); out != "fine\n" {
				t.Errorf("a new sandbox after the flood: %q", out)
			}
		})
	}
}

// TestAccessTokenNotInSandbox: the unprivileged user of a sandbox finds moat-init's
// access token in no process environment, command line or file it can read, and a files
// API call to moat-init with a wrong (or harvested) token is refused, under runc and
// runsc. (gVisor 2022-12 shows /proc/1/environ to every user: the token must not be there.)
func TestAccessTokenNotInSandbox(t *testing.T) {
	e := newEnv(t)
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt})
			rec, err := e.d.Manager.Get(context.Background(), sb.ID)
			if err != nil || len(rec.AccessToken) < 32 {
				t.Fatalf("the daemon's record of the token: %v", err)
			}
			token := rec.AccessToken

			// Every environment and command line the user can read, and PID 1's stdin.
			r := e.sh(sb.ID, "", `for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; echo; done
timeout 2 cat /proc/1/fd/0 2>/dev/null; echo; timeout 2 cat /proc/1/fd/3 2>/dev/null; true`)
			if r.code != 0 {
				t.Fatalf("reading /proc: %+v", r)
			}
			// gVisor 2022-12 shows PID 1's environment to every user (the premise of
			// this test there); a current gVisor, like Linux, does not.
			t.Logf("%s: PID 1's environment readable by the user: %v", rt, strings.Contains(r.stdout, "MOAT_ENV="))
			if strings.Contains(r.stdout, token) {
				t.Errorf("the token is readable in /proc")
			}
			// Every file the user can read outside /proc and /sys (the host's /usr is
			// read-only and shared, so it is left out).
			r = e.sh(sb.ID, "", "grep -rlsF -e "+token+" /etc /tmp /home /run /var /root /.moat /dev/shm /opt /srv 2>/dev/null; true")
			if out := strings.TrimSpace(r.stdout); out != "" {
				t.Errorf("files holding the token: %s", out)
			}

			// The attack: take whatever looks like a token from PID 1's environment, or a
			// wrong one, and write as root through moat-init's files API.
			r = e.sh(sb.ID, "", `tok=$(tr '\0' '\n' < /proc/1/environ 2>/dev/null | sed -n 's/^MOAT_ACCESS_TOKEN=//p')
for t in "$tok" wrong-token; do
  curl -s -o /dev/null -w '%{http_code} ' -X POST -H "X-Access-Token: $t" -H 'Content-Type: application/octet-stream' \
    --data-binary pwned 'http://127.0.0.1:49983/files?path=/root/pwned&username=root'
done`)
			if strings.TrimSpace(r.stdout) != "401 401" {
				t.Errorf("files API with a harvested and a wrong token: %q, want 401 401 (stderr %q)", r.stdout, r.stderr)
			}
			if r := e.sh(sb.ID, "root", "test -e /root/pwned && echo PWNED; true"); r.stdout != "" {
				t.Errorf("the unprivileged user wrote /root/pwned as root")
			}
			// The daemon itself still gets through with the real token.
			if out := e.mustSh(sb.ID, "echo ok"); out != "ok\n" {
				t.Errorf("exec through the daemon: %q", out)
			}
		})
	}
}

// TestOlderDaemonSandboxStopped: a running sandbox a moat from before the output FIFO
// started (its token in moat-init's environment, its output an uncapped file, its directory
// open to host users) is not adopted by a new daemon: it is stopped with the reason, and
// starting it again sets it up as a new one.
func TestOlderDaemonSandboxStopped(t *testing.T) {
	e := newEnv(t) // its own: the test restarts it
	sb := e.create(v1.CreateSandboxRequest{Runtime: "runc"})
	fifo := filepath.Join(e.runDir, "sandboxes", sb.ID, "init.fifo")
	e.stop()
	// What an older daemon leaves: no FIFO in the sandbox's directory.
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), nil)
	ctx := context.Background()
	got, err := e.c.Get(ctx, sb.ID)
	if err != nil || got.State != "stopped" || !strings.Contains(got.Error, "older moat") {
		t.Fatalf("a sandbox of an older daemon after restart: %+v, %v; want stopped, saying why", got, err)
	}
	if got, err = e.c.Start(ctx, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("start: %+v, %v", got, err)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode().Type() != os.ModeNamedPipe {
		t.Fatalf("restarted sandbox has no output FIFO: %v", err)
	}
	if out := e.mustSh(sb.ID, "echo ok"); out != "ok\n" {
		t.Fatalf("exec after start: %q", out)
	}
}
