package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
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
