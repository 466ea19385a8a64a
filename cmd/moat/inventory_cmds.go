package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/doctor"
)

// moat inventory: what each sandbox, template and API key can reach (GET /v1/inventory).

func (a *app) inventoryCmd() *cobra.Command {
	var asJSON, noHost, flagsOnly, scan bool
	cmd := &cobra.Command{
		Use:   "inventory [--json] [--no-host] [--flags] [--scan-templates]",
		Short: "Show what every sandbox, template and API key can actually reach, and flag what widens access",
		Long: `inventory lists, for every sandbox the caller may see (the operator: all; an API key:
its own), each phase's reachable hosts and ports (sets expanded, HTTP rules with their
methods and path prefixes, ask rules and ask mode), credential bindings (secret, hosts,
methods, approval, GitHub token scopes), the git gate (agent branch prefix, protected
paths and what happens to a push touching them), tier and users with their own egress;
templates and the sandboxes made from them; API keys with their granted secrets, approver
flag and maxima; and the host's runtimes, isolation levels, kernel features and KVM kind
(the doctor's checks).

Flags mark what widens access: net allow-all, wildcards over multi-tenant domains
(*.s3.amazonaws.com, *.github.io, … and any public suffix), CIDR rules over large or
private ranges, credentials without method limits or sent to shared domains, sudo users
in sandboxes with secrets, ask mode, and sandboxes whose access exceeds their tier.
--json prints the v1.Inventory document (docs/api.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			inv, err := c.InventoryWith(cmd.Context(), !noHost && !flagsOnly, scan)
			if err != nil {
				return err
			}
			if asJSON {
				if flagsOnly {
					return printJSON(inv.Flags)
				}
				return printJSON(inv)
			}
			if flagsOnly {
				printFlags(os.Stdout, inv.Flags, true)
				return nil
			}
			printInventory(os.Stdout, inv)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&noHost, "no-host", false, "leave out the host section (skips the doctor's checks)")
	cmd.Flags().BoolVar(&flagsOnly, "flags", false, "print only the flags (what widens access)")
	cmd.Flags().BoolVar(&scan, "scan-templates", false, "read each template's default user and set-id programs from its layers (operator only; slow for big templates)")
	return cmd
}

func printInventory(out io.Writer, inv *v1.Inventory) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	defer w.Flush()
	scope := "operator: every sandbox and API key"
	if inv.Scope != "operator" {
		scope = "API key " + inv.APIKey + ": its own sandboxes"
	}
	fmt.Fprintf(w, "INVENTORY (%s, %s)\n", scope, inv.GeneratedAt.Format("2006-01-02 15:04:05Z"))
	fmt.Fprintf(w, "\nSANDBOXES (%d)\n", len(inv.Sandboxes))
	if len(inv.Sandboxes) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, sb := range inv.Sandboxes {
		title := sb.ID
		if sb.Name != "" {
			title += " (" + sb.Name + ")"
		}
		fmt.Fprintf(w, "\n  %s\t%s, %s, template %s", title, sb.State, sb.Runtime, sb.Template)
		if sb.Tier != "" {
			fmt.Fprintf(w, ", tier %s", sb.Tier)
		}
		if sb.Owner != "" {
			fmt.Fprintf(w, ", api key %s", sb.Owner)
		}
		fmt.Fprintln(w)
		for _, ph := range sb.Phases {
			cur := ""
			if ph.Current {
				cur = " (current)"
			}
			fmt.Fprintf(w, "    phase %s%s\tnet %s\n", ph.Name, cur, ph.Net)
			if ph.Error != "" {
				fmt.Fprintf(w, "      \terror: %s\n", ph.Error)
			}
			printRules(w, "      ", ph.Rules)
		}
		if sb.AskAll {
			wait := sb.AskWait
			if wait == "" {
				wait = "default"
			}
			fmt.Fprintf(w, "    ask mode\tevery connection no rule allows is held for a person (wait %s)\n", wait)
		}
		if len(sb.Credentials) == 0 {
			fmt.Fprintln(w, "    credentials\tnone")
		}
		for _, c := range sb.Credentials {
			methods := "any method"
			if len(c.Methods) > 0 {
				methods = strings.Join(c.Methods, ",")
			}
			line := fmt.Sprintf("    credential %s\t%s, %s", c.Secret, strings.Join(c.Hosts, " "), methods)
			if c.PathPrefix != "" {
				line += " " + c.PathPrefix
			}
			if c.Approve {
				line += ", each use approved"
			}
			if c.PlainHTTP {
				line += ", plain HTTP too"
			}
			if g := c.GitHub; g != nil {
				var perms []string
				for k, v := range g.Permissions {
					perms = append(perms, k+":"+v)
				}
				line += fmt.Sprintf(", GitHub repos %s perms %s", strings.Join(g.Repositories, ","), strings.Join(sortedStrings(perms), ","))
			}
			fmt.Fprintln(w, line)
		}
		g := sb.Git
		push := "push to " + g.AgentBranchPrefix + "* only"
		if g.Push == "none" {
			push = "no push"
		}
		fmt.Fprintf(w, "    git\t%s; protected paths: %s (%d globs)\n", push, g.Protected, len(g.ProtectedPaths))
		for _, u := range sb.Users {
			line := fmt.Sprintf("    user %s\tuid %d", u.Name, u.UID)
			if u.Sudo {
				line += ", sudo"
			}
			if u.Egress == nil {
				line += ", the sandbox's egress"
			} else {
				line += fmt.Sprintf(", own egress (%d rules, credentials %s)", len(u.Egress.Rules), strings.Join(u.Egress.Credentials, ","))
			}
			fmt.Fprintln(w, line)
			if u.Egress != nil {
				printRules(w, "      ", u.Egress.Rules)
			}
		}
		for _, f := range sb.Flags {
			fmt.Fprintf(w, "    FLAG %s\t%s: %s\n", strings.ToUpper(f.Severity), f.Kind, f.Detail)
		}
	}
	fmt.Fprintf(w, "\nTEMPLATES (%d)\n", len(inv.Templates))
	for _, t := range inv.Templates {
		fmt.Fprintf(w, "  %s\t%s, %d layers, %d sandboxes\n", t.Name, t.Source, t.Layers, t.Sandboxes)
		if t.ScanError != "" {
			fmt.Fprintf(w, "    scan\t%s\n", t.ScanError)
		}
		if t.Scanned {
			user := t.DefaultUser
			if user == "" {
				user = "root"
			}
			fmt.Fprintf(w, "    default user\t%s\n", user)
			fmt.Fprintf(w, "    set-id programs\t%d: %s\n", len(t.SetID), strings.Join(t.SetID, " "))
		}
	}
	fmt.Fprintf(w, "\nAPI KEYS (%d)\n", len(inv.APIKeys))
	for _, k := range inv.APIKeys {
		secrets := "no secrets"
		if len(k.Secrets) > 0 {
			secrets = "secrets " + strings.Join(k.Secrets, ",")
		}
		line := fmt.Sprintf("  %s\t%s, %d sandboxes", k.ID, secrets, k.Sandboxes)
		if k.Approver {
			line += ", approver"
		}
		if k.Max != (v1.KeyMaxima{}) {
			line += fmt.Sprintf(", max cpus %g memory %d pids %d disk %d", k.Max.CPUs, k.Max.MemoryBytes, k.Max.Pids, k.Max.DiskBytes)
		}
		fmt.Fprintln(w, line)
	}
	if h := inv.Host; h != nil {
		fmt.Fprintln(w, "\nHOST")
		for _, rt := range h.Runtimes {
			fmt.Fprintf(w, "  runtime %s\t%s %s, usable %v\n", rt.Name, rt.Isolation, rt.Version, rt.Usable)
		}
		for _, l := range h.Isolation {
			fmt.Fprintf(w, "  isolation %s\tavailable %v: %s\n", l.Name, l.Available, l.Detail)
		}
		if k := h.KVM; k != nil {
			fmt.Fprintf(w, "  KVM\t%s (nested %s): %s\n", k.Kind, k.Nested, k.Detail)
		}
		for _, c := range h.Kernel {
			if c.Name == "KVM" {
				continue
			}
			fmt.Fprintf(w, "  kernel %s\tok %v: %s\n", c.Name, c.OK, c.Detail)
		}
	}
	fmt.Fprintln(w)
	printFlags(w, inv.Flags, false)
}

func printRules(w io.Writer, indent string, rules []v1.InventoryRule) {
	if len(rules) == 0 {
		fmt.Fprintf(w, "%s\t(no rules)\n", indent)
	}
	for _, r := range rules {
		line := fmt.Sprintf("%s%s\t%s", indent, r.Verb, r.Text)
		if r.Set != "" {
			line += "  (set " + r.Set + ")"
		}
		fmt.Fprintln(w, line)
	}
}

func printFlags(out io.Writer, flags []v1.InventoryFlag, own bool) {
	w := out
	var tw *tabwriter.Writer
	if own {
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		w = tw
		defer tw.Flush()
	}
	fmt.Fprintf(w, "FLAGS (%d)\n", len(flags))
	for _, f := range flags {
		where := f.Subject
		if f.Phase != "" {
			where += " phase " + f.Phase
		}
		if f.User != "" {
			where += " user " + f.User
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", strings.ToUpper(f.Severity), f.Kind, where, f.Detail)
	}
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// printDoctorKVM prints the doctor's KVM section: the kind, nesting and what it allows.
func printDoctorKVM(w io.Writer, k *doctor.KVM) {
	if k == nil {
		return
	}
	fmt.Fprintln(w, "KVM")
	fmt.Fprintf(w, "  kind\t%s\t%s\n", k.Kind, k.Detail)
	fmt.Fprintf(w, "  nested\t%s\t\n", k.Nested)
	for _, a := range k.Allows {
		fmt.Fprintf(w, "  \t\t%s\n", a)
	}
	for _, e := range k.Evidence {
		fmt.Fprintf(w, "  evidence\t\t%s\n", e)
	}
}
