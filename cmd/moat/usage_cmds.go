package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/usage"
)

// Metering (issue 16): moat usage.

func (a *app) usageCmd() *cobra.Command {
	var since, until, by string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "usage [--since T] [--until T] [--by sandbox|template|api-key]",
		Short: "Show metered usage: wall time by state, CPU, memory, drive, egress, API calls",
		Long: `usage reads the daemon's usage ledger: for each sandbox (kept after it is deleted), the
API key that created it, wall time running, paused and stopped, CPU-seconds and memory
GiB-hours from its cgroup, drive GiB-hours (its allocated size), GiB-hours of the snapshots
taken of it (while each is kept), and egress bytes by
destination; then the API calls by key. --by template or --by api-key sums the sandboxes'
rows. --since and --until take an RFC 3339 time, a date (2026-12-01, UTC) or a duration
before now (90m, 24h, 7d); the ledger keeps hourly sums, so a window starts at the hour that
holds --since. The daemon samples the cgroups every 15 s (moatd --meter-interval) and once
more when a sandbox stops; wall time is exact. An API key sees only its own usage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			s, err := usage.ParseTime(since, now)
			if err != nil {
				return fmt.Errorf("usage --since: %w", err)
			}
			u, err := usage.ParseTime(until, now)
			if err != nil {
				return fmt.Errorf("usage --until: %w", err)
			}
			if !s.IsZero() && !u.IsZero() && !u.After(s) {
				return fmt.Errorf("usage: --until (%s) is not after --since (%s)", u.Format(time.RFC3339), s.Format(time.RFC3339))
			}
			if by, err = usage.ParseBy(by); err != nil {
				return fmt.Errorf("usage --by: %w", err)
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			rep, err := c.Usage(cmd.Context(), s, u, by)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(rep)
			}
			return printUsage(os.Stdout, rep)
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "from this time (RFC 3339, YYYY-MM-DD, or a duration before now: 24h, 7d)")
	cmd.Flags().StringVar(&until, "until", "", "up to this time (default now)")
	cmd.Flags().StringVar(&by, "by", "sandbox", "group by sandbox, template or api-key")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printUsage prints a report as `moat usage` does.
func printUsage(w io.Writer, rep *v1.UsageReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	switch rep.By {
	case "sandbox":
		fmt.Fprint(tw, "SANDBOX\tTEMPLATE\tAPI KEY\t")
	case "template":
		fmt.Fprint(tw, "TEMPLATE\tSANDBOXES\tCREATED\t")
	default:
		fmt.Fprint(tw, "API KEY\tSANDBOXES\tCREATED\t")
	}
	fmt.Fprintln(tw, "RUNNING\tPAUSED\tSTOPPED\tCPU-S\tMEM GIB-H\tDRIVE GIB-H\tSNAP GIB-H\tEGRESS")
	for _, r := range rep.Rows {
		switch rep.By {
		case "sandbox":
			id := r.Key
			if r.DeletedAt != nil {
				id += " (deleted)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t", termSafe(id), termSafe(orDash(r.Template)), keyName(r.APIKey))
		case "template":
			fmt.Fprintf(tw, "%s\t%d\t%d\t", termSafe(orDash(r.Key)), r.Sandboxes, r.Creations)
		default:
			fmt.Fprintf(tw, "%s\t%d\t%d\t", keyName(r.Key), r.Sandboxes, r.Creations)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.4f\t%.4f\t%.4f\t%s\n", secs(r.RunningSeconds), secs(r.PausedSeconds), secs(r.StoppedSeconds),
			r.CPUSeconds, r.MemoryGiBHours, r.DriveGiBHours, r.SnapshotGiBHours, egressSummary(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.APICalls) > 0 {
		keys := make([]string, 0, len(rep.APICalls))
		for k := range rep.APICalls {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", keyName(k), rep.APICalls[k]))
		}
		fmt.Fprintf(w, "API calls: %s\n", strings.Join(parts, ", "))
	}
	return nil
}

func keyName(k string) string {
	if k == "" {
		return "(operator)"
	}
	return termSafe(k)
}

func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

// egressSummary is the total and the top destination of a row.
func egressSummary(r v1.UsageRow) string {
	if r.EgressBytesTotal == 0 {
		return "-"
	}
	top, n := "", int64(-1)
	for d, b := range r.EgressBytes {
		if b > n || (b == n && d < top) {
			top, n = d, b
		}
	}
	s := humanBytes(r.EgressBytesTotal)
	if len(r.EgressBytes) > 1 {
		s += fmt.Sprintf(" (%d destinations, most %s)", len(r.EgressBytes), termSafe(top))
	} else if top != "" {
		s += " (" + termSafe(top) + ")"
	}
	return s
}
