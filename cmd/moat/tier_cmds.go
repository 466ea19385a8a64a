package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/tiers"
	"github.com/moatdev/moat/sdk"
)

// Consequence tiers: moat tier ls/show, --tier on create and run, --tiers FILE on serve.

func registerTier(cmd *cobra.Command, tier *string) {
	cmd.Flags().StringVar(tier, "tier", "", "consequence tier: read, edit, integrate, operate or one of the daemon's --tiers file (moat tier ls); it sets the policy's phases and methods, the credentials' limits and approvals and the git gate, and refuses flags asking for more")
}

// loadTiers reads --tiers into cfg.
func (a *app) loadTiers(cfg *daemon.Config) error {
	if a.tiersFile == "" {
		return nil
	}
	data, err := os.ReadFile(a.tiersFile)
	if err != nil {
		return fmt.Errorf("--tiers: %w", err)
	}
	list, err := tiers.ParseFile(data)
	if err != nil {
		return fmt.Errorf("--tiers %s: %w", a.tiersFile, err)
	}
	if _, err := tiers.NewSet(list); err != nil {
		return fmt.Errorf("--tiers %s: %w", a.tiersFile, err)
	}
	cfg.Tiers = list
	return nil
}

// leaveTierSetup switches a sandbox its tier started in "setup" to "run" before `moat
// run`'s command, unless a --setup command is to run there first.
func leaveTierSetup(ctx context.Context, c *sdk.Client, sb *v1.Sandbox, setup bool) error {
	if sb.Tier == "" || setup || sb.Policy.Phase != "setup" {
		return nil
	}
	if _, err := c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Phase: "run"}); err != nil {
		return fmt.Errorf("closing the setup phase of tier %s: %w", sb.Tier, err)
	}
	return nil
}

// checkTierSetup refuses `moat run --setup` with a tier that has no setup phase, whose
// setup command would run with the main command's network.
func checkTierSetup(ctx context.Context, c *sdk.Client, tier string, setup bool) error {
	if tier == "" || !setup {
		return nil
	}
	t, err := c.Tier(ctx, tier)
	if err != nil {
		return fmt.Errorf("--tier: %w", err)
	}
	if t.Egress.Setup == nil {
		return fmt.Errorf("--setup: tier %s has no setup phase (its network is the same before and after); run the setup as part of the command", t.Name)
	}
	return nil
}

func (a *app) tierCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tier",
		Short: "Show the consequence tiers a sandbox can be made with (--tier)",
	}
	var lsJSON, showJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the tiers: the built-ins and the daemon's --tiers file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Tiers(cmd.Context())
			if err != nil {
				return err
			}
			if lsJSON {
				return printJSON(list)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tNETWORK\tCREDENTIALS\tPUSH\tDESCRIPTION")
			for _, t := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", termSafe(t.Name), network(t.Egress), credentials(t.Credentials), push(t.Git), termSafe(t.Description))
			}
			return w.Flush()
		},
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON")
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show one tier's rules",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			t, err := c.Tier(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if showJSON {
				return printJSON(t)
			}
			origin := "operator (--tiers)"
			if t.Builtin {
				origin = "built-in"
			}
			fmt.Printf("tier:        %s (%s)\n", termSafe(t.Name), origin)
			if t.Description != "" {
				fmt.Printf("             %s\n", termSafe(t.Description))
			}
			fmt.Printf("network:     %s\n", network(t.Egress))
			if len(t.Egress.Allow) > 0 || len(t.Egress.HTTP) > 0 {
				fmt.Printf("  adds:      %s\n", termSafe(strings.Join(append(append([]string{}, t.Egress.Allow...), t.Egress.HTTP...), ", ")))
			}
			if s := t.Egress.Setup; s != nil {
				fmt.Printf("  setup:     starts in a setup phase that also allows %s; switching to run closes it\n", termSafe(strings.Join(append(append([]string{}, s.Allow...), s.HTTP...), ", ")))
			}
			fmt.Printf("credentials: %s\n", credentials(t.Credentials))
			fmt.Printf("git:         %s\n", push(t.Git))
			ask := "off"
			if t.Ask {
				ask = "on: connections the policy does not allow wait for a person"
			}
			fmt.Printf("ask:         %s\n", ask)
			return nil
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")
	cmd.AddCommand(ls, show)
	return cmd
}

// network describes a tier's egress in a few words.
func network(e v1.TierEgress) string {
	s := "the listed hosts"
	if e.AllowAll {
		s = "the listed hosts (all, if asked)"
	}
	if len(e.Methods) > 0 {
		s += ", " + strings.Join(e.Methods, "/") + " only"
	}
	if e.Setup != nil {
		s = "setup phase, then " + s
	}
	return termSafe(s)
}

func credentials(c v1.TierCredentials) string {
	s := map[string]string{tiers.CredNone: "none", tiers.CredReadOnly: "read-only (GET/HEAD)", tiers.CredAsBound: "as bound"}[c.Mode]
	if s == "" {
		s = termSafe(c.Mode)
	}
	if c.Approve {
		s += ", each use approved"
	}
	return s
}

func push(g v1.TierGit) string {
	switch {
	case g.Push == tiers.PushNone:
		return "no push"
	case g.Protected == tiers.ProtectedHold:
		return "agent branch; protected paths held"
	case g.Push == tiers.PushAgentBranch:
		return "agent branch; protected paths refused"
	}
	return termSafe(g.Push)
}
