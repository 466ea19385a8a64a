package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/testutil"
)

func TestDecideMemoryCheckpoint(t *testing.T) {
	vdso := "vdso: Unexpected rt vDSO area bounds; vdso: Failed to fill self vdso symtable"
	for _, c := range []struct {
		name     string
		rt       string
		host     bool
		criu     criuFacts
		ok       bool
		reason   []string
		fix      string
		emptyFix bool
	}{
		{"runsc hostinet", "runsc", true, criuFacts{}, false, []string{"--network=host", "hostinet"}, "listening TCP socket", false},
		{"runsc hostinet, criu irrelevant", "runsc", true, criuFacts{path: "/usr/sbin/criu", ok: true}, false, []string{"hostinet"}, "", false},
		{"runsc netstack", "runsc", false, criuFacts{}, true, []string{"runsc checkpoint"}, "", true},
		{"runc no criu", "runc", false, criuFacts{}, false, []string{"CRIU", "not installed"}, "apt-get install criu", false},
		{"crun no criu", "crun", false, criuFacts{}, false, []string{"crun checkpoints with CRIU"}, "apt-get install criu", false},
		{"runc criu vdso", "runc", false, criuFacts{path: "/usr/sbin/criu", errors: vdso}, false, []string{"criu check", "Unexpected rt vDSO", "vvar_vclock", "4.1"}, "CRIU ≥ 4.1", false},
		{"runc criu other", "runc", false, criuFacts{path: "/usr/sbin/criu", errors: "cgroup: something"}, false, []string{"cgroup: something"}, "criu check -v4", false},
		{"runc criu ok", "runc", false, criuFacts{path: "/usr/sbin/criu", ok: true}, true, []string{"criu check passes", "/usr/sbin/criu"}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := decideMemoryCheckpoint(c.rt, c.host, c.criu)
			if s.OK != c.ok {
				t.Fatalf("OK = %v, want %v (%+v)", s.OK, c.ok, s)
			}
			for _, r := range c.reason {
				if !strings.Contains(s.Reason, r) {
					t.Errorf("reason %q lacks %q", s.Reason, r)
				}
			}
			if !strings.Contains(s.Fix, c.fix) || (c.emptyFix && s.Fix != "") {
				t.Errorf("fix %q, want it to hold %q (empty: %v)", s.Fix, c.fix, c.emptyFix)
			}
		})
	}
}

func TestCriuErrors(t *testing.T) {
	out := `Error (criu/util.c:642): exited, status=1
Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds
(00.017512) Error (criu/vdso.c:613): vdso: Failed to fill self vdso symtable
Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds
some other line
`
	want := "vdso: Unexpected rt vDSO area bounds; vdso: Failed to fill self vdso symtable"
	if got := criuErrors(out); got != want {
		t.Errorf("criuErrors = %q, want %q", got, want)
	}
	if got := criuErrors("no errors here\n"); got != "no errors here" {
		t.Errorf("criuErrors without Error lines = %q", got)
	}
	if got := criuErrors(strings.Repeat("Error (x): "+strings.Repeat("a", 100)+"\n", 1)); len(got) > 604 {
		t.Errorf("not bounded: %d", len(got))
	}
}

func TestCheckpointArgs(t *testing.T) {
	if got := (checkpointOpts{imagePath: "/i", leaveRunning: true}).args("c"); !slices.Equal(got,
		[]string{"checkpoint", "--image-path", "/i", "--work-path", "/i", "--leave-running", "c"}) {
		t.Errorf("checkpoint args %q", got)
	}
	if got := (checkpointOpts{imagePath: "/i"}).args("c"); slices.Contains(got, "--leave-running") {
		t.Errorf("checkpoint args %q", got)
	}
	if got := (restoreOpts{imagePath: "/i", bundle: "/b"}).args("c"); !slices.Equal(got,
		[]string{"restore", "--image-path", "/i", "--work-path", "/i", "--bundle", "/b", "--detach", "c"}) {
		t.Errorf("restore args %q", got)
	}
	if n := networkOf([]string{"--root", "/r", "--network=host", "--network=none"}); n != "none" {
		t.Errorf("networkOf = %q", n)
	}
}

