// Package bench measures moat against a baseline taken in the same run: time from create
// to a command's first output through the API, beside the raw OCI runtime's own create +
// first exec of the same root filesystem; idle memory per sandbox; burst create rate; the
// API's latency with sandboxes at their connection caps beside the same with them idle.
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// Options configure a benchmark run.
type Options struct {
	Runs     int      // measured runs per runtime (≥ 30 for the figures that count)
	Runtimes []string // runtimes to measure
	Idle     int      // sandboxes for the idle-memory figure
	Burst    int      // sandboxes for the burst-create figure
	RunDir   string   // the daemon's run directory (for the raw baseline's bundle)
	// RuntimeArgs returns the global flags moat's driver passes to a runtime, so the raw
	// baseline runs the runtime exactly as moat does.
	RuntimeArgs func(name string) (binary string, global []string, err error)
	Progress    func(string)
	// Warm, when set, is a client of a daemon with a warm pool (same host, same storage
	// kind) for the warm figure; WarmRefill is how long to let its pool refill between runs.
	Warm       *sdk.Client
	WarmRefill time.Duration
	// WarmReady, when set, tells whether the warm daemon's pool of a runtime is full:
	// after WarmRefill each warm run also waits (untimed, up to a minute) for it, so that
	// every warm figure is a create served by the pool, not however far a refill got. Only
	// the pool the figure uses is waited for: a runtime whose pool cannot fill does not
	// hold up the others' figures.
	WarmReady func(runtime string) bool
	// E2B, when set, is the warm daemon's E2B API for the E2B create figure (e2b.go).
	E2B *E2BTarget
	// ConnSandboxes runc sandboxes each open ConnsPerSandbox connections (their cap) to
	// HoldName, a name the daemon pins to 127.0.0.1, for the API latency under connection
	// load; LsRuns List calls are timed idle and under the load (0 sandboxes: skip).
	// Socket is the daemon's unix socket (each timed ls opens a connection of its own).
	Socket          string
	ConnSandboxes   int
	ConnsPerSandbox int
	HoldName        string
	LsRuns          int
	// FileRuns × (cp in, cp out, raw exec in, raw exec out) of a FileMiB file (files.go);
	// 0 skips the figure.
	FileRuns, FileMiB int
}

// Latency is a distribution summary in milliseconds.
type Latency struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Min float64 `json:"min_ms"`
	N   int     `json:"n"`
}

