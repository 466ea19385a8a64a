package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/moatdev/moat/internal/bench"
	"github.com/moatdev/moat/internal/daemon"
	moatruntime "github.com/moatdev/moat/internal/runtime"
)

// The system-call figure of moat bench (internal/bench/syscalls.go): runc, the Debian
// runsc of 2022 (ptrace) and the current runsc that make deps builds (systrap), each
// through a daemon whose RuntimePaths picks its binary.

const currentRunscLabel = "runsc (current)"

type syscallFlags struct {
	on                bool
	runs, files       int
	current, old      string
	oldRuns, oldWrite int
}

func (f *syscallFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.on, "syscalls", false, "also time system-call-heavy commands (dd loop, git status, python import) under runc, the runsc of 2022 and the current runsc (1.5–3 minutes)")
	cmd.Flags().IntVar(&f.runs, "syscall-runs", 5, "runs of each system-call-heavy command per runtime, timed in the sandbox (with --syscalls)")
	cmd.Flags().IntVar(&f.files, "syscall-files", bench.GitFiles, "files of the git status figure's tree")
	cmd.Flags().StringVar(&f.current, "runsc-current", "/usr/local/lib/moat/runsc", "the current runsc (make deps builds it): the runsc of every figure, when installed")
	cmd.Flags().StringVar(&f.old, "runsc-2022", "/usr/bin/runsc", "the Debian runsc of 2022 (ptrace) for the system-call figure; \"\": skip it")
	cmd.Flags().IntVar(&f.oldRuns, "syscall-2022-runs", 3, "runs of each command under the runsc of 2022")
	cmd.Flags().IntVar(&f.oldWrite, "syscall-2022-writes", bench.DDWrites/10, "one-byte writes of the dd loop under the runsc of 2022 (its time is scaled to 200000)")
}

// validate checks the flags before any daemon starts.
func (f syscallFlags) validate() error {
	if f.runs <= 0 || f.files <= 0 || f.oldRuns <= 0 || f.oldWrite <= 0 {
		return fmt.Errorf("--syscall-runs, --syscall-files, --syscall-2022-runs and --syscall-2022-writes must be positive")
	}
	return nil
}

// executable says why path is not an executable file ("" when it is).
func executable(path string) string {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Sprintf("not installed (%s: %v)", path, err)
	case !moatruntime.ExecutableFile(st):
		return path + " is not an executable file"
	}
	return ""
}

// coldPaths are the runtime binaries of the bench's cold and warm daemons: runsc is the
// current build when it is installed (else moat's choice).
func (f syscallFlags) coldPaths() map[string]string {
	if f.current == "" || executable(f.current) != "" {
		return nil
	}
	return map[string]string{"runsc": f.current}
}