// counterBundle writes a bundle whose process is a shell holding a token (its pid and a
// random value, made once) and a counter in memory, writing "TOKEN COUNT" to out/c (/tmp inside) every
// 50 ms. The root is the host's, read-only; out is bind-mounted writable at /tmp.
func counterBundle(t testing.TB, id string) (bundle, out string) {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := linux.IDMapMount("/", rootfs, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = linux.UnmountAll(rootfs) })
	if linux.IsMountPoint("/usr") {
		if err := linux.IDMapMount("/usr", filepath.Join(rootfs, "usr"), ""); err != nil {
			t.Fatal(err)
		}
	}
	out = filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &specs.Spec{
		Version: ociVersion,
		Root:    &specs.Root{Path: rootfs, Readonly: true},
		Process: &specs.Process{
			// moat's capability set, no_new_privs, its seccomp profile and cgroup limits:
			// what a restore must give back.
			Capabilities:    &specs.LinuxCapabilities{Bounding: Capabilities(), Effective: Capabilities(), Permitted: Capabilities()},
			NoNewPrivileges: true,
			Args:            []string{"/bin/sh", "-c", `tok="$$-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"; i=0; while :; do i=$((i+1)); echo "$tok $i" > /tmp/c; sleep 0.05; done`},
			Env:             []string{defaultPath},
			Cwd:             "/",
		},
		Hostname: "ckpt",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755", "size=64k"}},
			{Destination: "/tmp", Type: "bind", Source: out, Options: []string{"rbind", "rw"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
			CgroupsPath: "/moat/" + id,
			Seccomp:     seccompProfile("runsc"),
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: ptr[int64](256 << 20)},
				Pids:   &specs.LinuxPids{Limit: ptr[int64](200)},
			},
		},
	}
	bundle = filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return bundle, out
}

// readCounter reads "TOKEN COUNT" from out/c (ok false while it is being rewritten).
func readCounter(out string) (tok string, n int, ok bool) {
	data, _ := os.ReadFile(filepath.Join(out, "c"))
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return "", 0, false
	}
	n, err := strconv.Atoi(f[1])
	return f[0], n, err == nil
}

