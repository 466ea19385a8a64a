package daemon_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/sdk"
)

// limitsScript takes per-user kernel resources: `KIND hold CAP RELEASE` takes them until the
// kernel refuses (or CAP are held), prints "COUNT REASON" and holds them until the file
// RELEASE exists (at most 60 s); `KIND probe` takes one and says ok or why not. KIND is
// inotify (inotify instances) or mq (POSIX message-queue bytes, RLIMIT_MSGQUEUE: queues
// of decreasing size, so what is left is smaller than the probe's queue). Queues are
// unlinked once open: nothing is left in any IPC namespace.
const limitsScript = `
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(Attr)]
n = 0
def mq(maxmsg, msgsize):
    global n
    n += 1
    name = b"/moat-test-%d-%d" % (os.getpid(), n)
    fd = libc.mq_open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600, ctypes.byref(Attr(0, maxmsg, msgsize, 0, (ctypes.c_long * 4)())))
    err = ctypes.get_errno()
    if fd >= 0:
        libc.mq_unlink(name)
    return fd, err
def inotify():
    fd = libc.inotify_init1(os.O_CLOEXEC)
    return fd, ctypes.get_errno()
kind, mode = sys.argv[1], sys.argv[2]
if mode == "probe":
    fd, err = inotify() if kind == "inotify" else mq(1, 1024)
    print("ok" if fd >= 0 else os.strerror(err), flush=True)
    sys.exit(0)
cap, release = int(sys.argv[3]), sys.argv[4]
steps = [lambda: inotify()] if kind == "inotify" else [
    (lambda m=m, s=s: mq(m, s)) for m, s in [(10, 8192), (10, 1024)] + [(1, 8192 >> i) for i in range(14)]]
held, why = 0, "cap"
for step in steps:
    while held < cap:
        fd, err = step()
        if fd < 0:
            why = os.strerror(err)
            break
        held += 1
print(held, why, flush=True)
deadline = time.time() + 60
while not os.path.exists(release) and time.time() < deadline:
    time.sleep(0.05)
`

// lineSignal is an io.Writer that keeps what is written and closes ready at the first
// newline.
type lineSignal struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	ready chan struct{}
}

func (l *lineSignal) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if bytes.IndexByte(l.buf.Bytes(), '\n') >= 0 {
		l.once.Do(func() { close(l.ready) })
	}
	return len(p), nil
}

