package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	v1 "github.com/moatdev/moat/api/v1"
)

func (a *app) diffCmd() *cobra.Command {
	var asJSON, stat bool
	cmd := &cobra.Command{
		Use:   "diff ID",
		Short: "Show what a sandbox changed in its /workspace (sandboxes made with --repo)",
		Long: `diff compares the sandbox's /workspace, as it is now, with the commit its --repo
checkout was made from: every file tracked there, and every other file no .gitignore of the
workspace ignores (so node_modules and build outputs stay out). A stopped sandbox's drive is
mounted for the read. Git never runs on the sandbox's files: moat reads them and commits the snapshot in a
private repository of its own.

Without flags it prints the patch (git diff format, binary files included): raw bytes when
stdout is not a terminal (moat diff ID > x.patch; git apply x.patch), escaped lines on a
terminal. --stat prints changed files with added and removed lines; --json the change report
with the protected paths the workspace touches.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if !asJSON && !stat {
				body, err := c.DiffPatch(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				defer body.Close()
				return copyPatch(os.Stdout, body, term.IsTerminal(int(os.Stdout.Fd())))
			}
			d, err := c.Diff(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(d)
			}
			return printStat(os.Stdout, d.Base, d.Report, d.Protected)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the change report as JSON")
	cmd.Flags().BoolVar(&stat, "stat", false, "print changed files with added/removed line counts")
	return cmd
}

func (a *app) exportCmd() *cobra.Command {
	var asJSON, allowProtected bool
	var branch string
	cmd := &cobra.Command{
		Use:   "export ID",
		Short: "Write a sandbox's /workspace into its host repository as an agent/ branch",
		Long: `export commits the sandbox's /workspace (what moat diff shows) on the commit its --repo
checkout was made from and writes that commit into the host repository as a branch under
agent/ (default agent/<ID>). Only the objects and that branch change: nothing is checked out,
the repository's HEAD, index and work tree stay as they are, and no hook runs. Exporting again
after more work moves the branch forward; a branch that was moved elsewhere, or that is checked
out, is refused. A workspace that changes protected paths (CI definitions, CODEOWNERS, .moat/**,
--git-protected globs) is refused naming them, unless the operator passes --allow-protected.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.Export(cmd.Context(), args[0], v1.ExportRequest{Branch: branch, AllowProtected: allowProtected})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(res)
			}
			switch {
			case res.Unchanged:
				fmt.Printf("%s already at %s (nothing new)\n", res.Ref, res.New)
			case res.Old == "":
				fmt.Printf("created %s at %s in %s\n", res.Ref, res.New, termSafe(res.Repo))
			default:
				fmt.Printf("moved %s %s..%s in %s\n", res.Ref, res.Old[:12], res.New[:12], termSafe(res.Repo))
			}
			return printStat(os.Stdout, res.Base, res.Report, res.Protected)
		},
	}
	cmd.Flags().StringVar(&branch, "branch", "", "branch to write, under agent/ (default agent/ID)")
	cmd.Flags().BoolVar(&allowProtected, "allow-protected", false, "export even if the workspace changes protected paths (operator only)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// copyPatch copies a patch: raw for a file or pipe, each line escaped (termSafe) for a
// terminal, as its bytes are the sandbox's.
func copyPatch(w io.Writer, r io.Reader, terminal bool) error {
	if !terminal {
		_, err := io.Copy(w, r)
		return err
	}
	br := bufio.NewReader(r)
	bw := bufio.NewWriter(w)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			bw.WriteString(termSafe(strings.TrimSuffix(line, "\n")))
			bw.WriteByte('\n')
		}
		if err == io.EOF {
			return bw.Flush()
		}
		if err != nil {
			return err
		}
	}
}

// printStat prints a change report's files as "path | +A -R" lines and the protected paths.
func printStat(w io.Writer, base string, rep *v1.ChangeReport, protected []v1.ProtectedPath) error {
	if rep == nil {
		return errors.New("the daemon sent no change report")
	}
	var added, removed int64
	for _, f := range rep.Files {
		name := termSafe(f.Path)
		if f.OldPath != "" {
			name = termSafe(f.OldPath) + " => " + name
		}
		if f.Binary {
			fmt.Fprintf(w, " %s | binary\n", name)
			continue
		}
		added += f.Added
		removed += f.Removed
		fmt.Fprintf(w, " %s | +%d -%d\n", name, f.Added, f.Removed)
	}
	more := ""
	if rep.FilesTruncated {
		more = " (list truncated)"
	}
	fmt.Fprintf(w, " %d files changed, +%d -%d since %.12s%s\n", len(rep.Files), added, removed, base, more)
	for _, l := range rep.Lockfiles {
		fmt.Fprintf(w, " lockfile changed: %s\n", termSafe(l))
	}
	for _, p := range protected {
		if p.Glob == "" {
			fmt.Fprintf(w, " PROTECTED: %s (not a valid repository path)\n", termSafe(p.Path))
		} else {
			fmt.Fprintf(w, " PROTECTED: %s (by %s)\n", termSafe(p.Path), termSafe(p.Glob))
		}
	}
	return nil
}
