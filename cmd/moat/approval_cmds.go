package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/sdk"
)

// Exit codes of `moat approvals ask` besides 0 (approved) and 1 (an error).
const (
	exitDenied  = 3 // a person denied it
	exitExpired = 4 // nobody decided it before its deadline or --wait
)

// approvalsCmd is `moat approvals ls|show|approve|deny|ask`.
func (a *app) approvalsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "approvals",
		Aliases: []string{"approval"},
		Short:   "List, show, approve and deny approvals (ask mode), or ask one before a tool call",
		Long: `An approval is a question a person decides before an action happens: a connection the
egress policy does not allow (network), a request that would get a credential injected
(credential), a git push held by the gate (push, the same as moat change approve|deny), or
a tool call an agent harness asks about (tool). It is pending until the operator (this
socket) or an API key made with 'moat apikey create --approver' approves or denies it, or
until its deadline, when it expires. The key that asked and the sandbox's owner may never
decide it.`,
	}

	var state, sandboxID, kind string
	var lsJSON bool
	ls := &cobra.Command{
		Use:   "ls [--state pending|approved|denied|expired] [--sandbox ID] [--kind K]",
		Short: "List approvals, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			list, err := c.Approvals(cmd.Context(), state, sandboxID, kind)
			if err != nil {
				return err
			}
			if lsJSON {
				if list == nil {
					list = []v1.Approval{}
				}
				return printJSON(list)
			}
			return printApprovals(os.Stdout, list)
		},
	}
	ls.Flags().StringVar(&state, "state", "", "only approvals in this state: pending, approved, denied or expired")
	ls.Flags().StringVar(&sandboxID, "sandbox", "", "only approvals of this sandbox (its ID)")
	ls.Flags().StringVar(&kind, "kind", "", "only approvals of this kind: network, credential, push or tool")
	ls.Flags().BoolVar(&lsJSON, "json", false, "print JSON")

	var showJSON bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Print one approval: what is asked (the exact action), by whom, its state and decision",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ap, err := c.Approval(cmd.Context(), args[0], 0)
			if err != nil {
				return err
			}
			if showJSON {
				return printJSON(ap)
			}
			return printApproval(os.Stdout, *ap)
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")

	var reason, scope string
	var decideJSON bool
	decide := func(approve bool) func(cmd *cobra.Command, args []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if scope != "" && scope != "once" && scope != "sandbox" {
				return fmt.Errorf("--scope %q: want once or sandbox", scope)
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			var ap *v1.Approval
			if approve {
				ap, err = c.ApproveApproval(cmd.Context(), args[0], v1.DecideApprovalRequest{Reason: reason, Scope: scope})
			} else {
				ap, err = c.DenyApproval(cmd.Context(), args[0], reason)
			}
			if err != nil {
				return err
			}
			if decideJSON {
				return printJSON(ap)
			}
			fmt.Printf("%s %s\n", ap.ID, ap.State)
			return nil
		}
	}
	approve := &cobra.Command{
		Use:   "approve ID [--reason R] [--scope once|sandbox]",
		Short: "Approve a pending approval (a held push is applied; a held connection goes through)",
		Long: `approve decides the approval. --scope sandbox, on a network or credential approval, adds a
rule to the sandbox's policy so later connections to the same destination pass without
asking; on a tool call, later asks of the same tool by the same user in that sandbox are
approved at once, whatever their arguments. once (the default) approves this one only.
Pushes take once only.`,
		Args: cobra.ExactArgs(1),
		RunE: decide(true),
	}
	approve.Flags().StringVar(&reason, "reason", "", "why (recorded with the decision)")
	approve.Flags().StringVar(&scope, "scope", "", "once (default) or sandbox")
	approve.Flags().BoolVar(&decideJSON, "json", false, "print the decided approval as JSON")
	deny := &cobra.Command{
		Use:   "deny ID [--reason R]",
		Short: "Deny a pending approval",
		Args:  cobra.ExactArgs(1),
		RunE:  decide(false),
	}
	deny.Flags().StringVar(&reason, "reason", "", "why (recorded with the decision)")
	deny.Flags().BoolVar(&decideJSON, "json", false, "print the decided approval as JSON")

	var tool, argsJSON, user, summary string
	var wait time.Duration
	var askJSON bool
	askCmd := &cobra.Command{
		Use:   "ask SANDBOX --tool NAME [--args JSON] [--summary TEXT] [--user U] [--wait D]",
		Short: "Ask before a tool call and wait for the decision: exit 0 approved, 3 denied, 4 expired",
		Long: `ask makes a tool-call approval of the sandbox and waits until a person decides it or --wait
passes (default 5m; the approval's deadline). For shell harnesses:

    moat approvals ask sb-1 --tool shell --args '{"cmd":"rm -rf build"}' && rm -rf build

Exit status: 0 approved, 3 denied, 4 expired (nobody decided in time), 1 an error. The
approval's ID is printed on stderr while it waits.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tool == "" {
				return fmt.Errorf("--tool: required (the name of the tool to ask about)")
			}
			var raw json.RawMessage
			if argsJSON != "" {
				if !json.Valid([]byte(argsJSON)) {
					return fmt.Errorf("--args: not JSON: %q", argsJSON)
				}
				raw = json.RawMessage(argsJSON)
			}
			if wait <= 0 || wait > 24*time.Hour {
				return fmt.Errorf("--wait %s: want more than 0 and at most 24h", wait)
			}
			c, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			ap, err := c.AskApproval(cmd.Context(), v1.AskApprovalRequest{Sandbox: args[0], User: user, Tool: tool, Arguments: raw,
				Summary: summary, WaitSeconds: int((wait + time.Second - 1) / time.Second)})
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "approval %s: waiting for a decision (moat approvals approve %s)\n", ap.ID, ap.ID)
			if ap, err = waitDecided(cmd.Context(), c, ap); err != nil {
				return err
			}
			if askJSON {
				if err := printJSON(ap); err != nil {
					return err
				}
			} else {
				line := ap.ID + " " + ap.State
				if ap.Reason != "" {
					line += ": " + termSafe(ap.Reason)
				}
				fmt.Fprintln(os.Stderr, line)
			}
			switch ap.State {
			case "approved":
				return nil
			case "denied":
				return exitError{exitDenied}
			}
			return exitError{exitExpired}
		},
	}
	askCmd.Flags().StringVar(&tool, "tool", "", "the tool's name (required)")
	askCmd.Flags().StringVar(&argsJSON, "args", "", "the tool's arguments, as JSON")
	askCmd.Flags().StringVar(&summary, "summary", "", "one line for the person deciding")
	askCmd.Flags().StringVar(&user, "user", "", "the sandbox user the tool would run as")
	askCmd.Flags().DurationVar(&wait, "wait", 5*time.Minute, "how long the question stays open (its deadline)")
	askCmd.Flags().BoolVar(&askJSON, "json", false, "print the decided approval as JSON on stdout")

	cmd.AddCommand(ls, show, approve, deny, askCmd)
	return cmd
}

// waitDecided long-polls ap until it is no longer pending. The approval is durable: when
// the daemon cannot be reached (restarting, say) it tries again every second until a
// minute past the approval's deadline; an answer of the daemon that is an error ends it.
func waitDecided(ctx context.Context, c *sdk.Client, ap *v1.Approval) (*v1.Approval, error) {
	id, giveUp := ap.ID, ap.Deadline.Add(time.Minute)
	for {
		got, err := c.Approval(ctx, id, time.Minute)
		if err == nil {
			if got.State != "pending" {
				return got, nil
			}
			continue
		}
		var se *sdk.Error
		if errors.As(err, &se) || ctx.Err() != nil || time.Now().After(giveUp) {
			return nil, err
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// printApprovals prints a table of approvals; text the sandbox chose is made safe.
func printApprovals(w io.Writer, list []v1.Approval) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tSANDBOX\tSTATE\tCREATED\tDEADLINE\tSUMMARY")
	for _, ap := range list {
		sum := ap.Summary
		if len(sum) > 80 {
			sum = sum[:80] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ap.ID, ap.Kind, ap.Sandbox, ap.State,
			ap.CreatedAt.Local().Format(time.DateTime), ap.Deadline.Local().Format(time.DateTime), termSafe(sum))
	}
	return tw.Flush()
}

// printApproval prints one approval, its action as indented JSON.
func printApproval(w io.Writer, ap v1.Approval) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, termSafe(v))
		}
	}
	row("ID", ap.ID)
	row("Kind", ap.Kind)
	row("Sandbox", ap.Sandbox)
	row("User", ap.User)
	row("Summary", ap.Summary)
	row("Asked by", ap.AskedBy)
	row("State", ap.State)
	row("Scope", ap.Scope)
	row("Created", ap.CreatedAt.Local().Format(time.RFC3339))
	row("Deadline", ap.Deadline.Local().Format(time.RFC3339))
	if ap.DecidedAt != nil {
		row("Decided", ap.DecidedAt.Local().Format(time.RFC3339))
	}
	row("Decided by", ap.DecidedBy)
	row("Reason", ap.Reason)
	if err := tw.Flush(); err != nil {
		return err
	}
	var action any
	if err := json.Unmarshal(ap.Action, &action); err == nil {
		b, _ := json.MarshalIndent(action, "  ", "  ")
		fmt.Fprintf(w, "Action:\n  %s\n", jsonSafe(b))
	}
	return nil
}

// approvalServeFlags are `moat serve`'s approval flags.
type approvalServeFlags struct {
	webhook, secretFile string
}

func (f *approvalServeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.webhook, "approval-webhook", "", "POST each new approval and each decision to this URL as JSON {event, approval}, signed (X-Moat-Signature: v1=hex(HMAC-SHA256(secret, timestamp.body)), X-Moat-Timestamp); retried with back-off")
	cmd.Flags().StringVar(&f.secretFile, "approval-webhook-secret", "", "file holding the webhook's signing secret (required with --approval-webhook)")
}

// apply checks the flags and sets cfg's approvals configuration.
func (f *approvalServeFlags) apply(cfg *daemon.Config) error {
	if f.webhook == "" {
		if f.secretFile != "" {
			return fmt.Errorf("--approval-webhook-secret without --approval-webhook")
		}
		return nil
	}
	u, err := url.Parse(f.webhook)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("--approval-webhook %q: want an http:// or https:// URL", f.webhook)
	}
	if f.secretFile == "" {
		return fmt.Errorf("--approval-webhook needs --approval-webhook-secret FILE (the key its deliveries are signed with)")
	}
	b, err := os.ReadFile(f.secretFile)
	if err != nil {
		return fmt.Errorf("--approval-webhook-secret: %w", err)
	}
	secret := bytes.TrimSpace(b)
	if len(secret) < 16 {
		return fmt.Errorf("--approval-webhook-secret %s: the secret is shorter than 16 bytes", f.secretFile)
	}
	cfg.Approvals.WebhookURL, cfg.Approvals.WebhookSecret = f.webhook, secret
	return nil
}
