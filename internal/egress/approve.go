package egress

import (
	"context"
	"fmt"
	"time"

	"github.com/moatdev/moat/internal/egress/intercept"
)

// Approval per use of a credential (sandbox.Credential.Approve): the interceptor holds the
// request and asks Config.CredentialAsker (egress.Asker, kind AskCredential: the method,
// path and secret name, never the value). Every decision is in the egress log (proto
// "http", rule "approval") and the audit log.

const defaultCredentialWait = 5 * time.Minute

// approveCredential is the interceptor's Approve for this host.
func (ic interceptor) approveCredential(ctx context.Context, q intercept.CredentialQuestion) (bool, string) {
	asker := ic.m.cfg.CredentialAsker
	wait := ic.m.cfg.CredentialWait
	if wait <= 0 {
		wait = defaultCredentialWait
	}
	phase, _ := ic.b.current()
	ok, why := false, "no approvals service is configured"
	var by string
	if asker != nil {
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		a, err := asker.Ask(ctx, Question{
			Kind: AskCredential, Sandbox: ic.b.id, User: ic.user, Phase: phase, Name: ic.host, Port: ic.port,
			Method: q.Method, Path: q.Path, Secret: q.Secret, Wait: wait,
		})
		switch {
		case err != nil && ctx.Err() != nil:
			why = fmt.Sprintf("no decision within %s", wait)
		case err != nil:
			why = "the approval could not be asked: " + err.Error()
		case a.Approved:
			ok, why, by = true, "approved", a.By
		default:
			why, by = "denied", a.By
			if a.Reason != "" {
				why += " (" + a.Reason + ")"
			}
		}
		if by != "" {
			why += " by " + by
		}
	}
	e := &Entry{
		Time: time.Now(), Sandbox: ic.b.id, Phase: phase, Proto: "http", Name: ic.host, Port: int(ic.port),
		Allowed: ok, Rule: "approval", Reason: fmt.Sprintf("%s %s: credential %s: %s", q.Method, q.Path, q.Secret, why),
	}
	ic.m.journal.add(e)
	if ic.m.cfg.Audit != nil {
		ic.m.cfg.Audit(ic.b.id, "credential", fmt.Sprintf("approval of %s %s https://%s%s: %s", q.Secret, q.Method, ic.host, q.Path, why))
	}
	return ok, why
}
