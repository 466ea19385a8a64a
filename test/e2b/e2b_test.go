// Package e2b_test drives the real e2b JavaScript SDK (npm e2b@2.51.0, pinned in
// package-lock.json) against a real `moat serve` with real sandboxes: TestE2BSDK runs the
// node:test conformance suite (*.test.mjs) and BenchmarkE2BTTI measures the time to
// interactive through the SDK beside the native API's in the same run.
//
// Both need root (real runtimes and namespaces) and node ≥ 20 (`make deps`). The SDK is
// installed with `npm ci` into node_modules/ here when it is missing.
package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// daemon is one `moat serve` subprocess with its TCP listener and an API key for it.
type daemon struct {
	url   string // http://127.0.0.1:PORT: the E2B API and the envd gateway alike
	key   string // an API key (e2b_…)
	other string // a second API key, for tests of what one key may not see of another's
}

// suiteDir is this package's directory, where package.json and the test files are.
func suiteDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd() // go test runs a package's tests in its directory
	if err != nil {
		tb.Fatal(err)
	}
	return dir
}

// requireNode returns the path of node, after making sure the pinned SDK is installed.
func requireNode(tb testing.TB) string {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		tb.Fatal("node is not installed (PATH has no `node`): the e2b conformance suite runs the e2b JS SDK under Node ≥ 20; `make deps` installs it")
	}
	dir := suiteDir(tb)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err == nil {
		return node
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		tb.Fatal("test/e2b/node_modules is missing and npm is not installed to run `npm ci`; `make deps` installs node and npm")
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Logf("npm ci:\n%s", out)
		tb.Fatalf("npm ci in %s: %v", dir, err)
	}
	return node
}

// startDaemon starts `moat serve` with its own data and run directories, an E2B template
// alias base=host and warm sandboxes in its pool, waits until its TCP listener answers
// GET /health, and creates two API keys. extra are more `moat serve` flags. The daemon is
// stopped with SIGTERM when tb ends; its stderr goes to the log if tb failed.
func startDaemon(tb testing.TB, warm int, extra ...string) *daemon {
	tb.Helper()
	testutil.RequiresRoot(tb)
	moat := filepath.Join(testutil.Binaries(tb), "moat")

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	runDir := "/run/moat-e2b-" + hex.EncodeToString(rnd[:])
	sock := filepath.Join(runDir, "moat.sock")
	data := tb.TempDir()
	global := []string{
		"--data", data, "--run-dir", runDir, "--socket", sock,
		"--id-base", strconv.FormatUint(uint64(testutil.IDBase(tb)), 10),
	}
	addr := testutil.FreeAddr(tb)

	logs := &testutil.SyncBuffer{}
	_, lport, _ := net.SplitHostPort(addr)
	args := append(slices.Clone(global), "serve", "--listen", addr, "--warm", strconv.Itoa(warm),
		"--preview-domain", "preview.localhost:"+lport, // previews.test.mjs: getHost(port)
		"--e2b-template", "base=host", "--default-disk", "1G") // drives are allocated in full
	cmd := exec.Command(moat, append(args, extra...)...) // a later --default-disk wins
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting moat serve: %v", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		// Sandboxes a test left (paused, frozen or running) are deleted through the API
		// before the daemon stops: SIGTERM keeps sandboxes running by design (they outlive
		// the daemon), and the run directory is removed below.
		deleteAll(tb, moat, global)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			tb.Errorf("moat serve did not stop within 60s of SIGTERM; killing it")
			_ = cmd.Process.Kill()
			<-exited
		}
		if tb.Failed() {
			tb.Logf("moat serve output (last 64 KiB):\n%s", logs.Tail(64<<10))
		}
		_ = os.RemoveAll(runDir)
		unmountPool(tb, data)
	})

	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		if healthy(base) {
			break
		}
		select {
		case <-exited:
			tb.Fatalf("moat serve exited before it answered /health: %v\n%s", waitErr, logs.Tail(64<<10))
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("moat serve did not answer GET %s/health within 30s\n%s", base, logs.Tail(64<<10))
		}
		time.Sleep(100 * time.Millisecond)
	}

	newKey := func() string {
		var out, errb bytes.Buffer
		key := exec.Command(moat, append(slices.Clone(global), "apikey", "create")...)
		key.Stdout, key.Stderr = &out, &errb
		if err := key.Run(); err != nil {
			tb.Fatalf("moat apikey create: %v\n%s", err, errb.String())
		}
		k := strings.TrimSpace(out.String())
		if !strings.HasPrefix(k, "e2b_") || strings.ContainsAny(k, " \n") {
			tb.Fatalf("moat apikey create printed %q, want the key alone (e2b_…)", out.String())
		}
		return k
	}
	return &daemon{url: base, key: newKey(), other: newKey()}
}

