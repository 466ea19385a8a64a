package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
)

// userEgressCmd is `moat user egress`: a sandbox user's own egress rules and credentials
// (issue 15). It belongs under `moat user` (users_cmds.go adds it there).
func (a *app) userEgressCmd() *cobra.Command {
	var allow, creds []string
	var clear, asJSON bool
	cmd := &cobra.Command{
		Use:   "egress ID NAME (--allow RULE... [--credential SECRET...] | --clear)",
		Short: "Give a sandbox user egress rules and credentials of its own, narrower than the sandbox's",
		Long: `egress gives user NAME of sandbox ID its own egress: a destination is reachable by the
user only when the sandbox's policy and one of the --allow rules both allow it (the rules
only narrow: a rule the sandbox allows nowhere is refused), and only the credential
bindings named by --credential (secret names bound to the sandbox) are injected into the
user's requests; with no --credential, none. --clear gives the user the sandbox's egress
again. Applied at once (open connections the rules no longer allow are cut) and at every
start. Refused for users with sudo (they can become any user) and under runsc (gVisor's
own network stack hides which user opened a connection).`,
		Example: `  moat user egress sb-1a2b alice --allow api.github.com --allow pypi.org --credential GITHUB_TOKEN
  moat user egress sb-1a2b bob --allow pypi.org        # bob reaches pypi.org only, with no credential
  moat user egress sb-1a2b bob --clear`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case clear && (len(allow) > 0 || len(creds) > 0):
				return errors.New("--clear takes no --allow or --credential")
			case !clear && len(allow) == 0:
				return errors.New("give the user's rules with --allow RULE (repeatable), or --clear to give it the sandbox's egress again")
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			var res *v1.UserEgressResponse
			if clear {
				res, err = c.ClearUserEgress(cmd.Context(), args[0], args[1])
			} else {
				res, err = c.SetUserEgress(cmd.Context(), args[0], args[1], v1.SetUserEgressRequest{Allow: allow, Credentials: creds})
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(res)
			}
			if res.Egress == nil {
				fmt.Printf("user %s of %s: the sandbox's egress", termSafe(res.User), res.Sandbox)
			} else {
				cr := "no credentials"
				if len(res.Egress.Credentials) > 0 {
					cr = "credentials " + termSafe(strings.Join(res.Egress.Credentials, ", "))
				}
				fmt.Printf("user %s of %s: allow %s (within the sandbox's policy); %s", termSafe(res.User), res.Sandbox, termSafe(strings.Join(res.Egress.Allow, ", ")), cr)
			}
			if res.ConnectionsCut > 0 {
				fmt.Printf(" (%d open connections cut)", res.ConnectionsCut)
			}
			fmt.Println()
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&allow, "allow", nil, "allow `RULE` (HOST[:PORT], *.DOMAIN, CIDR or a set) for the user, within the sandbox's policy (repeatable)")
	fl.StringArrayVar(&creds, "credential", nil, "inject the sandbox's binding of `SECRET` into the user's requests (repeatable; none without)")
	fl.BoolVar(&clear, "clear", false, "give the user the sandbox's egress and credentials again")
	fl.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
