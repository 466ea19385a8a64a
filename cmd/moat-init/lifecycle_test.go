package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/moatdev/moat/api/envd/filesystem"
	pb "github.com/moatdev/moat/api/envd/process"
)

func TestRefusesToStartWithoutToken(t *testing.T) {
	for name, env := range map[string][]string{
		"no token":     {"PATH=/usr/bin:/bin"},
		"empty token":  {"MOAT_ACCESS_TOKEN="},
		"bad MOAT_ENV": {"MOAT_ACCESS_TOKEN=x", "MOAT_ENV=[1,2]"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(binPath, "-addr", "127.0.0.1:0")
			cmd.Env = env
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("moat-init started: %s", out)
			}
			if strings.Contains(string(out), "x\n") || strings.Contains(string(out), "=x") {
				t.Errorf("log shows the token: %s", out)
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
	if err != nil || !alive(orphan) {
		t.Fatalf("no orphan: %q", r.stdout)
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
	for _, pid := range []int{int(pid1), int(pid2), orphan} {
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