// benchSyscalls adds the system-call figure to res: runc and the current runsc on the cold
// daemon, the runsc of 2022 on a daemon of its own; then the latency target of the current
// runsc, from res's latency figure.
func (a *app) benchSyscalls(ctx context.Context, cold *benchEnv, paths map[string]string, f syscallFlags, res *bench.Result, progress func(string)) error {
	if !f.on {
		return nil
	}
	args := daemon.RuntimeArgs(cold.runDir, paths)
	runc := bench.SyscallTarget{Label: "runc", Runtime: "runc", Client: cold.client}
	if bin, _, err := args("runc"); err != nil {
		runc.Skip = err.Error()
	} else {
		runc.Binary = bin
	}
	old := bench.SyscallTarget{Label: "runsc (2022)", Runtime: "runsc", Binary: f.old, Runs: f.oldRuns, DDCount: f.oldWrite}
	switch {
	case f.old == "":
		old.Skip = "--runsc-2022 \"\""
	case executable(f.old) != "":
		old.Skip = executable(f.old)
	default:
		env, stop, err := a.benchDaemonListen(ctx, "runsc2022", nil, 0xc0000000, 0, "", map[string]string{"runsc": f.old})
		if err != nil {
			old.Skip = "its daemon did not start: " + err.Error()
		} else {
			defer stop()
			old.Client = env.client
		}
	}
	cur := bench.SyscallTarget{Label: currentRunscLabel, Runtime: "runsc", Binary: paths["runsc"], Client: cold.client}
	if cur.Binary == "" {
		cur.Binary, cur.Skip = f.current, executable(f.current)
		if f.current == "" {
			cur.Skip = "--runsc-current \"\""
		}
	}
	sr := bench.Syscalls(ctx, []bench.SyscallTarget{runc, old, cur}, bench.SyscallOptions{Runs: f.runs, Files: f.files, Progress: progress}, currentRunscLabel)
	var lat *bench.RuntimeResult
	for i := range res.Runtimes {
		if res.Runtimes[i].Runtime == "runsc" && cur.Skip == "" {
			lat = &res.Runtimes[i]
		}
	}
	v := bench.LatencyVerdict(lat, currentRunscLabel)
	if cur.Skip != "" { // the latency figure's runsc was another binary
		v.Note = currentRunscLabel + " skipped: " + cur.Skip
	}
	sr.Targets = append(sr.Targets, v)
	res.Syscalls = sr
	return nil
}

// printBenchSyscalls prints the system-call figure of moat bench.
func printBenchSyscalls(sr *bench.SyscallResult) {
	if sr == nil {
		return
	}
	fmt.Printf("system calls (timed inside the sandbox; git tree of %d files; dd loop of %d one-byte writes; load average %.1f before, %.1f after):\n", sr.Files, sr.DDWrites, sr.LoadBefore, sr.LoadAfter)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RUNTIME\tWORKLOAD\tMEDIAN\tMIN\tRATIO TO RUNC\tRUNS\tEXEC p50 (through the API)\tBINARY")
	for _, r := range sr.Runtimes {
		switch {
		case r.Skipped != "":
			fmt.Fprintf(tw, "  %s\tskipped: %s\n", r.Label, termSafe(r.Skipped))
			continue
		case r.Error != "" && len(r.Workloads) == 0:
			fmt.Fprintf(tw, "  %s\terror: %s\n", r.Label, termSafe(r.Error))
			continue
		}
		for _, w := range r.Workloads {
			median := fmt.Sprintf("%.1f ms", w.Median)
			if w.Scale != 1 {
				median += fmt.Sprintf(" (%.1f ms ×%g)", w.Inside.P50, w.Scale)
			}
			ratio := "-"
			if w.Ratio > 0 {
				ratio = fmt.Sprintf("%.2f", w.Ratio)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.1f ms\t%s\t%d\t%.1f ms\t%s\n", r.Label, w.Workload, median, w.Inside.Min*w.Scale, ratio, w.Inside.N, w.Exec.P50, r.Binary)
		}
		if r.Error != "" {
			fmt.Fprintf(tw, "  %s\terror: %s\n", r.Label, termSafe(r.Error))
		}
	}
	tw.Flush()
	for _, v := range sr.Targets {
		fmt.Printf("target: %s ≤ %g×: %s\n", v.What, v.Max, verdictText(v))
	}
}

func verdictText(v bench.Verdict) string {
	switch {
	case v.Note != "":
		return "unknown (" + termSafe(v.Note) + ")"
	case v.Met:
		return fmt.Sprintf("%.2f× met", v.Ratio)
	}
	return fmt.Sprintf("%.2f× NOT met", v.Ratio)
}

// printBenchBinaries says which executable each runtime of the latency figure was.
func printBenchBinaries(rs []bench.RuntimeResult) {
	var parts []string
	for _, r := range rs {
		if r.Binary != "" {
			parts = append(parts, r.Runtime+" "+r.Binary)
		}
	}
	if len(parts) > 0 {
		fmt.Printf("runtimes: %s\n", strings.Join(parts, ", "))
	}
}
