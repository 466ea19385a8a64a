package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/moatdev/moat/api/envd/filesystem"
	pb "github.com/moatdev/moat/api/envd/process"
)

// TestRefusesToStartWithoutToken: the token comes on stdin, to its end, and nowhere
// else; MOAT_ACCESS_TOKEN (where it used to be) is never used.
func TestRefusesToStartWithoutToken(t *testing.T) {
	long := strings.Repeat("x", maxTokenBytes+1)
	for name, tc := range map[string]struct {
		stdin string
		env   []string
	}{
		"no token":          {"", nil},
		"blank token":       {" \n", nil},
		"token only in env": {"", []string{"MOAT_ACCESS_TOKEN=xtok"}},
		"token too long":    {long, nil},
		"bad MOAT_ENV":      {"xtok", []string{"MOAT_ENV=[1,2]"}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := troot.command(testUser.home, []string{"-addr", "127.0.0.1:0"}, append([]string{"PATH=/usr/bin:/bin"}, tc.env...))
			cmd.Stdin = strings.NewReader(tc.stdin)
			done := make(chan struct{})
			go func() {
				select {
				case <-ctx.Done():
					_ = cmd.Process.Kill()
				case <-done:
				}
			}()
			out, err := cmd.CombinedOutput()
			close(done)
			if err == nil || strings.Contains(string(out), "moat-init serving") {
				t.Fatalf("moat-init started: %s", out)
			}
			if strings.Contains(string(out), "launcher") {
				t.Fatalf("the test launcher failed: %s", out)
			}
			if strings.Contains(string(out), "xtok") || strings.Contains(string(out), "xxxx") {
				t.Errorf("log shows the token: %s", out)
			}
		})
	}
}

// TestTokenNotInSandbox: once moat-init serves, the token is in no process environment
// (not even PID 1's) and no longer reachable through its stdin.
func TestTokenNotInSandbox(t *testing.T) {
	in := startInstance(t, "MOAT_DEFAULT_USER=root")
	r := runCmd(t, in.process(), `cat /proc/1/environ /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'; echo; readlink /proc/1/fd/0; cat /proc/1/fd/0`)
	if strings.Contains(r.stdout, in.token) {
		t.Errorf("the token is readable inside:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "/dev/null") {
		t.Errorf("PID 1's stdin is not /dev/null:\n%s", r.stdout)
	}
}

// TestRefusesOutsideSandbox: moat-init started on a host's root — as these tests once
// started it, or as PID 1 of a PID namespace of its own (`unshare -pf`) — refuses with a
// clear message and changes nothing. It runs in a private mount namespace whose /etc is
// a copy, so that a regression shows in the copy and never damages the host.
func TestRefusesOutsideSandbox(t *testing.T) {
	for name, pid1 := range map[string]bool{"as a host process": false, "as PID 1 on the host's root": true} {
		t.Run(name, func(t *testing.T) {
			before := snapshotHost(hostFiles)
			etc := filepath.Join(t.TempDir(), "etc")
			if out, err := exec.Command("cp", "-a", "/etc", etc).CombinedOutput(); err != nil {
				t.Fatalf("copying /etc: %v: %s", err, out)
			}
			var copies []string
			for _, f := range hostFiles {
				copies = append(copies, filepath.Join(etc, strings.TrimPrefix(f, "/etc/")))
			}
			copyBefore := snapshotHost(copies)
			token := "tok-" + rand.Text()
			// The token both ways: on stdin as now, and in the environment as the old
			// daemon passed it, so that no version of moat-init fails for want of it.
			cmd := shadowEtcCommand(etc, pid1, []string{"-addr", "127.0.0.1:0"},
				[]string{"PATH=/usr/bin:/bin", "MOAT_ACCESS_TOKEN=" + token, "MOAT_CA_PEM=not a certificate"})
			cmd.Stdin = strings.NewReader(token)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var err error
			select {
			case err = <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				err = <-exited
				t.Errorf("moat-init did not refuse (it kept running)")
			}
			if err == nil {
				t.Errorf("moat-init exited 0")
			}
			if !strings.Contains(out.String(), "moat-init runs only as PID 1 of a moat sandbox") {
				t.Errorf("no clear refusal; output:\n%s", out.String())
			}
			if strings.Contains(out.String(), "launcher") {
				t.Fatalf("the test launcher failed: %s", out.String())
			}
			if changed := hostChanges(copyBefore, snapshotHost(copies)); len(changed) > 0 {
				t.Errorf("moat-init changed /etc (the copy): %s", strings.Join(changed, "; "))
			}
			if _, err := os.Stat(filepath.Join(etc, "moat")); err == nil {
				t.Errorf("moat-init installed its CA into /etc (the copy)")
			}
			if changed := hostChanges(before, snapshotHost(hostFiles)); len(changed) > 0 {
				t.Errorf("the host changed: %s", strings.Join(changed, "; "))
			}
		})
	}
}

func TestTokenNotLogged(t *testing.T) {
	in := startInstance(t, "MOAT_DEFAULT_USER="+testUser.name)
	runCmd(t, in.process(), "true")
	in.filesystem().Stat(context.Background(), connect.NewRequest(&fspb.StatRequest{Path: "/"}))
	http.Get(in.url + "/files?path=/etc/hostname&signature=v1_x")
	if strings.Contains(in.logs(), in.token) {
		t.Fatal("the access token appears in the log")
	}
}

// childrenOf returns the pids whose parent is pid, with their states.
func childrenOf(pid int) map[int]byte {
	out := map[int]byte{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+2:])
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out[n] = f[0][0]
			}
		}
	}
	return out
}

