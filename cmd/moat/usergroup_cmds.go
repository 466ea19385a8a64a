package main

import "github.com/spf13/cobra"

// userGroupCmd is a stand-in `moat user` holding only `moat user egress` until the users
// part of issue 15 (users_cmds.go: add, ls, rm) is merged; at the merge this file goes and
// that part's userCmd adds a.userEgressCmd().
func (a *app) userGroupCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Manage the users of a sandbox"}
	cmd.AddCommand(a.userEgressCmd())
	return cmd
}
