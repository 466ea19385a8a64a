package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	v1 "github.com/moatdev/moat/api/v1"
)

// Agents as Linux users (issue 15): moat user add/ls/rm, and create's --add-user.

func (a *app) userCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Add, list and remove Linux users of a sandbox (one per agent)",
		Long: `Each user moat adds to a sandbox has its own uid (from 2000), a private home /home/NAME
(mode 0700: other users cannot read it), optional shared groups (gid from 3000) each with a
directory /shared/GROUP that only its members can use, and sudo only when asked (a sudo user
can become any user, root included). Run commands, shells and file transfers as the user
with --user NAME (moat exec, moat shell, moat cp) or the API's and E2B's user parameter.
Users are added and removed while the sandbox runs, and kept over stop/start and daemon
restarts. A user without sudo may get egress rules and credentials of its own, narrower
than the sandbox's (moat user egress).`,
	}
	cmd.AddCommand(a.userAddCmd(), a.userLsCmd(), a.userRmCmd(), a.userEgressCmd())
	return cmd
}

func (a *app) userAddCmd() *cobra.Command {
	var groups []string
	var sudo, asJSON bool
	cmd := &cobra.Command{
		Use:   "add ID NAME",
		Short: "Add a user to a running sandbox",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			u, err := c.AddUser(cmd.Context(), args[0], v1.UserRequest{Name: args[1], Groups: groups, Sudo: sudo})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(u)
			}
			fmt.Printf("added %s (uid %d, home %s", u.Name, u.UID, u.Home)
			if len(u.Groups) > 0 {
				fmt.Printf(", groups %s", strings.Join(u.Groups, ","))
			}
			if u.Sudo {
				fmt.Print(", sudo")
			}
			fmt.Println(")")
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&groups, "group", nil, "shared `GROUP` the user belongs to, with its directory /shared/GROUP (repeatable; made on first use)")
	cmd.Flags().BoolVar(&sudo, "sudo", false, "let the user run sudo without a password (it can then become any user, root included)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the user as JSON")
	return cmd
}

func (a *app) userLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls ID",
		Short: "List the users moat added to a sandbox and their shared groups",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Users(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(list)
			}
			return printUsers(os.Stdout, list)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printUsers prints a sandbox's users and shared groups as tables.
func printUsers(w io.Writer, list *v1.UserList) error {
	if len(list.Users) == 0 {
		fmt.Fprintln(w, "no users added (moat user add ID NAME)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tUID\tHOME\tGROUPS\tSUDO")
	for _, u := range list.Users {
		sudo := "no"
		if u.Sudo {
			sudo = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", u.Name, u.UID, u.Home, orDash(strings.Join(u.Groups, ",")), sudo)
	}
	if len(list.Groups) > 0 {
		fmt.Fprintln(tw, "\nGROUP\tGID\tDIRECTORY\tMEMBERS\t")
		for _, g := range list.Groups {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", g.Name, g.GID, g.Dir, orDash(strings.Join(g.Members, ",")))
		}
	}
	return tw.Flush()
}

func (a *app) userRmCmd() *cobra.Command {
	var keepHome bool
	cmd := &cobra.Command{
		Use:   "rm ID NAME",
		Short: "Remove a user from a running sandbox: its processes are killed, its home deleted (unless --keep-home)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			if err := c.RemoveUser(cmd.Context(), args[0], args[1], keepHome); err != nil {
				return err
			}
			kept := ""
			if keepHome {
				kept = " (home kept, owned by its old uid)"
			}
			fmt.Printf("removed %s%s\n", args[1], kept)
			return nil
		},
	}
	cmd.Flags().BoolVar(&keepHome, "keep-home", false, "keep /home/NAME (still owned by the removed uid; root inside can reach it)")
	return cmd
}

// addUserFlags is create's and run's --add-user.
type addUserFlags struct{ specs []string }

func (f *addUserFlags) register(fl *pflag.FlagSet) {
	fl.StringArrayVar(&f.specs, "add-user", nil, "add a Linux user `NAME[,group=G...][,sudo]` with a private home (repeatable; see moat user; --user is the default user commands run as)")
}

func (f *addUserFlags) apply(req *v1.CreateSandboxRequest) error {
	for _, s := range f.specs {
		u, err := parseAddUser(s)
		if err != nil {
			return fmt.Errorf("--add-user %q: %w", s, err)
		}
		req.Users = append(req.Users, u)
	}
	return nil
}

// parseAddUser parses NAME[,group=G...][,sudo]. Names are checked by the daemon.
func parseAddUser(s string) (v1.UserRequest, error) {
	parts := strings.Split(s, ",")
	u := v1.UserRequest{Name: parts[0]}
	if u.Name == "" {
		return u, fmt.Errorf("no user name (want NAME[,group=G...][,sudo])")
	}
	for _, p := range parts[1:] {
		switch k, v, ok := strings.Cut(p, "="); {
		case p == "sudo":
			u.Sudo = true
		case ok && k == "group" && v != "":
			u.Groups = append(u.Groups, v)
		default:
			return u, fmt.Errorf("unknown option %q (want group=GROUP or sudo)", p)
		}
	}
	return u, nil
}
