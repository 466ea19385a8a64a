package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// Observing sandboxes (issue 13 item 8): moat stats, moat logs.

func (a *app) statsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats ID",
		Short: "Show a running sandbox's CPU, memory, tasks, drive and network use",
		Long: `stats samples a running or paused sandbox once: CPU over 200 ms (percent of the cores it
may use) and in total this run, memory (working set) against its limit, tasks against its
pids limit (and how often a fork was refused at it), its drive, and the bytes and packets it
sent and received since it started. Under runsc, tasks are the guest's as gVisor counts
them.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			st, err := c.Stats(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(st)
			}
			return printStats(os.Stdout, st)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printStats prints a sample as `moat stats` does.
func printStats(w io.Writer, st *v1.SandboxStats) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CPU\t%.1f%% of %g cores\t%s used this run\n", st.CPUPercent, st.CPUCores, (time.Duration(st.CPUUsageNs) * time.Nanosecond).Round(time.Millisecond))
	fmt.Fprintf(tw, "MEMORY\t%s\tof %s\n", humanBytes(st.MemoryBytes), humanBytes(st.MemoryLimitBytes))
	if st.Pids != nil {
		limit := "no limit"
		if st.PidsLimit != nil && *st.PidsLimit > 0 {
			limit = fmt.Sprintf("of %d", *st.PidsLimit)
		}
		hits := ""
		if st.PidsLimitHits != nil && *st.PidsLimitHits > 0 {
			hits = fmt.Sprintf(" (%d forks refused at the limit)", *st.PidsLimitHits)
		}
		fmt.Fprintf(tw, "TASKS\t%d\t%s%s\n", *st.Pids, limit, hits)
	}
	fmt.Fprintf(tw, "DISK\t%s\tof %s\n", humanBytes(st.DiskUsedBytes), humanBytes(st.DiskTotalBytes))
	if st.NetRxBytes != nil && st.NetTxBytes != nil {
		fmt.Fprintf(tw, "NET RX\t%s\t%d packets\n", humanBytes(int64(*st.NetRxBytes)), deref(st.NetRxPackets))
		fmt.Fprintf(tw, "NET TX\t%s\t%d packets\n", humanBytes(int64(*st.NetTxBytes)), deref(st.NetTxPackets))
	}
	return tw.Flush()
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

func (a *app) logsCmd() *cobra.Command {
	var pid uint32
	var tag string
	var follow, list, asJSON bool
	cmd := &cobra.Command{
		Use:   "logs ID [--pid N | --tag T] [-f]",
		Short: "Show the output of processes started in a sandbox (background ones too)",
		Long: `logs shows what processes started through the API wrote: E2B's commands.run (background
commands too, whose client went away), moat exec and moat run. The sandbox keeps the last
64 KiB of output of each of its 64 most recent processes while it runs.

Without --pid or --tag, logs prints every kept process's output, each after a header line;
with one, that process's output (stdout to stdout, stderr to stderr). -f follows the process
until it ends (without --pid or --tag: the newest running one). --list (or --json) lists the
processes instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if pid != 0 && tag != "" {
				return errors.New("logs: --pid or --tag, not both")
			}
			ctx := cmd.Context()
			c, err := a.connect(ctx)
			if err != nil {
				return err
			}
			id := args[0]
			if pid != 0 || tag != "" {
				return printLogs(ctx, c, id, pid, tag, follow)
			}
			procs, err := c.ProcessLogs(ctx, id)
			if err != nil {
				return err
			}
			if asJSON {
				if procs == nil {
					procs = []v1.ProcessLog{}
				}
				return printJSON(procs)
			}
			if list {
				tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "PID\tTAG\tSTARTED\tSTATUS\tOUTPUT\tCOMMAND")
				for _, p := range procs {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.PID, termSafe(orDash(p.Tag)), p.Started.Local().Format("15:04:05"),
						termSafe(procStatus(p)), humanBytes(p.Bytes), termSafe(procCommand(p)))
				}
				return tw.Flush()
			}
			if follow {
				for i := len(procs) - 1; i >= 0; i-- {
					if procs[i].Running {
						fmt.Fprintf(os.Stderr, "moat: following pid %d: %s\n", procs[i].PID, termSafe(procCommand(procs[i])))
						return printLogs(ctx, c, id, procs[i].PID, "", true)
					}
				}
				return errors.New("logs -f: no process of this sandbox is running (give --pid or --tag to read an ended one's)")
			}
			for _, p := range procs {
				fmt.Printf("==> pid %d%s: %s (%s) <==\n", p.PID, tagSuffix(p.Tag), termSafe(procCommand(p)), termSafe(procStatus(p)))
				if err := printLogs(ctx, c, id, p.PID, "", false); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().Uint32Var(&pid, "pid", 0, "the process (moat logs ID --list shows them)")
	cmd.Flags().StringVar(&tag, "tag", "", "the newest process with this tag (E2B's tag of a started process)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing output until the process ends")
	cmd.Flags().BoolVar(&list, "list", false, "list the processes whose output is kept")
	cmd.Flags().BoolVar(&asJSON, "json", false, "list the processes as JSON")
	return cmd
}

// printLogs prints one process's kept output: stdout and terminal output to stdout, stderr
// to stderr, and what is no longer kept and how it ended as notes on stderr.
func printLogs(ctx context.Context, c *sdk.Client, id string, pid uint32, tag string, follow bool) error {
	return c.Logs(ctx, id, pid, tag, follow, func(ch v1.LogChunk) error {
		switch {
		case ch.Dropped > 0:
			fmt.Fprintf(os.Stderr, "moat: [%d bytes of earlier output no longer kept]\n", ch.Dropped)
		case ch.End != nil && follow:
			fmt.Fprintf(os.Stderr, "moat: pid %d ended: %s\n", ch.End.PID, termSafe(procStatus(*ch.End)))
		case ch.Stream == "stderr":
			_, err := os.Stderr.Write(ch.Data)
			return err
		case len(ch.Data) > 0:
			_, err := os.Stdout.Write(ch.Data)
			return err
		}
		return nil
	})
}

func procStatus(p v1.ProcessLog) string {
	if p.Running {
		return "running"
	}
	return p.Status
}

func procCommand(p v1.ProcessLog) string {
	return strings.TrimSpace(p.Cmd + " " + shellLine(p.Args))
}

func tagSuffix(tag string) string {
	if tag == "" {
		return ""
	}
	return " (tag " + termSafe(tag) + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
