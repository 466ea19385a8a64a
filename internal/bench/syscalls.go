package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// The system-call figure (issue 14): system-call-heavy commands run in a sandbox of each
// runtime through the moat API, timed inside the sandbox.
//
// Each run is one exec of bash that reads $EPOCHREALTIME (a builtin: no process, one
// clock read) just before and just after the command and prints both. The figure is
// their difference: the command's fork, exec and run under the runtime, without the exec's
// trip through the API, moat-init and the runtime's exec path. That trip costs tens of
// milliseconds under runsc and varies by as much from one exec to the next, more than the
// whole of runc's dd loop; subtracting an empty exec's duration would leave that noise
// twice in the figure. The exec's own duration, seen from here, is kept beside it (Exec)
// as a cross-check: the inside figure can never exceed it.

// DDWrites is the syscall loop's one-byte writes (each is a read of /dev/zero and a
// write to /dev/null: two system calls).
const DDWrites = 200000

// GitFiles is the default size of the git status figure's tree.
const GitFiles = 10000

// Workload names.
const (
	WorkloadDD        = "dd_1byte_writes"
	WorkloadGitStatus = "git_status"
	WorkloadPython    = "python_import_json"
)

// Targets from the issue: the current runsc against runc in the same run, and its
// create → first output through moat against the raw runsc.
const (
	TargetDDRatio      = 10.0
	TargetRealRatio    = 2.0
	TargetLatencyRatio = 1.5
)

// SyscallTarget is one runtime of the figure: Runtime ("runc", "runsc") of the daemon
// Client talks to, whose binary is Binary. Label names it in the report ("runsc (2022)").
type SyscallTarget struct {
	Label   string
	Runtime string
	Binary  string
	Client  *sdk.Client
	// Skip, when set, says why this runtime is not measured (e.g. its binary is missing).
	Skip string
	// Runs overrides SyscallOptions.Runs (0: the same); DDCount the loop's writes (0:
	// DDWrites): a runtime whose calls are very slow (runsc on ptrace) runs a shorter loop,
	// whose time is scaled to DDWrites for the comparison.
	Runs    int
	DDCount int
}

// SyscallOptions configure the figure.
type SyscallOptions struct {
	Runs     int // measured runs per workload per runtime
	Files    int // files of the git status tree (0: GitFiles)
	Progress func(string)
}

// WorkloadFigure is one workload's times under one runtime, in milliseconds.
type WorkloadFigure struct {
	Workload string  `json:"workload"`
	Command  string  `json:"command"`
	Inside   Latency `json:"inside_sandbox"` // timed by bash in the sandbox
	Exec     Latency `json:"exec_through_api"`
	// Scale multiplies Inside.P50 into Median: DDWrites / the loop's writes when the loop
	// was shortened, else 1.
	Scale  float64 `json:"scale"`
	Median float64 `json:"median_ms"`
	Ratio  float64 `json:"ratio_to_runc,omitempty"` // Median / runc's Median in the same run
}

// SyscallRuntime is the figure of one runtime.
type SyscallRuntime struct {
	Label     string           `json:"label"`
	Runtime   string           `json:"runtime"`
	Binary    string           `json:"binary,omitempty"`
	Skipped   string           `json:"skipped,omitempty"`
	Error     string           `json:"error,omitempty"`
	Workloads []WorkloadFigure `json:"workloads,omitempty"`
}

// Verdict is one target: Ratio against Max. Met is false when the ratio is missing (Note
// says why).
type Verdict struct {
	What  string  `json:"what"`
	Ratio float64 `json:"ratio,omitempty"`
	Max   float64 `json:"max"`
	Met   bool    `json:"met"`
	Note  string  `json:"note,omitempty"`
}

// SyscallResult is the whole figure.
type SyscallResult struct {
	DDWrites int              `json:"dd_writes"`
	Files    int              `json:"git_files"`
	Runtimes []SyscallRuntime `json:"runtimes"`
	Targets  []Verdict        `json:"targets,omitempty"`
	// The host's 1-minute load average before and after (/proc/loadavg): the runsc figures
	// (systrap above all) follow the CPU left to them.
	LoadBefore float64 `json:"load_avg_before"`
	LoadAfter  float64 `json:"load_avg_after"`
}

// workload is one timed command; setup (untimed, once per sandbox) prepares it.
// warm is an untimed first run (the same command, or a shorter one doing the same
// first-use work: reading its binary from the host template or the drive).
type workload struct {
	name, cmd, dir, warm string
}

func workloads(ddCount int) []workload {
	dd := "dd if=/dev/zero of=/dev/null bs=1 count=%d status=none"
	return []workload{
		{WorkloadDD, fmt.Sprintf(dd, ddCount), "", fmt.Sprintf(dd, 100)},
		{WorkloadGitStatus, "git status", "tree", ""},
		{WorkloadPython, "python3 -c 'import json'", "", ""},
	}
}

// timerMark starts the line the timed script prints.
const timerMark = "moat-bench-time"

