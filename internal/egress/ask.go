package egress

import (
	"context"
	"net/netip"
	"time"
)

// Ask mode: what the proxy does not allow outright, it may hold for a person's decision.
// The egress side asks through Asker; the approvals service (outside this package)
// answers. This file holds the contract both sides share.

// What a Question is about (Question.Kind).
const (
	AskNetwork    = "network"    // a connection to a destination the policy does not allow
	AskCredential = "credential" // a request that would get a credential injected
)

// Scope of an approval (Answer.Scope).
const (
	ScopeOnce    = "once"    // this connection (or request) only
	ScopeSandbox = "sandbox" // a rule added to the sandbox's policy: later ones pass too
)

// Question is one held connection or request.
type Question struct {
	Kind    string
	Sandbox string
	User    string // the sandbox user who made it ("": not known)
	Phase   string
	Name    string     // host name ("" for a direct IP)
	Addr    netip.Addr // the destination the sandbox dialled
	Port    uint16
	Rule    string // the ask rule that held it ("" for the sandbox-wide --ask)
	// For AskCredential: the HTTP request and the secret that would be injected.
	Method, Path, Secret string
	// Wait is how long the connection is held at most; the asker gives up then.
	Wait time.Duration
}

// Answer is a decision. A time-out or a cancelled context is an error, never an Answer.
type Answer struct {
	ApprovalID string
	Approved   bool
	Scope      string // ScopeOnce or ScopeSandbox, for approvals
	By         string // who decided
	Reason     string
}

// Asker holds a Question until a person decides it, Wait passes, or ctx ends.
type Asker interface {
	Ask(ctx context.Context, q Question) (Answer, error)
}
