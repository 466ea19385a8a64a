package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/sdk"
)

// errAuditFailed: moat audit verify found a problem (exit 1, the problems printed).
var errAuditFailed = errors.New("the audit log failed verification")

// auditCmd is `moat audit [--sandbox ID] [--since T] [--json] [--follow]`, `moat audit
// verify [--json]` and `moat audit export`.
func (a *app) auditCmd() *cobra.Command {
	var sandboxID, since string
	var asJSON, follow bool
	cmd := &cobra.Command{
		Use:   "audit [--sandbox ID] [--since T] [--json] [--follow]",
		Short: "Print the daemon's tamper-evident audit log (operator only); verify or export it",
		Long: `The audit log is one append-only record of security-relevant events: sandbox lifecycle,
exec (command and user), file writes through the API (path and size), policy and phase
changes, credential use, GitHub token mint and revoke, approvals and their decisions and
git-gate decisions, each with who did it (operator, key:<id> or daemon). Each record
carries the SHA-256 of the previous one; the daemon signs the chain's head with its key
(<data>/audit.key) every sweep. 'moat audit verify' checks the chain.

--since takes an RFC 3339 time or a duration back from now (1h, 2d).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return streamAudit(cmd.Context(), c, sandboxID, t, follow, func(recs []v1.AuditRecord) error {
				if asJSON {
					for _, r := range recs {
						if err := printJSONLine(r); err != nil {
							return err
						}
					}
					return nil
				}
				return printAudit(os.Stdout, recs)
			})
		},
	}
	cmd.Flags().StringVar(&sandboxID, "sandbox", "", "only records of this sandbox (its ID)")
	cmd.Flags().StringVar(&since, "since", "", "only records from this time (RFC 3339, or a duration back from now: 30m, 2d)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON record a line")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records as they are written")

	var verifyJSON bool
	verify := &cobra.Command{
		Use:   "verify [--json]",
		Short: "Check the audit chain: edited, removed or reordered records and bad checkpoint signatures, each named by sequence number",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			v, err := c.VerifyAudit(cmd.Context())
			if err != nil {
				return err
			}
			if verifyJSON {
				if err := printJSON(v); err != nil {
					return err
				}
			} else {
				printVerification(os.Stdout, v)
			}
			if !v.OK {
				cmd.SilenceErrors = verifyJSON
				return errAuditFailed
			}
			return nil
		},
	}
	verify.Flags().BoolVar(&verifyJSON, "json", false, "print JSON")

	var exSandbox, exSince string
	export := &cobra.Command{
		Use:   "export [--sandbox ID] [--since T]",
		Short: "Write the audit log as JSONL (one record a line, with its prev and hash) to stdout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := parseSince(exSince, time.Now())
			if err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			return streamAudit(cmd.Context(), c, exSandbox, t, false, func(recs []v1.AuditRecord) error {
				for _, r := range recs {
					if err := printJSONLine(r); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	export.Flags().StringVar(&exSandbox, "sandbox", "", "only records of this sandbox (its ID)")
	export.Flags().StringVar(&exSince, "since", "", "only records from this time (RFC 3339, or a duration back from now)")
	cmd.AddCommand(verify, export)
	return cmd
}

// streamAudit reads the records in pages, then (follow) polls for new ones until ctx ends.
func streamAudit(ctx context.Context, c *sdk.Client, sandboxID string, since time.Time, follow bool, print func([]v1.AuditRecord) error) error {
	const page = 1000
	var after int64
	for {
		recs, err := c.Audit(ctx, sandboxID, since, after, page)
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if len(recs) > 0 {
			if err := print(recs); err != nil {
				return err
			}
			after = recs[len(recs)-1].Seq
		}
		if len(recs) == page {
			continue
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// parseSince reads --since: empty, an RFC 3339 time, or a duration back from now (parseDays).
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := parseDays(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-12-02T06:00:00Z) or a duration back from now (30m, 2d)", s)
	}
	return now.Add(-d), nil
}

func printAudit(w io.Writer, recs []v1.AuditRecord) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range recs {
		t := r.Time
		if pt, err := time.Parse(time.RFC3339Nano, r.Time); err == nil {
			t = pt.Local().Format("2006-01-02 15:04:05.000")
		}
		sb := r.Sandbox
		if sb == "" {
			sb = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Seq, t, sb, r.Actor, r.Kind, strings.ReplaceAll(r.Detail, "\n", " "))
	}
	return tw.Flush()
}

func printVerification(w io.Writer, v v1.AuditVerification) {
	if v.OK {
		fmt.Fprintf(w, "audit log OK: %d records (%d to %d), %d signed checkpoints, key %s\n", v.Records, v.First, v.Last, v.Checkpoints, v.PublicKey)
		return
	}
	fmt.Fprintf(w, "audit log FAILED verification: %d records (%d to %d), %d checkpoints, %d problems:\n", v.Records, v.First, v.Last, v.Checkpoints, len(v.Problems))
	for _, p := range v.Problems {
		fmt.Fprintf(w, "  record %d: %s: %s\n", p.Seq, p.Kind, p.Message)
	}
}

// auditServeFlags are serve's audit retention flags.
type auditServeFlags struct{ keep, max string }

func (f *auditServeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.keep, "audit-keep", "", "remove audit records older than this (e.g. 90d, 720h; default: keep for ever); a signed checkpoint anchors the first kept record so moat audit verify still passes")
	cmd.Flags().StringVar(&f.max, "audit-max", "", "keep at most this many audit records (default: no limit), the oldest removed first, anchored like --audit-keep")
}

func (f *auditServeFlags) apply(cfg *daemon.Config) error {
	if f.keep != "" {
		d, err := parseDays(f.keep)
		if err != nil || d <= 0 {
			return fmt.Errorf("--audit-keep %q: want a positive duration, e.g. 90d or 720h", f.keep)
		}
		cfg.AuditKeep = d
	}
	if f.max != "" {
		n, err := strconv.ParseInt(f.max, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("--audit-max %q: want a positive number of records", f.max)
		}
		cfg.AuditMax = n
	}
	return nil
}
