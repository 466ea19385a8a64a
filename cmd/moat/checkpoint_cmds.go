package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/bench"
	"github.com/moatdev/moat/sdk"
)

func (a *app) checkpointCmd() *cobra.Command {
	var name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "checkpoint ID [--name N]",
		Short: "Save a sandbox's state: its processes' memory where the runtime can, otherwise its filesystem (says which and why)",
		Long: `checkpoint saves the sandbox's state as a snapshot (moat snapshot ls) and keeps the
sandbox as it is. Where the runtime can checkpoint a moat sandbox's processes (runsc's
checkpoint, runc with CRIU) the snapshot would hold their memory too; on hosts where it
cannot, the checkpoint is a filesystem snapshot (method "filesystem") and the answer says
why — moat doctor lists the reason per runtime under "memory checkpoint". Today every
checkpoint is a filesystem one: see docs/internals.md, "Memory checkpoints".

A filesystem checkpoint is restored like any snapshot: moat restore ID SNAPSHOT or moat
create --from SNAPSHOT; the sandbox's processes start afresh.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			cp, err := c.Checkpoint(cmd.Context(), args[0], name)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cp)
			}
			printCheckpoint(os.Stdout, cp)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for the checkpoint's snapshot")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the checkpoint as JSON")
	return cmd
}

// printCheckpoint prints a checkpoint's answer: the snapshot, the method, and for a
// filesystem one why memory was not saved and what that means.
func printCheckpoint(w io.Writer, cp *v1.Checkpoint) {
	fmt.Fprintf(w, "%s\t(%s checkpoint of %s, %.1f ms)\n", cp.Snapshot.ID, cp.Method, cp.Snapshot.Sandbox, cp.TookMS)
	if cp.Reason != "" {
		fmt.Fprintf(w, "memory not saved: %s\n", cp.Reason)
	}
	if cp.Note != "" {
		fmt.Fprintf(w, "note: %s\n", cp.Note)
	}
}

// benchCheckpoints adds the checkpoint figure of each runtime to res (runs 0: none).
func benchCheckpoints(ctx context.Context, c *sdk.Client, runtimes []string, runs int, res *bench.Result, progress func(string)) error {
	if runs <= 0 {
		return nil
	}
	for _, rt := range runtimes {
		if rt == "" {
			continue
		}
		cr, err := bench.Checkpoints(ctx, c, rt, runs, 256<<20, progress)
		if err != nil {
			return fmt.Errorf("checkpoint figure (%s): %w", rt, err)
		}
		res.Checkpoints = append(res.Checkpoints, cr)
	}
	return nil
}

// printBenchCheckpoints prints the checkpoint figures of moat bench.
func printBenchCheckpoints(list []*bench.CheckpointResult) {
	for _, cr := range list {
		fmt.Printf("checkpoint (%s, method %s): p50 %.1f ms; restore of it p50 %.1f ms; stop+start of the same sandbox p50 %.1f ms (ratios %.2f, %.2f; %d runs)\n",
			cr.Runtime, cr.Method, cr.Checkpoint.P50, cr.Restore.P50, cr.StopStart.P50, cr.CheckpointRatio, cr.RestoreRatio, cr.Checkpoint.N)
		if cr.Reason != "" {
			fmt.Printf("  memory not saved: %s\n", termSafe(cr.Reason))
		}
	}
}
