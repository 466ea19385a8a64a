// Package approvals holds approvals: questions a person decides before an action happens
// (a connection the egress policy does not allow, a credential injection, a git push held
// by the gate, a tool call an agent harness asks about). An Approval is a durable record
// with a pure state machine (Decide, Expire, MayDecide); the Service stores approvals,
// wakes waiters when one is decided, expires them at their deadline, notifies a webhook,
// and answers the egress proxy's questions (egress.Asker).
package approvals

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/errdefs"
)

// Kinds of approval (Approval.Kind).
const (
	KindNetwork    = egress.AskNetwork    // a held connection
	KindCredential = egress.AskCredential // a held request that would get a credential
	KindPush       = "push"               // a git push held by the gate (a change record)
	KindTool       = "tool"               // a tool call an agent harness asks about
)

// States of an approval (Approval.State).
const (
	Pending  = "pending"
	Approved = "approved"
	Denied   = "denied"
	Expired  = "expired"
)

// Scopes of an approval (Approval.Scope).
const (
	ScopeOnce    = egress.ScopeOnce
	ScopeSandbox = egress.ScopeSandbox
)

// Who asked, besides API keys ("key:ID") and the operator.
const (
	BySandbox  = "sandbox"  // the sandbox's own traffic, held by the egress proxy
	ByGitGate  = "git-gate" // a push held by the git gate
	ByOperator = "operator"
)

// Approval is one question and, once decided, its answer. Action is the exact action asked
// about, as JSON (ToolAction, NetworkAction, CredentialAction or PushAction): never a
// secret's value.
type Approval struct {
	ID      string          `json:"id"`
	Kind    string          `json:"kind"`
	Sandbox string          `json:"sandbox"`
	User    string          `json:"user,omitempty"`
	Action  json.RawMessage `json:"action"`
	Summary string          `json:"summary,omitempty"`
	// AskedBy is who asked: "key:ID", "operator", "sandbox" or "git-gate".
	AskedBy string `json:"asked_by"`
	// Owner is the API key owning the sandbox when it was asked ("" for the operator's).
	Owner string `json:"owner,omitempty"`
	// NotBy are the callers ("key:ID") that may not decide it: the key that asked and the
	// sandbox's owner (an agent must not approve itself). The operator and API keys with
	// the approver permission decide.
	NotBy     []string   `json:"not_by,omitempty"`
	State     string     `json:"state"`
	Scope     string     `json:"scope,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	Deadline  time.Time  `json:"deadline"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	DecidedBy string     `json:"decided_by,omitempty"`
	Reason    string     `json:"reason,omitempty"`
}

// ToolAction is the action of a tool-call approval.
type ToolAction struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// NetworkAction is the action of a network approval: where the sandbox connected.
type NetworkAction struct {
	Host  string `json:"host,omitempty"`
	Addr  string `json:"addr,omitempty"`
	Port  uint16 `json:"port"`
	Phase string `json:"phase,omitempty"`
	Rule  string `json:"rule,omitempty"`
}

// CredentialAction is the action of a credential approval: the request and the name of
// the secret that would be injected (its value never).
type CredentialAction struct {
	NetworkAction
	Method string `json:"method"`
	Path   string `json:"path"`
	Secret string `json:"secret"`
}

// PushAction is the action of a push approval: the held change.
type PushAction struct {
	Change string   `json:"change"`
	Remote string   `json:"remote"`
	Refs   []string `json:"refs"`
}

// Decider is who decides: the operator, or an API key (with or without the approver
// permission).
type Decider struct {
	Operator bool
	Key      string // API key id
	Approver bool
}

// String is how a decision records its decider: "operator" or "key:ID".
func (d Decider) String() string {
	if d.Operator {
		return ByOperator
	}
	return "key:" + d.Key
}

// Decision is a person's answer.
type Decision struct {
	Approve bool
	By      Decider
	Reason  string
	Scope   string // ScopeOnce (default) or ScopeSandbox (network, credential and tool; not push)
}

var idRE = regexp.MustCompile(`^ap-[0-9a-f]{12}$`)

// NewID returns a new random approval id, "ap-" and 12 hex digits.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "ap-" + hex.EncodeToString(b[:])
}

