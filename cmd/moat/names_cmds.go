package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/sdk"
)

// Names, labels, filters, bulk removal (issue 13 item 4; internal/sandbox/names.go).

// namingFlags are --name and --label of run and create.
type namingFlags struct {
	name   string
	labels []string
}

func (f *namingFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "name", "", "name the sandbox (unique among your sandboxes; usable wherever an ID is)")
	cmd.Flags().StringArrayVar(&f.labels, "label", nil, "label KEY=VALUE, as Kubernetes labels are written (repeatable; select with ls --filter label=KEY=VALUE)")
}

// apply checks the flags and puts them in req.
func (f *namingFlags) apply(req *v1.CreateSandboxRequest) error {
	if f.name != "" {
		if err := sandbox.CheckName(f.name); err != nil {
			return fmt.Errorf("--name: %s", cliMessage(err))
		}
		req.Name = f.name
	}
	for _, l := range f.labels {
		k, v, err := sandbox.ParseLabel(l)
		if err != nil {
			return fmt.Errorf("--label: %s", cliMessage(err))
		}
		if req.Labels == nil {
			req.Labels = map[string]string{}
		}
		if _, dup := req.Labels[k]; dup {
			return fmt.Errorf("--label %s: given twice", k)
		}
		req.Labels[k] = v
	}
	return sandbox.CheckLabels(req.Labels)
}

// cliMessage is an error's text without the class suffix the daemon's messages carry.
func cliMessage(err error) string {
	s := err.Error()
	for _, c := range []string{": invalid argument", ": not found", ": already exists"} {
		s = strings.TrimSuffix(s, c)
	}
	return s
}

// checkFilters parses --filter values before anything is asked of the daemon.
func checkFilters(filters []string) error {
	if _, err := sandbox.ParseFilters(filters); err != nil {
		return fmt.Errorf("--filter: %s", cliMessage(err))
	}
	return nil
}

const filterHelp = "show only sandboxes matching: name=NAME, state=STATE, template=TEMPLATE, label=KEY or label=KEY=VALUE (repeatable; all must match)"

// expiryColumn is ls's EXPIRES: when the sandbox's timeout ends it ("-": no timeout, or
// it is not running).
func expiryColumn(sb v1.Sandbox, now time.Time) string {
	if sb.ExpiresAt == nil || (sb.State != "running" && sb.State != "paused" && sb.State != "creating") {
		return "-"
	}
	if d := sb.ExpiresAt.Sub(now); d > 0 {
		return "in " + ago(d)
	}
	return "now"
}

// printSandboxTable prints ls's table.
func printSandboxTable(list []v1.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tOWNER\tSTATE\tRUNTIME\tTEMPLATE\tCREATED\tEXPIRES\tLAST USE\tIDLE STOP\tDELETE\tNOTE")
	for _, sb := range list {
		last, idle, del := lifecycleColumns(sb, now)
		name := sb.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(sb.ID), termSafe(name), ownerColumn(sb), termSafe(sb.State), termSafe(sb.Runtime), termSafe(sb.Template),
			sb.CreatedAt.Local().Format("2006-01-02 15:04:05"), expiryColumn(sb, now), last, idle, del, termSafe(sb.Error))
	}
	return tw.Flush()
}

// rmAll is `moat rm --all`: the stopped sandboxes the filters match (prune), and with
// force every other one too.
func rmAll(ctx context.Context, c *sdk.Client, filters []string, force, asJSON bool) error {
	res, err := c.Prune(ctx, v1.PruneRequest{Filters: filters})
	if err != nil {
		return err
	}
	deleted := res.Deleted
	var errs []error
	for _, f := range res.Failed {
		errs = append(errs, fmt.Errorf("deleting %s: %s", f.ID, f.Error))
	}
	rest, err := c.ListFiltered(ctx, filters)
	if err != nil {
		return err
	}
	var skipped []string
	for _, sb := range rest {
		if sb.State == "deleting" {
			continue
		}
		if !force {
			skipped = append(skipped, sb.ID+" ("+sb.State+")")
			continue
		}
		if err := c.Delete(ctx, sb.ID); err != nil && !errors.Is(err, sdk.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, sb)
	}
	if asJSON {
		if err := printJSON(v1.PruneResponse{Deleted: deleted, Failed: res.Failed}); err != nil {
			return err
		}
	} else {
		for _, sb := range deleted {
			fmt.Println(sb.ID)
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(os.Stderr, "moat: kept %d sandbox(es) that are not stopped: %s (--force deletes them too)\n", len(skipped), strings.Join(skipped, ", "))
	}
	return errors.Join(errs...)
}

func (a *app) pruneCmd() *cobra.Command {
	var filters []string
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete stopped sandboxes",
		Long: `prune deletes every stopped sandbox you own (the operator: every stopped sandbox), or those
--filter selects. A sandbox started meanwhile stays. It prints the IDs deleted; --dry-run
only prints what it would delete.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFilters(filters); err != nil {
				return err
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.Prune(cmd.Context(), v1.PruneRequest{Filters: filters, DryRun: dryRun})
			if err != nil {
				return err
			}
			var errs []error
			for _, f := range res.Failed {
				errs = append(errs, fmt.Errorf("deleting %s: %s", f.ID, f.Error))
			}
			if asJSON {
				return errors.Join(printJSON(res), errors.Join(errs...))
			}
			for _, sb := range res.Deleted {
				if dryRun {
					fmt.Printf("would delete %s\n", sb.ID)
				} else {
					fmt.Println(sb.ID)
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().StringArrayVar(&filters, "filter", nil, filterHelp)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be deleted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
