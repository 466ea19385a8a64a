package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// changesCmd is `moat changes ID`: the pushes the git gate decided for a sandbox.
func (a *app) changesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "changes ID",
		Short: "List the changes (git pushes) moat decided for a sandbox: allowed, refused, held for approval",
		Long: `changes lists every push the git gate decided for the sandbox, oldest first: its change
id, the remote, the refs (old → new), the decision, the files changed with lines added and
removed, and the protected paths it touches. A held change waits for
` + "`moat change approve CID`" + ` or ` + "`moat change deny CID`" + `; ` + "`moat change show CID`" + ` prints its report and
` + "`moat change patch CID`" + ` its patch.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Changes(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []v1.Change{}
				}
				return printJSON(list)
			}
			return printChanges(os.Stdout, list)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// changeCmd is `moat change show|patch|approve|deny CID`.
func (a *app) changeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "change",
		Short: "Show, download, approve or deny one change (a git push moat decided)",
	}
	var sandboxID string
	addSandbox := func(c *cobra.Command) {
		c.Flags().StringVar(&sandboxID, "sandbox", "", "the sandbox of the change (default: found among your sandboxes)")
	}

	var showJSON bool
	show := &cobra.Command{
		Use:   "show CID",
		Short: "Print a change's decision and report: commits, files with lines added and removed, lockfiles, protected paths",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := a.changeSandbox(cmd.Context(), sandboxID, args[0])
			if err != nil {
				return err
			}
			ch, err := c.Change(cmd.Context(), id, args[0])
			if err != nil {
				return err
			}
			if showJSON {
				return printJSON(ch)
			}
			return printChange(os.Stdout, *ch)
		},
	}
	addSandbox(show)
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")

	var ref, outFile string
	var patchJSON bool
	patch := &cobra.Command{
		Use:   "patch CID",
		Short: "Write a change's patch (git diff from its base to the pushed commit) to stdout or a file",
		Long: `patch writes the change's full patch, as git apply reads it. To a terminal, bytes that
could drive it (escapes, control characters) are shown escaped; to a pipe or --output the
patch is written as is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, id, err := a.changeSandbox(cmd.Context(), sandboxID, args[0])
			if err != nil {
				return err
			}
			body, err := c.ChangePatch(cmd.Context(), id, args[0], ref)
			if err != nil {
				return err
			}
			defer body.Close()
			if patchJSON {
				b, err := io.ReadAll(body)
				if err != nil {
					return err
				}
				return printJSON(struct {
					Change string `json:"change"`
					Ref    string `json:"ref,omitempty"`
					Patch  string `json:"patch"`
				}{args[0], ref, string(b)})
			}
			if outFile != "" {
				f, err := os.OpenFile(outFile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
				if err != nil {
					return err
				}
				if _, err := io.Copy(f, body); err != nil {
					f.Close()
					return err
				}
				return f.Close()
			}
			return writePatch(os.Stdout, body, term.IsTerminal(int(os.Stdout.Fd())))
		},
	}
	addSandbox(patch)
	patch.Flags().StringVar(&ref, "ref", "", "the ref of a push that updated several (default: the first)")
	patch.Flags().StringVarP(&outFile, "output", "o", "", "write the patch to this file")
	patch.Flags().BoolVar(&patchJSON, "json", false, `print {"change", "ref", "patch"} as JSON`)

	decide := func(approve bool) *cobra.Command {
		var reason string
		var asJSON bool
		use, short := "deny CID", "Discard a held change: nothing reaches the remote"
		if approve {
			use, short = "approve CID", "Apply a held change: moat sends the push to the remote now, with the sandbox's credential"
		}
		d := &cobra.Command{
			Use:   use,
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, id, err := a.changeSandbox(cmd.Context(), sandboxID, args[0])
				if err != nil {
					return err
				}
				var ch *v1.Change
				if approve {
					ch, err = c.ApproveChange(cmd.Context(), id, args[0], reason)
				} else {
					ch, err = c.DenyChange(cmd.Context(), id, args[0], reason)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(ch)
				}
				fmt.Printf("%s: %s\n", ch.ID, ch.Decision)
				if ch.Decided != nil && ch.Decided.Result != "" {
					fmt.Println(termSafe(ch.Decided.Result))
				}
				if ch.Decision == "apply-failed" {
					return exitError{code: 1}
				}
				return nil
			},
		}
		addSandbox(d)
		d.Flags().StringVar(&reason, "reason", "", "why (kept in the change record and the audit log)")
		d.Flags().BoolVar(&asJSON, "json", false, "print JSON")
		return d
	}
	cmd.AddCommand(show, patch, decide(true), decide(false))
	return cmd
}

