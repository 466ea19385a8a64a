package v1

import (
	"encoding/json"
	"time"
)

// Approval is a question a person decides before an action happens (GET /v1/approvals).
// Kind is network, credential, push or tool; Action the exact action as JSON (a tool call:
// {"tool", "arguments"}; a connection: {"host", "addr", "port", "phase", "rule"}; a
// credential: those and {"method", "path", "secret"} (the secret's name, never its value);
// a push: {"change", "remote", "refs"}). State is pending, approved, denied or expired.
// NotBy are the API keys ("key:ID") that may not decide it: the one that asked and the
// sandbox's owner. The operator and keys made with --approver decide.
type Approval struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Sandbox   string          `json:"sandbox"`
	User      string          `json:"user,omitempty"`
	Action    json.RawMessage `json:"action"`
	Summary   string          `json:"summary,omitempty"`
	AskedBy   string          `json:"asked_by"`
	Owner     string          `json:"owner,omitempty"`
	NotBy     []string        `json:"not_by,omitempty"`
	State     string          `json:"state"`
	Scope     string          `json:"scope,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	Deadline  time.Time       `json:"deadline"`
	DecidedAt *time.Time      `json:"decided_at,omitempty"`
	DecidedBy string          `json:"decided_by,omitempty"`
	Reason    string          `json:"reason,omitempty"`
}

// AskApprovalRequest is the body of POST /v1/approvals: an agent harness asks before it
// runs a tool. WaitSeconds is how long the question stays open (0: 300; at most 86400).
type AskApprovalRequest struct {
	Sandbox     string          `json:"sandbox"`
	User        string          `json:"user,omitempty"`
	Tool        string          `json:"tool"`
	Arguments   json.RawMessage `json:"arguments,omitempty"`
	Summary     string          `json:"summary,omitempty"`
	WaitSeconds int             `json:"wait_seconds,omitempty"`
}

// DecideApprovalRequest is the body (optional) of POST /v1/approvals/{id}/approve and
// /deny. Scope, on approve only: once (default) or sandbox (network and credential
// approvals: a rule added to the sandbox's policy).
type DecideApprovalRequest struct {
	Reason string `json:"reason,omitempty"`
	Scope  string `json:"scope,omitempty"`
}
