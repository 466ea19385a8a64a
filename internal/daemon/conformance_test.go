package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestConformance runs the same sandbox behaviour checks against every runtime on this host.
func TestConformance(t *testing.T) {
	e := newEnv(t)
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) {
			e := *e
			e.t = t
			conformance(t, &e, rt)
		})
	}
}

func conformance(t *testing.T, e *env, rt string) {
	sb := e.create(v1.CreateSandboxRequest{Runtime: rt, Env: map[string]string{"GREETING": "hello from env"}})
	if sb.State != "running" || sb.Runtime != rt {
		t.Fatalf("new sandbox: %+v", sb)
	}

	t.Run("exec", func(t *testing.T) {
		e := *e
		e.t = t
		if out := e.mustSh(sb.ID, "echo hi; echo err >&2"); out != "hi\n" {
			t.Errorf("stdout %q", out)
		}
		if r := e.sh(sb.ID, "", "exit 3"); r.code != 3 {
			t.Errorf("exit 3: got %d", r.code)
		}
		r := e.sh(sb.ID, "", "no-such-command-xyz")
		if r.code != 127 || !strings.Contains(r.stderr, "command not found") {
			t.Errorf("missing command: code %d stderr %q", r.code, r.stderr)
		}
		if out := e.mustSh(sb.ID, "echo $GREETING"); out != "hello from env\n" {
			t.Errorf("sandbox env: %q", out)
		}
		if out := e.mustSh(sb.ID, "id -un; pwd"); out != "user\n/home/user\n" {
			t.Errorf("default user and cwd: %q", out)
		}
		if r := e.sh(sb.ID, "root", "id -u"); r.stdout != "0\n" {
			t.Errorf("root: %+v", r)
		}
	})

	t.Run("files", func(t *testing.T) {
		e := *e
		e.t = t
		ctx := context.Background()
		data := bytes.Repeat([]byte("moat\n"), 10000)
		if err := e.c.WriteFile(ctx, sb.ID, "notes/a.txt", "", bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if out := e.mustSh(sb.ID, "stat -c '%U %s' /home/user/notes/a.txt"); out != "user 50000\n" {
			t.Errorf("written file: %q", out)
		}
		rc, err := e.c.ReadFile(ctx, sb.ID, "/home/user/notes/a.txt", "")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, data) {
			t.Errorf("read back %d bytes, want %d", len(got), len(data))
		}
		if _, err := e.c.ReadFile(ctx, sb.ID, "/nope", ""); !isNotFound(err) {
			t.Errorf("missing file: %v", err)
		}
		// Escapes are resolved inside the sandbox: the host's files are out of reach.
		canary := "moat-escape-canary-" + shortID()
		for _, p := range []string{"../../../../../../tmp/" + canary, "/../../tmp/" + canary} {
			if err := e.c.WriteFile(ctx, sb.ID, p, "root", strings.NewReader("x")); err != nil {
				t.Errorf("write %s: %v", p, err)
			}
		}
		if _, err := os.Stat("/tmp/" + canary); err == nil {
			os.Remove("/tmp/" + canary)
			t.Fatalf("a file write escaped to the host's /tmp")
		}
		e.mustSh(sb.ID, "test -f /tmp/"+canary)
		// A symlink inside pointing at a host path stays inside.
		e.mustSh(sb.ID, "ln -s /etc /home/user/hostetc")
		if err := e.c.WriteFile(ctx, sb.ID, "/home/user/hostetc/"+canary, "root", strings.NewReader("x")); err != nil {
			t.Errorf("write through symlink: %v", err)
		}
		if _, err := os.Stat("/etc/" + canary); err == nil {
			os.Remove("/etc/" + canary)
			t.Fatalf("a write through a symlink reached the host's /etc")
		}
	})

	t.Run("isolation", func(t *testing.T) {
		e := *e
		e.t = t
		isolation(t, &e, sb, rt)
	})

	t.Run("stop-start", func(t *testing.T) {
		e := *e
		e.t = t
		e.mustSh(sb.ID, "echo persisted > /home/user/keep.txt; sudo -n true 2>/dev/null; nohup sleep 1000 >/dev/null 2>&1 &")
		ctx := context.Background()
		st, err := e.c.Stop(ctx, sb.ID)
		if err != nil || st.State != "stopped" {
			t.Fatalf("stop: %v %+v", err, st)
		}
		if _, err := e.c.ReadFile(ctx, sb.ID, "/home/user/keep.txt", ""); err == nil {
			t.Errorf("a stopped sandbox served a file")
		}
		st, err = e.c.Start(ctx, sb.ID)
		if err != nil || st.State != "running" {
			t.Fatalf("start: %v %+v", err, st)
		}
		if out := e.mustSh(sb.ID, "cat /home/user/keep.txt; pgrep -c sleep || true"); out != "persisted\n0\n" {
			t.Errorf("after restart: %q (drive kept, processes gone)", out)
		}
	})

	t.Run("delete", func(t *testing.T) {
		e := *e
		e.t = t
		ctx := context.Background()
		if err := e.c.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		e.d.Manager.Wait()
		if _, err := e.c.Get(ctx, sb.ID); !isNotFound(err) {
			t.Errorf("deleted sandbox still listed: %v", err)
		}
		e.assertNoLeaks([]v1.Sandbox{*sb})
	})

	t.Run("limits", func(t *testing.T) {
		e := *e
		e.t = t
		limits(t, &e, rt)
	})
}

