package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/errdefs"
)

// ApprovalsConfig configures approvals (internal/approvals).
type ApprovalsConfig struct {
	// WebhookURL, when set, is told of each new approval and each decision (and expiry):
	// a POST of {"event", "approval"} signed with WebhookSecret (--approval-webhook,
	// --approval-webhook-secret; see approvals.Sign).
	WebhookURL    string
	WebhookSecret []byte
	// WebhookBackoff is the first retry's delay (0: 500 ms); tests shorten it.
	WebhookBackoff time.Duration
}

// newApprovals makes the approval service on the daemon's store, before the egress
// manager (which asks through it) and the sandbox manager (which it asks for owners).
func (d *Daemon) newApprovals() error {
	cfg := d.cfg.Approvals
	if cfg.WebhookURL != "" && len(cfg.WebhookSecret) == 0 {
		return fmt.Errorf("--approval-webhook needs --approval-webhook-secret (the key the deliveries are signed with)")
	}
	st := d.Store
	log := d.log.With("component", "approvals")
	event := func(id, detail string) {
		if err := st.AddEvent(context.Background(), id, "approval", detail); err != nil {
			log.Error("recording an approval event", "sandbox", id, "err", err)
		}
	}
	var hook *approvals.Webhook
	if cfg.WebhookURL != "" {
		hook = &approvals.Webhook{URL: cfg.WebhookURL, Secret: cfg.WebhookSecret, Backoff: cfg.WebhookBackoff, Log: log,
			Failed: func(a approvals.Approval, ev string, err error) {
				event(a.Sandbox, fmt.Sprintf("webhook delivery of %s %s failed: %v", ev, a.ID, err))
			}}
		d.addCloser("approval webhook", func() error { hook.Close(5 * time.Second); return nil })
	}
	d.Approvals = approvals.New(approvals.Options{
		Store:   st,
		Changes: changeDecider{d},
		Notify: func(ev string, a approvals.Approval) {
			event(a.Sandbox, approvalEventText(ev, a))
			if hook != nil {
				hook.Notify(ev, a)
			}
		},
		Owner: func(ctx context.Context, id string) (string, error) {
			sb, err := d.Manager.Get(ctx, id)
			if err != nil {
				return "", err
			}
			return sb.Owner, nil
		},
		Log: log,
	})
	d.addCloser("approvals", func() error { d.Approvals.Close(); return nil })
	return nil
}

// startApprovals recovers the approvals of the previous run (when this daemon reconciles),
// hooks held pushes to them, and serves them.
func (d *Daemon) startApprovals(ctx context.Context, exclusive bool) error {
	if exclusive {
		if err := d.Approvals.Recover(ctx); err != nil {
			return err
		}
	}
	log := d.log.With("component", "approvals")
	d.Egress.SetChangeHooks(egress.ChangeHooks{
		Held: func(r changes.Record) {
			if err := d.askPush(r); err != nil {
				log.Warn("making the approval of a held push", "sandbox", r.Sandbox, "change", r.ID, "err", err)
			}
		},
		Decided: func(r changes.Record) {
			if r.Decided == nil {
				return
			}
			d.Approvals.ChangeDecided(context.Background(), r.Sandbox, r.ID, r.Decided.Action == changes.ActApprove, r.Decided.By, r.Decided.Reason)
		},
	})
	d.api.SetApprovals(d.Approvals)
	// Pending approvals of deleted sandboxes expire at the next sweep.
	every := d.cfg.SweepInterval
	if every <= 0 {
		every = 30 * time.Second
	}
	d.every("approval sweep", every, func() { d.expireOrphanApprovals(log) }, nil)
	return nil
}

// expireOrphanApprovals expires the pending approvals of sandboxes that no longer exist.
func (d *Daemon) expireOrphanApprovals(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := d.Approvals.ExpireGone(ctx, func(id string) bool {
		_, err := d.Manager.Get(ctx, id)
		return errors.Is(err, errdefs.ErrNotFound)
	})
	if err != nil {
		log.Warn("expiring the approvals of deleted sandboxes", "err", err)
	}
}

// askPush makes the push approval of held change r; its deadline is the change's.
func (d *Daemon) askPush(r changes.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pa := approvals.PushAction{Change: r.ID, Remote: r.Remote, Refs: []string{}}
	for _, x := range r.Refs {
		pa.Refs = append(pa.Refs, x.Ref)
	}
	action, err := json.Marshal(pa)
	if err != nil {
		return err
	}
	summary := fmt.Sprintf("push to %s: %s", r.Remote, strings.Join(pa.Refs, ", "))
	if len(r.Protected) > 0 {
		paths := make([]string, 0, len(r.Protected))
		for _, h := range r.Protected {
			paths = append(paths, h.Path)
		}
		summary += " (touches protected paths: " + strings.Join(paths, ", ") + ")"
	}
	if len(summary) > 1000 {
		summary = summary[:1000] + "..."
	}
	wait := time.Duration(0)
	if r.Expires != nil {
		wait = time.Until(*r.Expires)
	}
	if wait <= 0 {
		wait = changes.DefaultHoldFor
	}
	owner := ""
	if sb, err := d.Manager.Get(ctx, r.Sandbox); err == nil {
		owner = sb.Owner
	}
	_, err = d.Approvals.Create(ctx, approvals.Approval{Kind: approvals.KindPush, Sandbox: r.Sandbox, Action: action, Summary: summary,
		AskedBy: approvals.ByGitGate, Owner: owner}, wait)
	return err
}

// approvalEventText is the sandbox event of an approval event.
func approvalEventText(ev string, a approvals.Approval) string {
	s := fmt.Sprintf("%s %s (%s): %s", a.ID, ev, a.Kind, a.Summary)
	if ev != approvals.EventCreated {
		s = fmt.Sprintf("%s %s (%s): %s", a.ID, a.State, a.Kind, a.Summary)
		if a.DecidedBy != "" {
			s += " by " + a.DecidedBy
		}
		if a.Reason != "" {
			s += ": " + a.Reason
		}
	}
	if len(s) > 500 {
		s = s[:500] + "..."
	}
	return s
}

// changeDecider decides held changes for push approvals through the egress manager.
type changeDecider struct{ d *Daemon }

func (c changeDecider) ApproveChange(ctx context.Context, sandbox, cid, by, reason string) error {
	_, err := c.d.Egress.ApproveChange(ctx, sandbox, cid, by, reason)
	return err
}

func (c changeDecider) DenyChange(sandbox, cid, by, reason string) error {
	_, err := c.d.Egress.DenyChange(sandbox, cid, by, reason)
	return err
}

// egressAsker is who decides what the egress proxy and the interceptor ask about: a test
// hook (Config.EgressAsker, Config.CredentialAsker) when set, else the approvals service.
func (d *Daemon) egressAsker(hook egress.Asker) egress.Asker {
	if hook != nil {
		return hook
	}
	return d.Approvals.Asker()
}
