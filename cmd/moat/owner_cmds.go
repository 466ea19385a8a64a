package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	v1 "github.com/moatdev/moat/api/v1"
)

// Owners and visibility (docs/owners.md): moat visibility, --visibility of create and run,
// moat ls's OWNER column and moat apikey's owner names.

// registerVisibility adds --visibility to create and run.
func registerVisibility(fl *pflag.FlagSet, v *string) {
	fl.StringVar(v, "visibility", "", "who may use the sandbox: private (default: its creator's API key, admin keys and the operator) or team (every API key of the daemon may see it, run commands in it and use its files and ports; only its owner manages it)")
}

func (a *app) visibilityCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "visibility ID private|team",
		Short: "Make a sandbox private (its owner's) or team (every API key may see and use it)",
		Long: `visibility changes who may use a sandbox. private: its owner (the API key that created it),
admin keys and the operator; to any other key it does not exist. team: every API key of the
daemon may also see it, run commands in it, open its terminal and use its files and ports,
but only its owner, admin keys and the operator may stop, delete, change or snapshot it.
Only those may change the visibility. The change is in the sandbox's events and the audit
log.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[1] != v1.VisibilityPrivate && args[1] != v1.VisibilityTeam {
				return fmt.Errorf("visibility %q: want private or team", args[1])
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			sb, err := c.SetVisibility(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(sb)
			}
			fmt.Printf("%s %s\n", termSafe(sb.ID), termSafe(sb.Visibility))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return cmd
}

// ownerColumn is moat ls's OWNER of sb: its owner name, else its owner key's id, else
// "operator"; a team sandbox's is marked "(team)".
func ownerColumn(sb v1.Sandbox) string {
	o := sb.OwnerName
	switch {
	case o != "":
	case sb.Owner != "":
		o = sb.Owner
	default:
		o = "operator"
	}
	o = termSafe(o)
	if sb.Visibility == v1.VisibilityTeam {
		o += " (team)"
	}
	return o
}

// keyOwnerText is what moat apikey ls adds to a key's line: its owner name and admin flag.
func keyOwnerText(k v1.APIKey) string {
	s := ""
	if k.Owner != "" {
		s += "\towner=" + termSafe(k.Owner)
	}
	if k.Admin {
		s += "\tadmin"
	}
	return s
}