func (l *lineSignal) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestPerUserKernelLimits: a sandbox that takes all the inotify instances, or all the POSIX
// message-queue bytes, the kernel gives one user leaves a peer sandbox and host root theirs.
// The kernel charges these at the top level to the owner of the sandbox's user namespace,
// which must be the sandbox's own host uid (under runc; runsc serves both from its own
// kernel). The holding sandbox runs under each runtime; the peer under runc. Each hold is
// released right after the checks: on a host where sandboxes share root's budget, the
// host's root has no inotify instance while it lasts.
func TestPerUserKernelLimits(t *testing.T) {
	e := newEnv(t)
	script := base64.StdEncoding.EncodeToString([]byte(limitsScript))
	install := "echo " + script + " | base64 -d > /tmp/limits.py"
	peer := e.create(v1.CreateSandboxRequest{Runtime: "runc"})
	e.mustSh(peer.ID, install)
	maxInotify := readSysctl(t, "/proc/sys/fs/inotify/max_user_instances")
	hostScript := filepath.Join(t.TempDir(), "limits.py")
	if err := os.WriteFile(hostScript, []byte(limitsScript), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			a := e.create(v1.CreateSandboxRequest{Runtime: rt})
			t.Cleanup(func() { _ = e.c.Delete(context.Background(), a.ID) })
			e.mustSh(a.ID, install)
			if rt == "runc" {
				owner, err := linux.UserNSOwner(filepath.Join(e.runDir, "sandboxes", a.ID, "userns"))
				if err != nil {
					t.Fatal(err)
				}
				if owner != a.HostUID {
					t.Errorf("the sandbox's user namespace belongs to host uid %d, want its own %d", owner, a.HostUID)
				}
			}
			// The sandbox's user namespace no longer belongs to root, so a daemon without
			// CAP_SYS_RESOURCE cannot have runc prlimit the container: moat-init sets the
			// open-file limit itself, to the sandbox's nofile as the spec would have.
			e.run("nofile", func(t *testing.T, e *env) {
				var rl unix.Rlimit
				if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
					t.Fatal(err)
				}
				if a.Limits.Nofile <= 0 {
					t.Fatalf("sandbox has no nofile limit: %+v", a.Limits)
				}
				want := strconv.FormatInt(a.Limits.Nofile, 10) // the spec's
				if !hasCapSysResource(t) {
					want = strconv.FormatUint(min(rl.Max, uint64(a.Limits.Nofile)), 10) // no more than the daemon's
				}
				got := strings.Fields(e.mustSh(a.ID, "ulimit -Sn; ulimit -Hn"))
				if len(got) != 2 || got[0] != want || got[1] != want {
					t.Errorf("open files (soft, hard) inside: %q, want %s for both", got, want)
				}
			})
			for _, kind := range []string{"inotify", "mq"} {
				e.run(kind, func(t *testing.T, e *env) {
					held, why := e.holdKernelResource(a.ID, kind)
					t.Logf("%s sandbox holds %d (%s)", rt, held, why)
					peerGot := e.sh(peer.ID, "", "python3 /tmp/limits.py "+kind+" probe").stdout
					hostGot := hostProbe(t, hostScript, kind)
					if held < 1 {
						t.Errorf("the holding sandbox got no %s at all: %s", kind, why)
					}
					if rt == "runc" {
						if why != "Too many open files" {
							t.Errorf("the holding sandbox stopped with %q, want the kernel's per-user limit (Too many open files)", why)
						}
						if kind == "inotify" && held != maxInotify {
							t.Errorf("the sandbox got %d inotify instances, want a budget of its own: fs.inotify.max_user_instances = %d", held, maxInotify)
						}
					}
					if strings.TrimSpace(peerGot) != "ok" {
						t.Errorf("the peer sandbox could not take one %s: %q", kind, peerGot)
					}
					if hostGot != "ok" {
						t.Errorf("host root could not take one %s: %q", kind, hostGot)
					}
				})
			}
		})
	}
}

// holdKernelResource starts limits.py holding kind in sandbox id and returns what it holds
// once it holds it. The hold ends when the test does.
func (e *env) holdKernelResource(id, kind string) (int, string) {
	t := e.t
	t.Helper()
	release := "/tmp/limits.release." + kind
	out := &lineSignal{ready: make(chan struct{})}
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	go func() {
		_, err := e.c.Exec(ctx, id, sdk.ExecRequest{Cmd: "python3",
			Args: []string{"/tmp/limits.py", kind, "hold", "1000", release}, Stdout: out, Stderr: out})
		done <- err
	}()
	t.Cleanup(func() {
		defer cancel()
		e.mustSh(id, "touch "+release)
		select {
		case <-done:
		case <-ctx.Done():
		}
	})
	select {
	case <-out.ready:
	case err := <-done:
		t.Fatalf("the holder ended before holding: %v: %s", err, out)
	case <-ctx.Done():
		t.Fatalf("the holder did not report: %s", out)
	}
	count, why, _ := strings.Cut(strings.TrimSpace(out.String()), " ")
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatalf("holder said %q", out)
	}
	return n, why
}

// hostProbe takes one kind as host root (a process of the test: inotify in the test itself;
// a message queue from a child in an IPC namespace of its own) and says ok or why not.
func hostProbe(t *testing.T, script, kind string) string {
	t.Helper()
	if kind == "inotify" {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			return err.Error()
		}
		unix.Close(fd)
		return "ok"
	}
	out, err := exec.Command("unshare", "--ipc", "/usr/bin/python3", script, kind, "probe").CombinedOutput()
	if err != nil {
		t.Fatalf("host probe: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func readSysctl(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// hasCapSysResource reports whether this process (the in-process daemon) has
// CAP_SYS_RESOURCE in effect.
func hasCapSysResource(t *testing.T) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}
