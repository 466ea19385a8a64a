package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
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