// deleteAll deletes every sandbox of the daemon that global names (its socket), as the
// operator, and fails tb if any is left: a test's sandboxes must not outlive its daemon.
func deleteAll(tb testing.TB, moat string, global []string) {
	tb.Helper()
	if out, err := exec.Command(moat, append(slices.Clone(global), "rm", "--all", "--force")...).CombinedOutput(); err != nil {
		tb.Errorf("moat rm --all --force: %v\n%s", err, out)
	}
	// A delete the daemon began before (an E2B kill answers at once) may still be under
	// way: wait for it to end.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(moat, append(slices.Clone(global), "ls", "--json")...).Output()
		if err != nil {
			tb.Errorf("moat ls --json: %v", err)
			return
		}
		var left []v1.Sandbox
		if err := json.Unmarshal(out, &left); err != nil {
			tb.Errorf("moat ls --json: %v\n%s", err, out)
			return
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, sb := range left {
				tb.Errorf("sandbox %s (%s) is left 30 s after moat rm --all --force", sb.ID, sb.State)
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unmountPool makes sure a drive pool the daemon mounted on data/drives is not left
// mounted: the daemon unmounts it at exit when nothing uses it, but its last drives' loop
// devices detach asynchronously (autoclear), so it can find the pool busy a moment longer.
func unmountPool(tb testing.TB, data string) {
	drives := filepath.Join(data, "drives")
	mounted := func() bool {
		b, err := os.ReadFile("/proc/self/mountinfo")
		return err == nil && strings.Contains(string(b), " "+drives+" ")
	}
	deadline := time.Now().Add(10 * time.Second)
	for mounted() {
		err := syscall.Unmount(drives, 0)
		if err == nil {
			tb.Logf("the daemon left its drive pool mounted on %s at exit; unmounted it", drives)
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("the drive pool on %s stays mounted: %v", drives, err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func healthy(base string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(base + "/health")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// nodeEnv is the environment for node: ours, minus anything that would point the SDK
// elsewhere, plus the daemon's URLs and key.
func (d *daemon) nodeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			env = append(env, kv)
		}
	}
	return append(env, "E2B_API_URL="+d.url, "E2B_SANDBOX_URL="+d.url, "E2B_API_KEY="+d.key,
		"MOAT_OTHER_API_KEY="+d.other, "NO_COLOR=1", "FORCE_COLOR=0")
}

// poolFiles are the suite's files that need a daemon with a drive pool (snapshots and
// forks clone drives): TestE2BSnapshots runs them, TestE2BSDK the others.
var poolFiles = []string{"snapshot.test.mjs"}

// TestE2BSDK runs the node:test suite (*.test.mjs here but poolFiles) against a fresh
// daemon, one test file at a time, streaming node's spec report into the test log.
func TestE2BSDK(t *testing.T) {
	testutil.RequiresRoot(t)
	node := requireNode(t)
	files := suiteFiles(t, false)
	if len(files) == 0 {
		t.Skip("MOAT_E2B_FILES names none of this test's files")
	}
	runSuite(t, node, startDaemon(t, 1), files)
}

// TestE2BSnapshots runs poolFiles against a daemon whose drives are in a 6 GiB XFS pool
// (`--drive-pool`, as an operator who wants copy-free snapshots runs it), 512 MiB each.
func TestE2BSnapshots(t *testing.T) {
	testutil.RequiresRoot(t)
	node := requireNode(t)
	files := suiteFiles(t, true)
	if len(files) == 0 {
		t.Skip("MOAT_E2B_FILES names none of this test's files")
	}
	if _, err := exec.LookPath("mkfs.xfs"); err != nil {
		t.Fatal("mkfs.xfs is missing (xfsprogs; `make deps` installs it): the drive pool needs it")
	}
	runSuite(t, node, startDaemon(t, 1, "--drive-pool", "6G", "--default-disk", "512M"), files)
}

// suiteFiles lists the suite's test files, poolFiles or the others, narrowed by
// MOAT_E2B_FILES=a.test.mjs,b.test.mjs when it is set.
func suiteFiles(t *testing.T, pool bool) []string {
	dir := suiteDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.test.mjs"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.test.mjs in %s (%v)", dir, err)
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return slices.Contains(poolFiles, f) != pool })
	if only := os.Getenv("MOAT_E2B_FILES"); only != "" {
		files = slices.DeleteFunc(files, func(f string) bool { return !slices.Contains(strings.Split(only, ","), f) })
	}
	return files
}

// runSuite runs node --test on files against d.
func runSuite(t *testing.T, node string, d *daemon, files []string) {
	dir := suiteDir(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	args := append([]string{"--test", "--test-concurrency=1", "--test-reporter=spec"}, files...)
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = dir
	cmd.Env = d.nodeEnv()
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			t.Log(sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	start := time.Now()
	err := cmd.Run()
	pw.Close()
	<-lines
	t.Logf("node --test took %s", time.Since(start).Round(time.Second))
	if ctx.Err() != nil {
		t.Fatalf("the e2b suite did not finish within 10 minutes")
	}
	if err != nil {
		t.Fatalf("the e2b suite failed (%v): see the failing tests above", err)
	}
}

// BenchmarkE2BTTI measures the time to interactive (create → first command completed)
// through the native API (Go sdk: Create, then Exec) and through the e2b SDK (bench.mjs:
// Sandbox.create() → commands.run('true')), 30 runs each against the same daemon (2 warm
// sandboxes, 1 s between runs for the pool to refill, untimed).
//
// The SDK's commands.run('true') runs `/bin/bash -l -c true`, a login shell that costs far
// more inside a sandbox than /bin/true, so the native path is measured twice: with
// /bin/true (native-*) and with the SDK's own command line (native-login-*). added-p50-ms
// is e2b p50 − native-login p50: what the compatibility layer (E2B control plane, envd
// gateway, and the JS client) adds for the same work.
//
// Each b.Loop iteration is the whole measurement; one is enough (it takes about two
// minutes), and -benchtime Nx repeats it, reporting the last.
func BenchmarkE2BTTI(b *testing.B) {
	const runs = 30
	const refill = time.Second
	testutil.RequiresRoot(b)
	node := requireNode(b)
	d := startDaemon(b, 2)
	var native, login, viaSDK latency
	for b.Loop() {
		native = nativeTTI(b, d, sdk.ExecRequest{Cmd: "/bin/true"}, runs, refill)
		login = nativeTTI(b, d, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-l", "-c", "true"}}, runs, refill)
		viaSDK = sdkTTI(b, d, node, runs, refill)
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(native.P50, "native-p50-ms")
	b.ReportMetric(native.P99, "native-p99-ms")
	b.ReportMetric(login.P50, "native-login-p50-ms")
	b.ReportMetric(login.P99, "native-login-p99-ms")
	b.ReportMetric(viaSDK.P50, "e2b-p50-ms")
	b.ReportMetric(viaSDK.P99, "e2b-p99-ms")
	b.ReportMetric(viaSDK.P50-login.P50, "added-p50-ms")
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "time to interactive (create → first command done), %d runs each, ms:\n", runs)
	fmt.Fprintf(&tbl, "  %-30s %7s  %7s  %10s  %11s\n", "path", "p50", "p99", "create p50", "command p50")
	for _, r := range []struct {
		name string
		l    latency
	}{{"native API, /bin/true", native}, {"native API, bash -l -c true", login}, {"e2b SDK, commands.run('true')", viaSDK}} {
		fmt.Fprintf(&tbl, "  %-30s %7.1f  %7.1f  %10.1f  %11.1f\n", r.name, r.l.P50, r.l.P99, r.l.CreateP50, r.l.RunP50)
	}
	fmt.Fprintf(&tbl, "  added at p50 (e2b − native bash -l -c true): %.1f ms", viaSDK.P50-login.P50)
	b.Log(tbl.String())
}

type latency struct {
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	CreateP50 float64 `json:"create_p50_ms"`
	RunP50    float64 `json:"run_p50_ms"`
	N         int     `json:"runs"`
}

// percentile is what internal/bench reports: index round(p·n)−1 of the sorted values.
func percentile(ms []float64, p float64) float64 {
	s := slices.Sorted(slices.Values(ms))
	return s[max(0, min(int(p*float64(len(s))+0.5)-1, len(s)-1))]
}

// nativeTTI times Create → Exec(cmd) returned over the native API, after one uncounted
// warm-up run; the Delete after each run is not timed.
func nativeTTI(b *testing.B, d *daemon, cmd sdk.ExecRequest, runs int, refill time.Duration) latency {
	b.Helper()
	c := sdk.NewHTTP(d.url, d.key)
	ctx := b.Context()
	var total, create, run []float64
	msSince := func(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }
	for i := range runs + 1 {
		time.Sleep(refill)
		start := time.Now()
		sb, err := c.Create(ctx, v1.CreateSandboxRequest{})
		if err != nil {
			b.Fatalf("native create: %v", err)
		}
		created := time.Now()
		code, err := c.Exec(ctx, sb.ID, cmd)
		t, r := msSince(start), msSince(created)
		if err := c.Delete(context.WithoutCancel(ctx), sb.ID); err != nil {
			b.Errorf("native delete %s: %v", sb.ID, err)
		}
		if err != nil || code != 0 {
			b.Fatalf("native exec %s %q: code %d, %v", cmd.Cmd, cmd.Args, code, err)
		}
		if i > 0 {
			total, create, run = append(total, t), append(create, t-r), append(run, r)
		}
	}
	return latency{P50: percentile(total, 0.50), P99: percentile(total, 0.99),
		CreateP50: percentile(create, 0.50), RunP50: percentile(run, 0.50), N: len(total)}
}

// sdkTTI runs bench.mjs and returns what it printed.
func sdkTTI(b *testing.B, d *daemon, node string, runs int, refill time.Duration) latency {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "bench.mjs", strconv.Itoa(runs), strconv.FormatInt(refill.Milliseconds(), 10))
	cmd.Dir = suiteDir(b)
	cmd.Env = d.nodeEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		b.Fatalf("node bench.mjs: %v\n%s%s", err, out.String(), errb.String())
	}
	var l latency
	last := strings.TrimSpace(out.String())
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if err := json.Unmarshal([]byte(last), &l); err != nil || l.N != runs {
		b.Fatalf("bench.mjs printed %q: %v", out.String(), err)
	}
	return l
}