func TestReapsOrphans(t *testing.T) {
	in := startInstance(t, "MOAT_DEFAULT_USER="+testUser.name)
	// The subshell's sleep is orphaned and reparented to moat-init (a child
	// subreaper when not PID 1), which must reap it when it exits.
	r := runCmd(t, in.process(), "(sleep 0.3 >/dev/null 2>&1 &); echo spawned")
	if r.stdout != "spawned\n" {
		t.Fatalf("got %q", r.stdout)
	}
	pid := in.cmd.Process.Pid
	waitFor(t, 3*time.Second, "the orphan to be adopted", func() bool { return len(childrenOf(pid)) > 0 })
	waitFor(t, 5*time.Second, "the orphan to be reaped", func() bool { return len(childrenOf(pid)) == 0 })
}

func TestSIGTERMStopsEverything(t *testing.T) {
	in := startInstance(t, "MOAT_DEFAULT_USER="+testUser.name)
	c := in.process()
	// One process exits on SIGTERM; one ignores it and must be killed.
	pid1, _, cancel1 := background(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"60"}}})
	defer cancel1()
	pid2, s2, cancel2 := background(t, c, &pb.StartRequest{Process: &pb.ProcessConfig{
		Cmd: "/bin/bash", Args: []string{"-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"}}})
	defer cancel2()
	if !s2.Receive() || string(s2.Msg().GetEvent().GetData().GetStdout()) != "ready\n" {
		t.Fatalf("trap process not ready: %v", s2.Err())
	}
	// A background grandchild outlives its parent shell.
	r := runCmd(t, c, "sleep 60 >/dev/null 2>&1 & echo $!")
	orphan, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil || !in.alive(orphan) {
		t.Fatalf("no orphan: %q", r.stdout)
	}
	var hostPIDs []int
	for _, pid := range []int{int(pid1), int(pid2), orphan} {
		hostPIDs = append(hostPIDs, hostPID(in.cmd.Process.Pid, pid))
	}
	start := time.Now()
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-in.done:
	case <-time.After(15 * time.Second):
		t.Fatal("moat-init did not exit after SIGTERM")
	}
	if err := in.exitErr(); err != nil {
		t.Errorf("moat-init exited with %v\n%s", err, in.logs())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	// Checked by host pid: the sandbox's PID namespace ends with moat-init.
	for _, pid := range hostPIDs {
		if alive(pid) {
			t.Errorf("pid %d survived moat-init", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// rss reads the resident set of pid in KiB: total, anonymous and file.
func rss(t *testing.T, pid int) (total, anon, file int) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch k {
		case "VmRSS":
			total = n
		case "RssAnon":
			anon = n
		case "RssFile":
			file = n
		}
	}
	return total, anon, file
}

// TestIdleRSS reports moat-init's resident memory when idle after a few
// requests (run with -v to see it), and fails past generous bounds.
func TestIdleRSS(t *testing.T) {
	if os.Getenv("MOAT_INIT_RACE") != "" {
		t.Skip("the race detector inflates memory")
	}
	in := startInstanceArgs(t, []string{"-idle-trim", "1s", "-log-level", "info"}, "MOAT_DEFAULT_USER="+testUser.name)
	pid := in.cmd.Process.Pid
	time.Sleep(500 * time.Millisecond)
	t0, a0, f0 := rss(t, pid)
	t.Logf("after start: VmRSS %d KiB (anon %d, file %d)", t0, a0, f0)

	for i := 0; i < 5; i++ {
		runCmd(t, in.process(), "echo hi")
		if _, err := in.filesystem().ListDir(context.Background(), connect.NewRequest(&fspb.ListDirRequest{Path: "/etc"})); err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(in.url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(3 * time.Second)
	t1, a1, f1 := rss(t, pid)
	t.Logf("idle after requests: VmRSS %d KiB (anon %d, file %d)", t1, a1, f1)
	if a1 > 6<<10 || t1 > 8<<10 {
		out, _ := exec.Command("sh", "-c", fmt.Sprintf(
			"awk '/^[0-9a-f]+-/{m=$0} /^Rss:/{if ($2>0) print $2, m}' /proc/%d/smaps | sort -rn | head", pid)).Output()
		t.Errorf("idle RSS %d KiB (anonymous %d KiB) exceeds 8 MiB (6 MiB); largest mappings:\n%s", t1, a1, out)
	}
}