// RuntimeResult is the latency figure for one runtime.
type RuntimeResult struct {
	Runtime string  `json:"runtime"`
	Binary  string  `json:"binary,omitempty"` // the runtime's executable, both paths
	API     Latency `json:"api_create_to_first_output"`
	Raw     Latency `json:"raw_runtime_create_and_first_exec"`
	Ratio   float64 `json:"ratio_p50"` // API p50 / raw p50
	// Warm is create → first output when the create is served by the warm pool, with its
	// ratio to the same raw baseline.
	Warm      *Latency `json:"warm_api_create_to_first_output,omitempty"`
	WarmRatio float64  `json:"warm_ratio_p50,omitempty"`
	// Resume is an exec's first output in a sandbox stopped for idleness (resume.go),
	// with its p50 ratios to the warm and the cold create of the same run.
	Resume       *Latency `json:"resume_after_idle_stop,omitempty"`
	ResumeToWarm float64  `json:"resume_to_warm_ratio_p50,omitempty"`
	ResumeToCold float64  `json:"resume_to_cold_ratio_p50,omitempty"`
	// Thaw is the same for a sandbox frozen for idleness (the first idle stage).
	Thaw       *Latency `json:"resume_after_idle_freeze,omitempty"`
	ThawToWarm float64  `json:"thaw_to_warm_ratio_p50,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// Result is the whole report.
type Result struct {
	Runtimes          []RuntimeResult `json:"runtimes"`
	IdleMiBPerSandbox float64         `json:"idle_mib_per_sandbox"`
	// IdleCgroupMiB is the mean memory charged to an idle sandbox's own cgroup (v1
	// memory.usage_in_bytes or v2 memory.current), a cross-check of the host delta.
	IdleCgroupMiB  float64 `json:"idle_cgroup_mib_per_sandbox"`
	IdleInitRSSKiB float64 `json:"idle_moat_init_rss_kib"`
	IdleN          int     `json:"idle_n"`
	BurstPerSecond float64 `json:"burst_creates_per_second"`
	BurstN         int     `json:"burst_n"`
	// BurstWarmPerSecond is the same burst served by a warm pool as large as it (cmd/moat
	// bench --burst-warm).
	BurstWarmPerSecond float64 `json:"burst_warm_creates_per_second,omitempty"`
	// E2BCreate is POST /sandboxes (E2B's Sandbox.create()) on the warm daemon, for
	// E2BTemplate, served by its warm pool.
	E2BCreate   *Latency `json:"e2b_create,omitempty"`
	E2BTemplate string   `json:"e2b_template,omitempty"`
	// ConnLoad is the API latency with sandboxes at their connection caps, beside idle.
	ConnLoad *ConnLoad `json:"api_latency_under_conn_load,omitempty"`
	// Snapshots is the snapshot and fork figure (snapshot.go), on a daemon with a drive pool.
	Snapshots *SnapshotResult `json:"snapshots,omitempty"`
	// Checkpoints is the checkpoint figure per runtime (checkpoint.go), on the same daemon.
	Checkpoints []*CheckpointResult `json:"checkpoints,omitempty"`
	// Files is the `moat cp` figure (files.go).
	Files *FilesResult `json:"files,omitempty"`
	// Syscalls is the system-call-heavy commands' figure per runtime (syscalls.go).
	Syscalls *SyscallResult `json:"syscalls,omitempty"`
}

var smallSandbox = v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 256 << 20}

// Run measures. It deletes every sandbox it creates.
func Run(ctx context.Context, c *sdk.Client, o Options) (*Result, error) {
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	res := &Result{}
	for _, rt := range o.Runtimes {
		o.Progress(fmt.Sprintf("%s: %d × create → first output through the API, and the raw runtime on the same rootfs", rt, o.Runs))
		r := RuntimeResult{Runtime: rt}
		if o.RuntimeArgs != nil {
			r.Binary, _, _ = o.RuntimeArgs(rt)
		}
		if err := latency(ctx, c, o, rt, &r); err != nil {
			r.Error = err.Error()
			o.Progress(fmt.Sprintf("%s: failed, its other figures are skipped: %v", rt, err))
		}
		if o.Warm != nil && r.Error == "" {
			o.Progress(fmt.Sprintf("%s: %d × create → first output served by the warm pool", rt, o.Runs))
			var warm []time.Duration
			req := smallSandbox
			req.Runtime = rt
			req.DiskBytes = 0 // the pool's kind: default disk
			if rt == "runsc" {
				// runsc cannot change a running sandbox's limits: its pool serves defaults.
				req = v1.CreateSandboxRequest{Runtime: rt}
			}
			for range o.Runs {
				o.waitWarm(rt)
				if err := createExecDelete(ctx, o.Warm, req, &warm); err != nil {
					r.Error = "warm: " + err.Error()
					break
				}
			}
			l := summarize(warm)
			r.Warm = &l
			if r.Raw.P50 > 0 {
				r.WarmRatio = l.P50 / r.Raw.P50
			}
		}
		if r.API.N > 0 { // independent of the warm figure (its pool may not fit the disk)
			resumeFigures(ctx, c, o, rt, &r)
		}
		res.Runtimes = append(res.Runtimes, r)
	}
	if o.E2B != nil {
		o.Progress(fmt.Sprintf("E2B: %d × Sandbox.create() (POST /sandboxes) of template %s on the warm daemon", o.Runs, o.E2B.Template))
		ds, err := e2bCreates(ctx, *o.E2B, o.Runs, func() { o.waitWarm(o.E2B.Runtime) })
		if err != nil {
			return res, fmt.Errorf("E2B create: %w", err)
		}
		l := summarize(ds)
		res.E2BCreate, res.E2BTemplate = &l, o.E2B.Template
	}
	if o.Idle > 0 {
		o.Progress(fmt.Sprintf("idle memory: %d idle runc sandboxes", o.Idle))
		if err := idle(ctx, c, o, res); err != nil {
			return res, fmt.Errorf("idle memory: %w", err)
		}
	}
	if o.Burst > 0 {
		o.Progress(fmt.Sprintf("burst: %d creates at once", o.Burst))
		if err := burst(ctx, c, o, res); err != nil {
			return res, fmt.Errorf("burst: %w", err)
		}
	}
	if o.ConnSandboxes > 0 {
		o.Progress(fmt.Sprintf("API latency: %d × ls idle, then with %d sandboxes opening %d connections each", o.LsRuns, o.ConnSandboxes, o.ConnsPerSandbox))
		cl, err := connLoad(ctx, c, o)
		if err != nil {
			return res, fmt.Errorf("API latency under connection load: %w", err)
		}
		res.ConnLoad = cl
	}
	if o.FileRuns > 0 {
		o.Progress(fmt.Sprintf("files: %d × moat cp of %d MiB in and out of a runc sandbox, and the same through runc exec", o.FileRuns, o.FileMiB))
		fr, err := Files(ctx, c, o, o.FileRuns, o.FileMiB)
		if err != nil {
			return res, fmt.Errorf("files: %w", err)
		}
		res.Files = fr
	}
	return res, nil
}

// waitWarm sleeps WarmRefill, then waits for WarmReady(runtime) (up to a minute).
func (o Options) waitWarm(runtime string) {
	time.Sleep(o.WarmRefill)
	for deadline := time.Now().Add(time.Minute); o.WarmReady != nil && !o.WarmReady(runtime) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

func latency(ctx context.Context, c *sdk.Client, o Options, rt string, r *RuntimeResult) error {
	req := smallSandbox
	req.Runtime = rt
	// Warm-up: first-use work (host template layer, drive image cache) is not measured.
	if err := createExecDelete(ctx, c, req, nil); err != nil {
		return err
	}
	var api []time.Duration
	for range o.Runs {
		if err := createExecDelete(ctx, c, req, &api); err != nil {
			return err
		}
	}
	r.API = summarize(api)

	// The baseline: the same runtime, with moat's own spec and root filesystem, creating a
	// container whose process prints one line.
	sb, err := c.Create(ctx, req)
	if err != nil {
		return err
	}
	defer c.Delete(context.WithoutCancel(ctx), sb.ID)
	raw, err := rawRuns(ctx, o, rt, sb.ID)
	if err != nil {
		return fmt.Errorf("raw baseline: %w", err)
	}
	r.Raw = summarize(raw)
	if r.Raw.P50 > 0 {
		r.Ratio = r.API.P50 / r.Raw.P50
	}
	return nil
}

// createExecDelete times create → first stdout byte of `echo ready`, then deletes.
func createExecDelete(ctx context.Context, c *sdk.Client, req v1.CreateSandboxRequest, into *[]time.Duration) error {
	start := time.Now()
	sb, err := c.Create(ctx, req)
	if err != nil {
		return err
	}
	defer c.Delete(context.WithoutCancel(ctx), sb.ID)
	fw := &firstWrite{}
	code, err := c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/echo", Args: []string{"ready"}, Stdout: fw, User: "root"})
	if err != nil {
		return err
	}
	if code != 0 || fw.at.IsZero() {
		return fmt.Errorf("echo in the sandbox exited %d with no output", code)
	}
	if into != nil {
		*into = append(*into, fw.at.Sub(start))
	}
	return nil
}

type firstWrite struct{ at time.Time }

func (f *firstWrite) Write(p []byte) (int, error) {
	if f.at.IsZero() && len(p) > 0 {
		f.at = time.Now()
	}
	return len(p), nil
}

// rawRuns runs the runtime directly on sandbox id's bundle (its hardened config.json and
// mounted rootfs), with the process replaced by `echo ready`, and times each run until
// the first output.
func rawRuns(ctx context.Context, o Options, rt, id string) ([]time.Duration, error) {
	bin, global, err := o.RuntimeArgs(rt)
	if err != nil {
		return nil, err
	}
	sbDir := filepath.Join(o.RunDir, "sandboxes", id)
	data, err := os.ReadFile(filepath.Join(sbDir, "bundle", "config.json"))
	if err != nil {
		return nil, err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, err
	}
	proc := spec["process"].(map[string]any)
	proc["args"] = []string{"/bin/echo", "ready"}
	work, err := os.MkdirTemp("", "moat-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "state")
	// Swap --root for a private state directory.
	var args []string
	for i := 0; i < len(global); i++ {
		if global[i] == "--root" {
			i++
			continue
		}
		if strings.HasPrefix(global[i], "--root=") {
			continue
		}
		args = append(args, global[i])
	}
	args = append([]string{"--root", root}, args...)
	var out []time.Duration
	for i := range o.Runs {
		bundle := filepath.Join(work, fmt.Sprintf("b%d", i))
		if err := os.MkdirAll(bundle, 0o700); err != nil {
			return nil, err
		}
		if lin, ok := spec["linux"].(map[string]any); ok {
			lin["cgroupsPath"] = fmt.Sprintf("/moat/bench-%s-%d", id, i)
		}
		b, _ := json.Marshal(spec)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
			return nil, err
		}
		cid := fmt.Sprintf("bench-%s-%d", id[3:], i)
		argv := append(append([]string{}, args...), "run", "--bundle", bundle, cid)
		name := bin
		if rt == "runsc" {
			// runsc runs inside the sandbox's network namespace, as moat's driver does.
			argv = append([]string{"--net=" + filepath.Join(sbDir, "netns"), bin}, argv...)
			name = "nsenter"
		}
		d, err := timeFirstLine(ctx, name, argv)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func timeFirstLine(ctx context.Context, name string, argv []string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, argv...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	d := time.Since(start)
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	if line != "ready\n" {
		return 0, fmt.Errorf("%s %s: got %q: %v %s", name, strings.Join(argv, " "), line, werr, stderr.String())
	}
	return d, nil
}

// settle waits until earlier sandboxes' background teardown is done, so it does not compete
// with what is measured next.
func settle(ctx context.Context, c *sdk.Client) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if list, err := c.List(ctx); err == nil && len(list) == 0 {
			break
		}
	}
	time.Sleep(2 * time.Second)
}

func idle(ctx context.Context, c *sdk.Client, o Options, res *Result) error {
	settle(ctx, c)
	before, err := memUsed()
	if err != nil {
		return err
	}
	var ids []string
	defer func() {
		for _, id := range ids {
			_ = c.Delete(context.WithoutCancel(ctx), id)
		}
	}()
	for range o.Idle {
		sb, err := c.Create(ctx, smallSandbox)
		if err != nil {
			return err
		}
		ids = append(ids, sb.ID)
	}
	// moat-init trims its memory after 5 s without requests (twice that to be sure), and
	// start-up allocations settle.
	time.Sleep(12 * time.Second)
	after, err := memUsed()
	if err != nil {
		return err
	}
	res.IdleN = o.Idle
	res.IdleMiBPerSandbox = float64(after-before) / float64(o.Idle) / 1024
	var sum float64
	for _, id := range ids {
		for _, f := range []string{"/sys/fs/cgroup/memory/moat/" + id + "/memory.usage_in_bytes", "/sys/fs/cgroup/moat/" + id + "/memory.current"} {
			if data, err := os.ReadFile(f); err == nil {
				v, _ := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
				sum += v
				break
			}
		}
	}
	res.IdleCgroupMiB = sum / float64(len(ids)) / (1 << 20)
	res.IdleInitRSSKiB = initRSS()
	return nil
}

func burst(ctx context.Context, c *sdk.Client, o Options, res *Result) error {
	settle(ctx, c)
	rate, err := burstOf(ctx, c, o.Burst, smallSandbox)
	if err != nil {
		return err
	}
	res.BurstN, res.BurstPerSecond = o.Burst, rate
	return nil
}

// BurstWarm is the burst figure against a daemon whose warm pool holds n sandboxes of the
// default kind: once ready says the pool is full (waited for up to two minutes, untimed),
// n default creates at once; their rate per second.
func BurstWarm(ctx context.Context, c *sdk.Client, n int, ready func() bool) (float64, error) {
	for deadline := time.Now().Add(2 * time.Minute); !ready(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the warm pool did not fill to %d within two minutes", n)
		}
	}
	return burstOf(ctx, c, n, v1.CreateSandboxRequest{})
}

// burstOf makes n sandboxes of req at once and returns creates per second; it deletes
// them after (untimed).
func burstOf(ctx context.Context, c *sdk.Client, n int, req v1.CreateSandboxRequest) (float64, error) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	var firstErr error
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := c.Create(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			ids = append(ids, sb.ID)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, id := range ids {
		_ = c.Delete(context.WithoutCancel(ctx), id)
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n) / elapsed.Seconds(), nil
}

// memUsed is the host memory in use, KiB, after dropping clean caches: MemTotal minus
// MemFree, Buffers, Cached and SReclaimable, less this process's own anonymous memory. Dropping caches first makes the figure count
// what sandboxes hold (process memory, kernel objects, dirty and tmpfs pages), not page
// cache that any reader would have warmed.
func memUsed() (int64, error) {
	// The daemons run in this process: return their free heap first, or its release
	// during the measurement would hide the sandboxes' memory.
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
	time.Sleep(500 * time.Millisecond)
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	v := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, rest, ok := strings.Cut(line, ":")
		if f := strings.Fields(rest); ok && len(f) > 0 {
			v[k], _ = strconv.ParseInt(f[0], 10, 64)
		}
	}
	if v["MemTotal"] == 0 {
		return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
	}
	used := v["MemTotal"] - v["MemFree"] - v["Buffers"] - v["Cached"] - v["SReclaimable"]
	// The benchmark's own process (with its in-process daemons and their SQLite caches)
	// grows and shrinks on its own schedule: it is not sandbox memory.
	return used - selfRSSAnon(), nil
}

// selfRSSAnon is this process's anonymous resident memory in KiB.
func selfRSSAnon() int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// initRSS is the median VmRSS (KiB) of the host's moat-init processes.
func initRSS() float64 {
	var rss []float64
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, _ := os.ReadFile(filepath.Join(d, "comm"))
		if strings.TrimSpace(string(comm)) != "moat-init" {
			continue
		}
		status, _ := os.ReadFile(filepath.Join(d, "status"))
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(rest)
				if v, err := strconv.ParseFloat(f[0], 64); err == nil {
					rss = append(rss, v)
				}
			}
		}
	}
	if len(rss) == 0 {
		return 0
	}
	slices.Sort(rss)
	return rss[len(rss)/2]
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	ms := make([]float64, len(ds))
	for i, d := range ds {
		ms[i] = float64(d.Microseconds()) / 1000
	}
	slices.Sort(ms)
	pct := func(p float64) float64 {
		i := int(p*float64(len(ms))+0.5) - 1
		return ms[max(0, min(i, len(ms)-1))]
	}
	return Latency{P50: pct(0.50), P99: pct(0.99), Min: ms[0], N: len(ms)}
}