// timedScript is the bash line timing cmd (run in ~/dir) inside the sandbox: its stdout is
// discarded, its stderr kept for errors.
func timedScript(w workload) string {
	cd := "cd ~"
	if w.dir != "" {
		cd += "/" + w.dir
	}
	return cd + " && s=$EPOCHREALTIME && { " + w.cmd + "; } >/dev/null; rc=$?; e=$EPOCHREALTIME; echo \"" + timerMark + " $rc $s $e\""
}

// treeScript makes the git status tree in ~/tree: files files in directories of 100, their
// times an hour old (so that no index entry is racily clean and status only lstats them),
// committed.
func treeScript(files int) string {
	return `set -e
rm -rf ~/tree && mkdir ~/tree && cd ~/tree
python3 - ` + strconv.Itoa(files) + ` <<'EOF'
import os, sys, time
n = int(sys.argv[1]); t = time.time() - 3600
for i in range(n):
    d = "d%03d" % (i // 100)
    if i % 100 == 0:
        os.mkdir(d)
    p = "%s/f%03d.txt" % (d, i % 100)
    with open(p, "w") as f:
        f.write("file %d\n" % i)
    os.utime(p, (t, t))
EOF
git -c init.defaultBranch=main init -q
git add -A
git -c user.name=bench -c user.email=bench@localhost commit -qm tree
test "$(git ls-files | wc -l)" -eq ` + strconv.Itoa(files) + `
git status --porcelain | head -3
`
}

// ParseTimer reads the line timedScript prints: the command's exit code and the time
// between the two clock reads. It fails on anything else, a negative time included.
func ParseTimer(out string) (code int, d time.Duration, err error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != timerMark {
			continue
		}
		code, err = strconv.Atoi(f[1])
		if err != nil || code < 0 || code > 255 {
			return 0, 0, fmt.Errorf("timer line %q: bad exit code", line)
		}
		s, err1 := parseEpochMicros(f[2])
		e, err2 := parseEpochMicros(f[3])
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("timer line %q: bad time", line)
		}
		if e < s {
			return 0, 0, fmt.Errorf("timer line %q: the clock went back", line)
		}
		return code, time.Duration(e-s) * time.Microsecond, nil
	}
	return 0, 0, fmt.Errorf("no timer line in %q", truncate(out, 200))
}