// CheckID says whether id is an approval id (errdefs.ErrInvalidArgument if not).
func CheckID(id string) error {
	if !idRE.MatchString(id) {
		if len(id) > 40 {
			id = id[:40]
		}
		return fmt.Errorf("approval id %q: want ap- and 12 hex digits: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CheckKind says whether kind is a kind of approval.
func CheckKind(kind string) error {
	switch kind {
	case KindNetwork, KindCredential, KindPush, KindTool:
		return nil
	}
	return fmt.Errorf("approval kind %q: want network, credential, push or tool: %w", kind, errdefs.ErrInvalidArgument)
}

// CheckState says whether state is a state of an approval.
func CheckState(state string) error {
	switch state {
	case Pending, Approved, Denied, Expired:
		return nil
	}
	return fmt.Errorf("approval state %q: want pending, approved, denied or expired: %w", state, errdefs.ErrInvalidArgument)
}

// MayDecide says whether d may decide a: the operator always; an API key only with the
// approver permission, and never one a names in NotBy (the key that asked, the sandbox's
// owner). It is pure.
func MayDecide(a Approval, d Decider) error {
	if d.Operator {
		return nil
	}
	if d.Key == "" || !d.Approver {
		return fmt.Errorf("deciding an approval is for the operator (the daemon's unix socket) or an API key made with `moat apikey create --approver`: %w", errdefs.ErrPermissionDenied)
	}
	if slices.Contains(a.NotBy, d.String()) {
		return fmt.Errorf("API key %s asked this approval or owns its sandbox, and may not decide it: %w", d.Key, errdefs.ErrPermissionDenied)
	}
	return nil
}

// Decide returns a decided by dec at now. Only a pending approval before its deadline
// may be decided (ErrConflict otherwise: decided already, or expired, which Expire then
// records); the decider must pass MayDecide; a scope other than once is for network and
// credential approvals only (ErrInvalidArgument). a is not changed. It is pure.
func Decide(a Approval, dec Decision, now time.Time) (Approval, error) {
	if err := MayDecide(a, dec.By); err != nil {
		return a, err
	}
	if a.State != Pending {
		return a, fmt.Errorf("approval %s is %s already: %w", a.ID, a.State, errdefs.ErrConflict)
	}
	if !now.Before(a.Deadline) {
		return a, fmt.Errorf("approval %s passed its deadline (%s): %w", a.ID, a.Deadline.Format(time.RFC3339), errdefs.ErrConflict)
	}
	scope := dec.Scope
	switch {
	case scope == "":
		scope = ScopeOnce
	case scope == ScopeOnce:
	case scope == ScopeSandbox && a.Kind != KindPush:
		if !dec.Approve {
			return a, fmt.Errorf("a denial has no scope: %w", errdefs.ErrInvalidArgument)
		}
	case scope == ScopeSandbox:
		return a, fmt.Errorf("scope sandbox is for network, credential and tool approvals, not %s: %w", a.Kind, errdefs.ErrInvalidArgument)
	default:
		return a, fmt.Errorf("scope %q: want once or sandbox: %w", scope, errdefs.ErrInvalidArgument)
	}
	out := a
	out.NotBy = slices.Clone(a.NotBy)
	out.State = Denied
	if dec.Approve {
		out.State, out.Scope = Approved, scope
	}
	t := now.UTC()
	out.DecidedAt, out.DecidedBy, out.Reason = &t, dec.By.String(), dec.Reason
	return out, nil
}

// Expire returns a expired at now with reason, and true, when a is pending and its
// deadline has come (or force: its question is gone, say the held connection with the
// daemon that held it); otherwise a unchanged and false. It is pure.
func Expire(a Approval, now time.Time, reason string, force bool) (Approval, bool) {
	if a.State != Pending || (!force && now.Before(a.Deadline)) {
		return a, false
	}
	out := a
	t := now.UTC()
	out.State, out.DecidedAt, out.DecidedBy, out.Reason = Expired, &t, "", reason
	return out, true
}

// Close returns pending push approval a closed by a decision made on its change
// elsewhere (`moat change approve|deny`): approved or denied as that decision was, by
// whom it says. A decided approval is returned unchanged with false. It is pure.
func Close(a Approval, approved bool, by, reason string, now time.Time) (Approval, bool) {
	if a.State != Pending {
		return a, false
	}
	out := a
	t := now.UTC()
	out.State = Denied
	if approved {
		out.State, out.Scope = Approved, ScopeOnce
	}
	out.DecidedAt, out.DecidedBy, out.Reason = &t, by, reason
	return out, true
}

// Standing returns tool approval a already approved when one of prior — approvals of the
// same sandbox — is an approved tool approval of scope sandbox for the same tool and user
// ("allow this tool in this sandbox"): by whom that one was, with a reason naming it, at
// now. Otherwise a unchanged and false. Arguments are not compared: the scope is the tool.
// It is pure.
func Standing(prior []Approval, a Approval, now time.Time) (Approval, bool) {
	if a.Kind != KindTool {
		return a, false
	}
	var want ToolAction
	if json.Unmarshal(a.Action, &want) != nil {
		return a, false
	}
	for _, p := range prior {
		if p.Kind != KindTool || p.Sandbox != a.Sandbox || p.User != a.User || p.State != Approved || p.Scope != ScopeSandbox {
			continue
		}
		var got ToolAction
		if json.Unmarshal(p.Action, &got) != nil || got.Tool != want.Tool {
			continue
		}
		out := a
		t := now.UTC()
		out.State, out.Scope, out.DecidedAt, out.DecidedBy = Approved, ScopeSandbox, &t, p.DecidedBy
		out.Reason = "tool " + want.Tool + " is approved for this sandbox by " + p.ID
		return out, true
	}
	return a, false
}