// waitCounter waits until the counter is above min and returns it.
func waitCounter(t testing.TB, out string, min int) (string, int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if tok, n, ok := readCounter(out); ok && n > min {
			return tok, n
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(filepath.Join(out, "c"))
			t.Fatalf("counter not above %d after 20s (%q)", min, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunscCheckpointRestore: runsc checkpoints a container (network none, as moat's
// sandboxes cannot be: see decideMemoryCheckpoint) and restores it: the shell continues
// with its token and counter (same pid inside, same memory), and exec works after.
func TestRunscCheckpointRestore(t *testing.T) {
	o := newDriver(t, "runsc")
	o.extra = append(o.extra, "--network=none")
	if s := o.MemoryCheckpoint(context.Background()); !s.OK {
		t.Fatalf("runsc with --network=none: memory checkpoint unsupported: %+v", s)
	}
	ctx := context.Background()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	id := "moat-ckpt-" + hex.EncodeToString(rnd[:])
	bundle, out := counterBundle(t, id)
	t.Cleanup(func() {
		if err := o.Stop(context.Background(), id); err != nil {
			t.Errorf("cleanup Stop: %v", err)
		}
		assertGone(t, o, id)
	})
	logf, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(o.binary, append(o.globalArgs(), runOpts{bundle: bundle, detach: true}.args(id)...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		t.Fatalf("runsc run: %v: %s", err, readFileString(logf.Name()))
	}
	tok, n := waitCounter(t, out, 3)

	// The container's posture as its processes see it (capabilities, seccomp, no_new_privs,
	// uid map) and the sandbox process' cgroup on the host: the same after the restore.
	posture := func() string {
		t.Helper()
		got, err := o.run(ctx, id, []string{"exec", id, "/bin/sh", "-c", "grep -E '^(Cap|Seccomp|NoNewPrivs)' /proc/1/status; cat /proc/1/uid_map"})
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		st, err := o.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		cg, _ := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/cgroup")
		if !strings.Contains(string(cg), "/moat/"+id) {
			t.Fatalf("the sandbox process %d is not in the container's cgroup: %s", st.Pid, cg)
		}
		if !strings.Contains(string(got), "Seccomp:\t2") || strings.Contains(string(got), "CapEff:\t0000000000000000") {
			t.Fatalf("the container runs without its seccomp filter or capabilities:\n%s", got)
		}
		if DetectCgroupMode() != CgroupUnified {
			mem, _ := os.ReadFile(cgroupFile("memory", id, "memory.limit_in_bytes"))
			pids, _ := os.ReadFile(cgroupFile("pids", id, "pids.max"))
			got = append(got, "memory "+strings.TrimSpace(string(mem))+" pids "+strings.TrimSpace(string(pids))...)
		}
		return string(got)
	}
	before := posture()
	t.Logf("posture: %s", before)

	// --leave-running is refused (runsc 2022 hangs with it).
	if err := o.Checkpoint(ctx, id, t.TempDir(), true); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("Checkpoint --leave-running under runsc: %v, want ErrUnavailable", err)
	}
	if tok2, _ := waitCounter(t, out, n); tok2 != tok {
		t.Fatalf("the refused --leave-running checkpoint disturbed the container: token %q → %q", tok, tok2)
	}

	// A checkpoint that stops the container: the counter stands still.
	img := filepath.Join(t.TempDir(), "img")
	if err := os.Mkdir(img, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := o.Checkpoint(ctx, id, img, false); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if ok, _ := o.Running(ctx, id); ok {
		st, _ := o.State(ctx, id)
		t.Fatalf("container still running after checkpoint: %+v", st)
	}
	_, stopped, _ := readCounter(out)
	time.Sleep(300 * time.Millisecond) // the counter must not move: nothing to await
	if _, again, _ := readCounter(out); again != stopped {
		t.Fatalf("counter moved after the checkpoint stopped the container: %d → %d", stopped, again)
	}
	if ents, _ := os.ReadDir(img); len(ents) == 0 {
		t.Fatalf("checkpoint image directory is empty")
	}
	// The runtime's state must go before the same id is restored.
	if _, err := o.run(ctx, id, deleteOpts{force: true}.args(id)); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := o.Restore(ctx, id, bundle, img, "", logf); err != nil {
		t.Fatalf("Restore: %v: %s", err, readFileString(logf.Name()))
	}
	// The first value written after the restore continues the count: a fresh shell would
	// write 1 with a new token.
	var tok3 string
	var n3 int
	testutil.WaitFor(t, 20*time.Second, "the restored counter to move", func() bool {
		var ok bool
		tok3, n3, ok = readCounter(out)
		return ok && n3 != stopped
	})
	if tok3 != tok || n3 <= stopped {
		t.Fatalf("restored process wrote %q %d, want token %q and a count above %d (the same shell, pid and memory)", tok3, n3, tok, stopped)
	}
	got, err := o.run(ctx, id, []string{"exec", id, "/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9; do t=$(cut -d' ' -f1 /tmp/c); [ -n \"$t\" ] && break; sleep 0.01; done; echo exec-ok $t"})
	if err != nil {
		t.Fatalf("exec after restore: %v", err)
	}
	if want := "exec-ok " + tok; strings.TrimSpace(string(got)) != want {
		t.Errorf("exec after restore: %q, want %q", got, want)
	}
	if after := posture(); after != before {
		t.Errorf("posture after the restore:\n%s\nbefore:\n%s", after, before)
	}
}

// TestRuncCheckpointRefused: where CRIU cannot run (criu check fails), runc's checkpoint of
// a moat-spec container (user namespace, seccomp, cgroups) fails with CRIU's reason and
// the container keeps running.
func TestRuncCheckpointRefused(t *testing.T) {
	o := newDriver(t, "runc")
	s := o.MemoryCheckpoint(context.Background())
	if s.OK {
		t.Skipf("CRIU works on this host (%s): nothing refused", s.Reason)
	}
	t.Logf("runc memory checkpoint: %s", s.Reason)
	if _, err := exec.LookPath("criu"); err != nil {
		t.Skip("criu not installed: runc's checkpoint fails for that reason alone")
	}
	sb := newTestSandbox(t, "runc")
	startContainer(t, o, sb)
	initReport(t, sb.logPath)
	img := filepath.Join(t.TempDir(), "img")
	if err := os.Mkdir(img, 0o700); err != nil {
		t.Fatal(err)
	}
	err := o.Checkpoint(context.Background(), sb.spec.ID, img, true)
	if err == nil {
		t.Fatalf("runc checkpoint worked although `criu check` fails: %s", s.Reason)
	}
	t.Logf("runc checkpoint: %v", err)
	if strings.Contains(s.Reason, "vdso") && !strings.Contains(err.Error(), "vdso") {
		t.Errorf("the checkpoint's error does not carry CRIU's reason: %v", err)
	}
	if ok, err := o.Running(context.Background(), sb.spec.ID); err != nil || !ok {
		t.Errorf("container not running after the failed checkpoint: %v %v", ok, err)
	}
}

// BenchmarkRunscCheckpointRestore times, for a small container (the counter shell, network
// none: see TestRunscCheckpointRestore), runsc's checkpoint (to disk, container stopped) and
// restore (until the counter moves again), beside `runsc run --detach` of the same bundle
// until its counter moves: p50s of b.N rounds in the same run.
//
//	go test -run '^$' -bench BenchmarkRunscCheckpointRestore -benchtime 10x ./internal/runtime/
func BenchmarkRunscCheckpointRestore(b *testing.B) {
	requireRoot(b)
	if _, err := Available("runsc"); err != nil {
		b.Skip(err)
	}
	o, err := New("runsc", Options{Root: filepath.Join(b.TempDir(), "state"), Timeout: 60 * time.Second, ExtraFlags: []string{"--network=none"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	logf, err := os.Create(filepath.Join(b.TempDir(), "log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	var runs, cps, restores []time.Duration
	var imgBytes int64
	for i := 0; i < b.N; i++ {
		id := "moat-ckpt-bench-" + strconv.Itoa(i)
		bundle, out := counterBundle(b, id)
		t0 := time.Now()
		cmd := exec.Command(o.binary, append(o.globalArgs(), runOpts{bundle: bundle, detach: true}.args(id)...)...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Run(); err != nil {
			b.Fatalf("runsc run: %v", err)
		}
		_, n := waitCounter(b, out, 0)
		runs = append(runs, time.Since(t0))
		img := filepath.Join(b.TempDir(), "img")
		if err := os.Mkdir(img, 0o700); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		if err := o.Checkpoint(ctx, id, img, false); err != nil {
			b.Fatal(err)
		}
		cps = append(cps, time.Since(t0))
		if st, err := os.Stat(filepath.Join(img, "checkpoint.img")); err == nil {
			imgBytes = st.Size()
		}
		if _, err := o.run(ctx, id, deleteOpts{force: true}.args(id)); err != nil {
			b.Fatal(err)
		}
		_, stopped, _ := readCounter(out)
		t0 = time.Now()
		if err := o.Restore(ctx, id, bundle, img, "", logf); err != nil {
			b.Fatal(err)
		}
		waitCounter(b, out, max(n, stopped))
		restores = append(restores, time.Since(t0))
		if err := o.Stop(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	run, cp, rs := p50(runs), p50(cps), p50(restores)
	b.ReportMetric(run, "run_p50_ms")
	b.ReportMetric(cp, "checkpoint_p50_ms")
	b.ReportMetric(rs, "restore_p50_ms")
	b.ReportMetric(rs/run, "restore/run")
	b.ReportMetric(float64(imgBytes)/1024, "image_KiB")
}
