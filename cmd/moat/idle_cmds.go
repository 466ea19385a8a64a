package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/bench"
	"github.com/moatdev/moat/internal/daemon"
)

// lifecycleFlags are create's and run's idle-stop and unused-deletion settings.
type lifecycleFlags struct {
	idle, deleteAfter string
	archive           bool
}

func (f *lifecycleFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.idle, "idle", "", "stop the sandbox after this long without activity (no API call or open exec/file/PTY stream, no CPU use), e.g. 10m; the next exec, file call or PTY starts it again (default: the daemon's, 5m; 0: never)")
	fl.StringVar(&f.deleteAfter, "delete-after", "", "delete the sandbox after this long unused, whatever its state, e.g. 7d (default: the daemon's, 7d; 0: never)")
	fl.BoolVar(&f.archive, "archive", false, "before that deletion, write the drive's content to <data>/archives/<id>.tar.zst (moat archive ls)")
}

// apply puts the flags into req.
func (f *lifecycleFlags) apply(req *v1.CreateSandboxRequest) error {
	for _, x := range []struct {
		flag, val string
		to        **int64
	}{{"idle", f.idle, &req.IdleSeconds}, {"delete-after", f.deleteAfter, &req.DeleteAfterSeconds}} {
		if x.val == "" {
			continue
		}
		d, err := parseDays(x.val)
		if err != nil {
			return fmt.Errorf("--%s: %w", x.flag, err)
		}
		n := int64((d + time.Second - 1) / time.Second)
		*x.to = &n
	}
	if f.archive && req.DeleteAfterSeconds != nil && *req.DeleteAfterSeconds == 0 {
		return fmt.Errorf("--archive: archives are written at deletion after --delete-after, which is 0 (never)")
	}
	req.Archive = f.archive
	return nil
}

// parseDays is parseDuration that also takes whole days ("7d").
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days < 0 || days > 100000 {
			return 0, fmt.Errorf("duration %q: expected e.g. 90s, 5m, 1h or 7d", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return parseDuration(s)
}

// lifecycleColumns are moat ls's LAST USE, IDLE STOP and DELETE columns of sb, relative to
// now: "-" where nothing will happen.
func lifecycleColumns(sb v1.Sandbox, now time.Time) (last, idle, del string) {
	last = ago(now.Sub(sb.LastUsedAt)) + " ago"
	idle, del = "-", "-"
	if sb.IdleStopAt != nil {
		idle = "in " + ago(sb.IdleStopAt.Sub(now))
	} else if sb.State == "stopped" && sb.StopReason == "idle" {
		idle = "idle-stopped"
	} else if sb.State == "paused" && sb.StopReason == "idle" {
		idle = "idle-frozen"
	}
	if sb.DeleteAt != nil {
		del = "in " + ago(sb.DeleteAt.Sub(now))
		if sb.Archive {
			del += " (archive)"
		}
	}
	return last, idle, del
}

// ago is a short rounded duration: 45s, 12m, 3h, 6d.
func ago(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// resumeRatios is bench's ratio column of a resume row: to the raw runtime's p50, then
// to the warm and the cold create of the same run.
func resumeRatios(raw, l bench.Latency, warm *bench.Latency, cold bench.Latency) string {
	s := "-"
	if raw.P50 > 0 {
		s = fmt.Sprintf("%.2f", l.P50/raw.P50)
	}
	if warm != nil && warm.P50 > 0 {
		s += fmt.Sprintf(" (%.2f× warm create)", l.P50/warm.P50)
	}
	if cold.P50 > 0 {
		s += fmt.Sprintf(" (%.2f× cold create)", l.P50/cold.P50)
	}
	return s
}

func (a *app) archiveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "Drive archives of sandboxes deleted after their unused period (--archive)",
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List drive archives: <data>/archives/<id>.tar.zst (zstd-compressed tar of the drive's overlay upper directories)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Archives(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []v1.Archive{}
				}
				return printJSON(list)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SANDBOX\tARCHIVED\tSIZE\tPATH")
			for _, x := range list {
				fmt.Fprintf(tw, "%s\t%s\t%.1f MiB\t%s\n", termSafe(x.ID), x.Time.Local().Format("2006-01-02 15:04:05"), float64(x.Bytes)/(1<<20), termSafe(x.Path))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	rm := &cobra.Command{
		Use:   "rm SANDBOX...",
		Short: "Remove the drive archives of deleted sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			var errs []error
			for _, id := range args {
				if err := c.DeleteArchive(cmd.Context(), id); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					continue
				}
				fmt.Println(id)
			}
			return errors.Join(errs...)
		},
	}
	cmd.AddCommand(ls, rm)
	return cmd
}

// serveLifecycle are serve's defaults of the idle and unused periods.
type serveLifecycle struct{ idle, deleteAfter, freeze, archiveKeep string }

func (f *serveLifecycle) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.idle, "idle", "", "idle period of sandboxes whose create names none (default 5m; 0: no idle stop)")
	cmd.Flags().StringVar(&f.deleteAfter, "delete-after", "", "unused period after which sandboxes whose create names none are deleted (default 7d; 0: never)")
	cmd.Flags().StringVar(&f.archiveKeep, "archive-keep", "", "how long drive archives (--archive) are kept before they are removed (default 0: for ever; moat archive rm removes one)")
	cmd.Flags().StringVar(&f.freeze, "idle-freeze", "", "how long an idle sandbox stays frozen (memory kept, resumed in milliseconds) before it is stopped (memory freed; default 10m; 0: stopped at once)")
}

// apply sets cfg's defaults; 0 becomes "off" (negative in daemon.Config).
func (f *serveLifecycle) apply(cfg *daemon.Config) error {
	for _, x := range []struct {
		flag, val string
		to        *time.Duration
	}{{"idle", f.idle, &cfg.DefaultIdle}, {"delete-after", f.deleteAfter, &cfg.DefaultDeleteAfter}, {"idle-freeze", f.freeze, &cfg.IdleFreeze}} {
		if x.val == "" {
			continue
		}
		d, err := parseDays(x.val)
		if err != nil {
			return fmt.Errorf("--%s: %w", x.flag, err)
		}
		if d == 0 {
			d = -1
		}
		*x.to = d
	}
	if f.archiveKeep != "" {
		d, err := parseDays(f.archiveKeep)
		if err != nil {
			return fmt.Errorf("--archive-keep: %w", err)
		}
		cfg.ArchiveKeep = d // 0: for ever
	}
	return nil
}