// isolation asserts the kernel and filesystem boundary from outside and inside.
func isolation(t *testing.T, e *env, sb *v1.Sandbox, rt string) {
	// Host canaries in /root, /etc and the data directory must be invisible inside.
	name := "moat-canary-" + shortID()
	canaries := []string{"/root/" + name, "/etc/" + name, filepath.Join(e.dataDir, name)}
	for _, c := range canaries {
		if err := os.WriteFile(c, []byte("secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(c)
	}
	for _, c := range canaries {
		if r := e.sh(sb.ID, "root", "cat "+c); r.code == 0 || strings.Contains(r.stdout, "secret") {
			t.Errorf("host file %s readable inside: %+v", c, r)
		}
	}
	// The synthesized /etc: no host accounts or keys.
	passwd := e.mustSh(sb.ID, "cat /etc/passwd")
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	if passwd == string(hostPasswd) {
		t.Errorf("sandbox sees the host's /etc/passwd")
	}
	if r := e.sh(sb.ID, "root", "ls /etc/ssh /etc/ssl/private 2>/dev/null | head -1"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("host ssh or ssl private keys visible: %q", r.stdout)
	}
	// Host processes are invisible: only the sandbox's own few processes exist.
	ps := e.mustSh(sb.ID, "ps -e -o comm=")
	if strings.Contains(ps, "go") && strings.Contains(ps, ".test") || strings.Count(ps, "\n") > 10 {
		t.Errorf("host processes visible:\n%s", ps)
	}
	status := e.mustSh(sb.ID, "cat /proc/self/status")
	switch rt {
	case "runsc":
		if out := e.mustSh(sb.ID, "dmesg 2>/dev/null | head -1"); !strings.Contains(out, "gVisor") {
			t.Errorf("runsc sandbox does not run on gVisor's kernel: %q", out)
		}
	default:
		uidMap := e.mustSh(sb.ID, "cat /proc/self/uid_map")
		f := strings.Fields(uidMap)
		if len(f) != 3 || f[0] != "0" || f[1] != strconv.FormatUint(uint64(sb.HostUID), 10) || f[2] != "65536" {
			t.Errorf("uid_map %q: want 0 %d 65536 (not identity)", uidMap, sb.HostUID)
		}
		if sb.HostUID < 0x40000000 {
			t.Errorf("host uid %d is not in moat's range", sb.HostUID)
		}
		if !strings.Contains(status, "Seccomp:\t2") {
			t.Errorf("seccomp not in filter mode:\n%s", status)
		}
		if want := capMask(); !strings.Contains(status, "CapBnd:\t"+want) {
			t.Errorf("bounding set is not %s:\n%s", want, grepLines(status, "Cap"))
		}
		// A process started by root inside holds no more than the designed set, and
		// the unprivileged user none at all.
		if out := e.mustSh(sb.ID, "grep CapEff /proc/self/status"); !strings.Contains(out, "0000000000000000") {
			t.Errorf("user has capabilities: %s", out)
		}
		// From the host: the sandbox's processes run as its unprivileged host uid range.
		if pids := processesInRange(sb.HostUID, 65536); len(pids) == 0 {
			t.Errorf("no host process runs as uid %d", sb.HostUID)
		}
		// mount and unshare are refused even to root inside.
		if r := e.sh(sb.ID, "root", "mount -t tmpfs none /mnt"); r.code == 0 {
			t.Errorf("mount succeeded inside")
		}
		if r := e.sh(sb.ID, "root", "unshare -U true"); r.code == 0 {
			t.Errorf("unshare succeeded inside")
		}
	}
	// No route out: only the link to the gateway.
	routes := e.mustSh(sb.ID, "cat /proc/net/route")
	for _, line := range strings.Split(routes, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 1 && f[1] == "00000000" {
			t.Errorf("default route inside: %s", line)
		}
	}
}

// capMask is the designed capability set as /proc shows it.
func capMask() string {
	// CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4, KILL 5, SETGID 6, SETUID 7, SETPCAP 8,
	// NET_BIND_SERVICE 10, SYS_CHROOT 18, AUDIT_WRITE 29, SETFCAP 31.
	var m uint64
	for _, c := range []uint{0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 29, 31} {
		m |= 1 << c
	}
	return fmt.Sprintf("%016x", m)
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// limits: a memory bomb, a fork bomb and a disk fill each stop at the sandbox's own limit,
// and the daemon keeps serving.
func limits(t *testing.T, e *env, rt string) {
	sb := e.create(v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 128 << 20, Pids: 64, DiskBytes: 128 << 20})
	defer e.c.Delete(context.Background(), sb.ID)

	t.Run("memory", func(t *testing.T) {
		r := e.sh(sb.ID, "", `python3 -c 'b = bytearray(1 << 30); print("allocated")'`)
		if r.code == 0 || strings.Contains(r.stdout, "allocated") {
			t.Errorf("1 GiB allocation in a 128 MiB sandbox succeeded: %+v", r)
		}
		if err := e.c.Ping(context.Background()); err != nil {
			t.Fatalf("daemon hurt by a sandbox's memory bomb: %v", err)
		}
		e.mustSh(sb.ID, "true")
	})

	t.Run("pids", func(t *testing.T) {
		r := e.sh(sb.ID, "", `for i in $(seq 200); do sleep 30 & done 2>/dev/null; pgrep -c sleep; pkill sleep; true`)
		n, _ := strconv.Atoi(strings.TrimSpace(r.stdout))
		if n == 0 || n >= 64 {
			t.Errorf("fork bomb reached %d processes with a limit of 64 (%+v)", n, r)
		}
		e.mustSh(sb.ID, "true")
	})

	t.Run("disk", func(t *testing.T) {
		before := freeBytes(t, e.dataDir)
		r := e.sh(sb.ID, "", `dd if=/dev/zero of=/home/user/fill bs=1M count=512 2>&1; sync; stat -c %s /home/user/fill`)
		if r.code != 0 && !strings.Contains(r.stdout, "No space left") {
			t.Logf("dd: %+v", r)
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		size, _ := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		if size == 0 || size >= 128<<20 {
			t.Errorf("disk fill wrote %d bytes with a 128 MiB limit:\n%s", size, r.stdout)
		}
		if used := before - freeBytes(t, e.dataDir); used > 160<<20 {
			t.Errorf("host lost %d MiB of free space to a 128 MiB drive", used>>20)
		}
		e.mustSh(sb.ID, "rm /home/user/fill")
	})
}

func freeBytes(t *testing.T, dir string) int64 {
	var st syscallStatfs
	if err := statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// TestConcurrentCreateDelete creates and deletes many sandboxes at once: no leaks, no
// corrupted state.
func TestConcurrentCreateDelete(t *testing.T) {
	e := newEnv(t)
	const n = 8
	var wg sync.WaitGroup
	ids := make(chan string, n)
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := e.c.Create(context.Background(), v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
			if err != nil {
				errs <- err
				return
			}
			ids <- sb.ID
		}()
	}
	wg.Wait()
	close(ids)
	close(errs)
	for err := range errs {
		t.Errorf("create: %v", err)
	}
	var all []v1.Sandbox
	for id := range ids {
		sb, err := e.c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, *sb)
		if out := e.mustSh(id, "echo $((6*7))"); out != "42\n" {
			t.Errorf("%s: %q", id, out)
		}
	}
	seen := map[uint32]bool{}
	for _, sb := range all {
		if seen[sb.HostUID] {
			t.Errorf("two sandboxes share host uid %d", sb.HostUID)
		}
		seen[sb.HostUID] = true
	}
	for _, sb := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := e.c.Delete(context.Background(), sb.ID); err != nil {
				t.Errorf("delete %s: %v", sb.ID, err)
			}
		}()
	}
	wg.Wait()
	e.d.Manager.Wait()
	if list, _ := e.c.List(context.Background()); len(list) != 0 {
		t.Errorf("after deleting all: %d listed", len(list))
	}
	e.assertNoLeaks(all)
}