// parseEpochMicros parses bash's $EPOCHREALTIME ("1733100000.123456") into microseconds.
func parseEpochMicros(s string) (int64, error) {
	sec, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 6 || len(sec) == 0 || len(sec) > 12 {
		return 0, fmt.Errorf("not seconds.micros: %q", s)
	}
	a, err := strconv.ParseUint(sec, 10, 64)
	if err != nil {
		return 0, err
	}
	b, err := strconv.ParseUint(frac, 10, 64)
	if err != nil {
		return 0, err
	}
	return int64(a)*1e6 + int64(b), nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Syscalls measures each target's workloads (a target that fails is reported with its
// error and the others go on), then the ratios to runc and the targets' verdicts on the
// runtime labelled current. It deletes every sandbox it creates.
func Syscalls(ctx context.Context, targets []SyscallTarget, o SyscallOptions, current string) *SyscallResult {
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if o.Files <= 0 {
		o.Files = GitFiles
	}
	res := &SyscallResult{DDWrites: DDWrites, Files: o.Files, LoadBefore: loadAvg()}
	for _, t := range targets {
		r := SyscallRuntime{Label: t.Label, Runtime: t.Runtime, Binary: t.Binary, Skipped: t.Skip}
		if t.Skip == "" {
			if err := syscallRuntime(ctx, t, o, &r); err != nil {
				r.Error = err.Error()
			}
		}
		res.Runtimes = append(res.Runtimes, r)
	}
	res.LoadAfter = loadAvg()
	SetRatios(res.Runtimes)
	res.Targets = SyscallVerdicts(res.Runtimes, current)
	return res
}

// loadAvg is the host's 1-minute load average (0 when unknown).
func loadAvg() float64 {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func syscallRuntime(ctx context.Context, t SyscallTarget, o SyscallOptions, r *SyscallRuntime) error {
	runs := o.Runs
	if t.Runs > 0 {
		runs = t.Runs
	}
	dd := t.DDCount
	if dd <= 0 {
		dd = DDWrites
	}
	o.Progress(fmt.Sprintf("syscalls: %s: a sandbox, a git tree of %d files in it", strings.TrimSpace(t.Label+" "+t.Binary), o.Files))
	sb, err := t.Client.Create(ctx, v1.CreateSandboxRequest{Runtime: t.Runtime, MemoryBytes: 512 << 20, DiskBytes: 512 << 20})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer func() { _ = t.Client.Delete(context.WithoutCancel(ctx), sb.ID) }()
	var outb, errb limited
	code, err := t.Client.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", treeScript(o.Files)}, Stdout: &outb, Stderr: &errb})
	if err != nil || code != 0 {
		return fmt.Errorf("making the git tree: %v (exit %d) %s", err, code, strings.TrimSpace(errb.String()))
	}
	if s := strings.TrimSpace(outb.String()); s != "" {
		return fmt.Errorf("the git tree is not clean after its commit: %s", s)
	}
	for _, w := range workloads(dd) {
		o.Progress(fmt.Sprintf("syscalls: %s: %d × %s", t.Label, runs, w.cmd))
		warm := w
		if w.warm != "" {
			warm.cmd = w.warm
		}
		if _, _, err := timedExec(ctx, t.Client, sb.ID, warm); err != nil {
			return err
		}
		var inside, outer []time.Duration
		for range runs {
			in, out, err := timedExec(ctx, t.Client, sb.ID, w)
			if err != nil {
				return err
			}
			inside, outer = append(inside, in), append(outer, out)
		}
		f := WorkloadFigure{Workload: w.name, Command: w.cmd, Inside: summarize(inside), Exec: summarize(outer), Scale: 1}
		if w.name == WorkloadDD {
			f.Scale = float64(DDWrites) / float64(dd)
		}
		f.Median = f.Inside.P50 * f.Scale
		r.Workloads = append(r.Workloads, f)
	}
	return nil
}

// timedExec runs w once, timed inside the sandbox (timedScript) and around the exec.
func timedExec(ctx context.Context, c *sdk.Client, id string, w workload) (inside, outer time.Duration, err error) {
	var out, errb limited
	start := time.Now()
	code, err := c.Exec(ctx, id, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", timedScript(w)}, Stdout: &out, Stderr: &errb})
	outer = time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", w.cmd, err)
	}
	rc, inside, perr := ParseTimer(out.String())
	if code != 0 || perr != nil || rc != 0 {
		return 0, 0, fmt.Errorf("%s: exit %d (command %d) %v: %s", w.cmd, code, rc, perr, strings.TrimSpace(errb.String()))
	}
	return inside, outer, nil
}

// SetRatios sets each workload's ratio to the runtime "runc"'s median of the same workload
// (none when runc has no figure for it).
func SetRatios(rs []SyscallRuntime) {
	base := map[string]float64{}
	for _, r := range rs {
		if r.Runtime == "runc" {
			for _, w := range r.Workloads {
				base[w.Workload] = w.Median
			}
		}
	}
	for i := range rs {
		for j := range rs[i].Workloads {
			w := &rs[i].Workloads[j]
			w.Ratio = 0
			if b := base[w.Workload]; b > 0 && w.Median > 0 {
				w.Ratio = w.Median / b
			}
		}
	}
}

// Check is the verdict of ratio against max; a missing ratio (0) is not met.
func Check(what string, ratio, max float64, missing string) Verdict {
	v := Verdict{What: what, Ratio: ratio, Max: max, Met: ratio > 0 && ratio <= max}
	if ratio <= 0 {
		v.Ratio, v.Note = 0, missing
	}
	return v
}

// SyscallVerdicts checks the targets on the runtime labelled current: ≤ 10× runc
// on the dd loop, ≤ 2× on git status and the python import.
func SyscallVerdicts(rs []SyscallRuntime, current string) []Verdict {
	var cur *SyscallRuntime
	for i := range rs {
		if rs[i].Label == current {
			cur = &rs[i]
		}
	}
	var out []Verdict
	for _, t := range []struct {
		w   string
		max float64
	}{{WorkloadDD, TargetDDRatio}, {WorkloadGitStatus, TargetRealRatio}, {WorkloadPython, TargetRealRatio}} {
		ratio, missing := 0.0, "not measured"
		switch {
		case cur == nil:
			missing = current + " not in this run"
		case cur.Skipped != "":
			missing = current + " skipped: " + cur.Skipped
		case cur.Error != "":
			missing = current + " failed: " + cur.Error
		default:
			for _, w := range cur.Workloads {
				if w.Workload == t.w {
					ratio = w.Ratio
				}
			}
			if ratio == 0 {
				missing = "no runc figure to compare with"
			}
		}
		out = append(out, Check(fmt.Sprintf("%s / runc, %s", current, t.w), ratio, t.max, missing))
	}
	return out
}

// LatencyVerdict checks create → first output through moat against the raw runtime
// (RuntimeResult.Ratio) for the runtime labelled label: ≤ 1.5×. An error of a later figure
// of the same runtime (warm, resume) does not void a ratio that was measured.
func LatencyVerdict(r *RuntimeResult, label string) Verdict {
	what := label + " create → first output, moat / raw"
	switch {
	case r == nil:
		return Check(what, 0, TargetLatencyRatio, "not in this run (--runtimes)")
	case r.Ratio <= 0 && r.Error != "":
		return Check(what, 0, TargetLatencyRatio, "failed: "+r.Error)
	}
	return Check(what, r.Ratio, TargetLatencyRatio, "no raw baseline")
}