// changeSandbox returns a client and the sandbox of change cid: the one given, or the
// caller's sandbox that has it.
func (a *app) changeSandbox(ctx context.Context, sandboxID, cid string) (*sdk.Client, string, error) {
	c, err := a.connect(ctx)
	if err != nil {
		return nil, "", err
	}
	if sandboxID != "" {
		return c, sandboxID, nil
	}
	list, err := c.List(ctx)
	if err != nil {
		return nil, "", err
	}
	for _, sb := range list {
		if _, err := c.Change(ctx, sb.ID, cid); err == nil {
			return c, sb.ID, nil
		} else if !errors.Is(err, sdk.ErrNotFound) {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("no sandbox of yours has change %s (give --sandbox ID)", termSafe(cid))
}

// printChanges prints the change table. Refs, remotes and paths come from the sandbox:
// termSafe.
func printChanges(w io.Writer, list []v1.Change) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANGE\tTIME\tREMOTE\tREFS\tDECISION\tFILES\t+/-\tPROTECTED")
	for _, ch := range list {
		var refs, hits []string
		for _, r := range ch.Refs {
			refs = append(refs, termSafe(shortRef(r.Ref))+" "+shortID(r.Old)+"→"+shortID(r.New))
		}
		for _, h := range ch.Protected {
			hits = append(hits, termSafe(h.Path))
		}
		files, lines := "-", "-"
		if ch.ReportError == "" || ch.Files > 0 {
			files, lines = fmt.Sprint(ch.Files), fmt.Sprintf("+%d/-%d", ch.Added, ch.Removed)
		}
		prot := strings.Join(hits, ",")
		if prot == "" {
			prot = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(ch.ID), ch.Time.Local().Format("2006-01-02 15:04:05"),
			termSafe(ch.Remote), strings.Join(refs, ", "), termSafe(ch.Decision), files, lines, prot)
	}
	return tw.Flush()
}

// printChange prints one change with its report.
func printChange(w io.Writer, ch v1.Change) error {
	fmt.Fprintf(w, "change    %s (%s)\n", termSafe(ch.ID), termSafe(ch.Kind))
	fmt.Fprintf(w, "sandbox   %s\n", termSafe(ch.Sandbox))
	fmt.Fprintf(w, "remote    %s\n", termSafe(ch.Remote))
	fmt.Fprintf(w, "time      %s\n", ch.Time.Local().Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(w, "decision  %s\n", termSafe(ch.Decision))
	for _, r := range ch.Reasons {
		fmt.Fprintf(w, "  why     %s\n", termSafe(r))
	}
	if ch.Expires != nil && ch.Decision == "held" {
		fmt.Fprintf(w, "expires   %s\n", ch.Expires.Local().Format("2006-01-02 15:04:05 MST"))
	}
	if d := ch.Decided; d != nil {
		fmt.Fprintf(w, "decided   %s by %s at %s", termSafe(d.Action), termSafe(d.By), d.Time.Local().Format("2006-01-02 15:04:05"))
		if d.Reason != "" {
			fmt.Fprintf(w, ": %s", termSafe(d.Reason))
		}
		fmt.Fprintln(w)
		if d.Result != "" {
			fmt.Fprintf(w, "result    %s\n", termSafe(d.Result))
		}
	}
	for _, h := range ch.Protected {
		fmt.Fprintf(w, "protected %s (%s, %s)\n", termSafe(h.Path), termSafe(h.Glob), termSafe(shortRef(h.Ref)))
	}
	if ch.ReportError != "" {
		fmt.Fprintf(w, "report    none: %s\n", termSafe(ch.ReportError))
	}
	for _, r := range ch.Refs {
		verdict := "allowed"
		if !r.Allowed {
			verdict = r.Rule
		}
		fmt.Fprintf(w, "\n%s %s → %s  (%s)\n", termSafe(r.Ref), shortID(r.Old), shortID(r.New), termSafe(verdict))
		if r.Reason != "" {
			fmt.Fprintf(w, "  %s\n", termSafe(r.Reason))
		}
		rep := r.Report
		if rep == nil {
			continue
		}
		base := shortID(rep.Base)
		if rep.Base == "" {
			base = "(none)"
		}
		fmt.Fprintf(w, "  base %s, %d files, +%d/-%d\n", base, r.Files, r.Added, r.Removed)
		for _, c := range rep.Commits {
			fmt.Fprintf(w, "  commit %s %s <%s> %s\n", shortID(c.ID), termSafe(c.AuthorName), termSafe(c.AuthorEmail), termSafe(c.Subject))
		}
		if rep.CommitsTruncated {
			fmt.Fprintln(w, "  (more commits)")
		}
		for _, f := range rep.Files {
			counts := fmt.Sprintf("+%d/-%d", f.Added, f.Removed)
			if f.Binary {
				counts = "binary"
			}
			p := termSafe(f.Path)
			if f.OldPath != "" {
				p = termSafe(f.OldPath) + " → " + p
			}
			if f.Lockfile {
				p += "  (lockfile)"
			}
			fmt.Fprintf(w, "  %-12s %s\n", counts, p)
		}
		if rep.FilesTruncated {
			fmt.Fprintln(w, "  (more files)")
		}
	}
	return nil
}

// writePatch copies a patch to w; to a terminal, each line through termSafe.
func writePatch(w io.Writer, r io.Reader, terminal bool) error {
	if !terminal {
		_, err := io.Copy(w, r)
		return err
	}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			nl := strings.HasSuffix(line, "\n")
			out := termSafe(strings.TrimSuffix(line, "\n"))
			if nl {
				out += "\n"
			}
			if _, werr := io.WriteString(w, out); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func shortRef(ref string) string { return strings.TrimPrefix(ref, "refs/heads/") }

// shortID is the first 10 hex digits of a commit id; "0" for all zeros (none).
func shortID(id string) string {
	if strings.Trim(id, "0") == "" {
		return "0"
	}
	if len(id) > 10 {
		id = id[:10]
	}
	return termSafe(id)
}
