package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
)

func (a *app) snapshotCmd() *cobra.Command {
	var name string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshot ID [--name N] | snapshot ls | snapshot rm SNAPSHOT...",
		Short: "Capture a sandbox's filesystem as an immutable snapshot; list and remove snapshots",
		Long: `snapshot ID captures the sandbox's filesystem (its template and repository layers and
its drive as it is now) as a snapshot that outlives the sandbox. A running sandbox keeps
running: its drive is frozen only for the clone. With the daemon's drive pool (moat serve
--drive-pool SIZE) the drive is cloned without copying (method "reflink"), so a snapshot of a
1 GiB workspace costs what one of an empty workspace does; without it the drive's data is
copied (method "copy"; moat doctor says which).

moat create --from SNAPSHOT makes a sandbox from it, moat restore ID SNAPSHOT puts a sandbox
back to it, moat snapshot ls shows the tree (which sandbox each came from, and the snapshot
that sandbox was made from).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			sn, err := c.Snapshot(cmd.Context(), args[0], name)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(sn)
			}
			fmt.Printf("%s\t(%s of %s, %.1f ms)\n", sn.ID, sn.Method, sn.Sandbox, sn.TookMS)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for the snapshot")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the snapshot as JSON")
	cmd.AddCommand(a.snapshotLsCmd(), a.snapshotRmCmd())
	return cmd
}

func (a *app) snapshotLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List snapshots as a tree: snapshot → sandbox it was taken of → snapshots of sandboxes made from it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Snapshots(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []v1.Snapshot{}
				}
				return printJSON(list)
			}
			printSnapshotTree(os.Stdout, list)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the snapshots as JSON (parent: the snapshot the source sandbox was made from)")
	return cmd
}

// printSnapshotTree prints snapshots indented under their parent snapshot (roots: none, or
// a parent that was removed).
func printSnapshotTree(w io.Writer, list []v1.Snapshot) {
	byID := map[string]bool{}
	children := map[string][]v1.Snapshot{}
	for _, sn := range list {
		byID[sn.ID] = true
	}
	for _, sn := range list {
		p := sn.Parent
		if !byID[p] {
			p = ""
		}
		children[p] = append(children[p], sn)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SNAPSHOT\tNAME\tSANDBOX\tTEMPLATE\tSIZE\tMETHOD\tCREATED")
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		kids := children[parent]
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].CreatedAt.Before(kids[j].CreatedAt) })
		for _, sn := range kids {
			indent := strings.Repeat("  ", depth)
			if depth > 0 {
				indent = strings.Repeat("  ", depth-1) + "└ "
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\n", indent, sn.ID, sn.Name, sn.Sandbox, sn.Template,
				sizeHuman(sn.SizeBytes), sn.Method, sn.CreatedAt.Local().Format(time.DateTime))
			walk(sn.ID, depth+1)
		}
	}
	walk("", 0)
	tw.Flush()
}

func sizeHuman(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	}
	return fmt.Sprint(n)
}

func (a *app) snapshotRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Remove snapshots (sandboxes made from them keep their files); unused repository layers are collected",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := c.DeleteSnapshot(cmd.Context(), id); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func (a *app) restoreCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "restore ID SNAPSHOT",
		Short: "Put a sandbox's filesystem back to a snapshot, in place (stop, swap the drive, start)",
		Long: `restore replaces the sandbox's drive by a clone of the snapshot. The sandbox keeps its
identity: id, access token, uid range, network, credentials and policy. A running or paused
sandbox is stopped for it and started again (its processes end); a stopped one stays stopped.
The snapshot must be of the same template and drive size.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			sb, err := c.Restore(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(sb)
			}
			fmt.Printf("%s restored to %s (%s)\n", sb.ID, args[1], sb.State)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return cmd
}

func (a *app) forkCmd() *cobra.Command {
	var asJSON, lazy bool
	var count int
	cmd := &cobra.Command{
		Use:   "fork ID [--count N] [--lazy]",
		Short: "Make N new sandboxes from a sandbox's current state; prints what they inherited and got anew",
		Long: `fork clones the sandbox's filesystem (copy-free with the drive pool) into N new sandboxes.
Each inherits the filesystem, template, runtime, user, environment, limits, egress policy with
its phase, credential bindings, timeout and metadata; each gets its own sandbox id, host uid
range, network namespace, envd access token, interception CA, credential placeholders, GitHub
App tokens, /etc/machine-id and random seed. Bindings are checked against the caller again: a
fork gets no secret its caller may not bind. The parent keeps running.

With --lazy the forks are made stopped (as after an idle stop) and each starts on its first
exec, file call, shell or connect: the fork returns in milliseconds, and only the forks used
pay a start.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			rep, err := c.ForkWith(cmd.Context(), args[0], v1.ForkRequest{Count: count, Lazy: lazy})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(rep)
			}
			printForkReport(os.Stdout, rep)
			return nil
		},
	}
	cmd.Flags().IntVar(&count, "count", 1, "how many forks (1-32)")
	cmd.Flags().BoolVar(&lazy, "lazy", false, "make the forks stopped; each starts on its first use")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printForkReport(w io.Writer, rep *v1.ForkReport) {
	fmt.Fprintf(w, "forked %s into %d sandbox(es) in %.1f ms:\n", rep.Parent, len(rep.Forks), rep.TookMS)
	for _, f := range rep.Forks {
		fmt.Fprintf(w, "  %s\n", f.ID)
	}
	fmt.Fprintf(w, "inherited: %s\n", strings.Join(rep.Inherited, ", "))
	fmt.Fprintf(w, "new for each fork: %s\n", strings.Join(rep.Renewed, ", "))
}
