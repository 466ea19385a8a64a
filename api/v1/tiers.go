package v1

// Tier is a consequence tier (GET /v1/tiers): a preset of egress policy, credentials,
// change authority and approvals, selected at create with "tier". The fields mirror the
// tiers file (`moat serve --tiers FILE`); docs/api.md describes them.
type Tier struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Builtin     bool            `json:"builtin"`
	Egress      TierEgress      `json:"egress"`
	Credentials TierCredentials `json:"credentials"`
	Git         TierGit         `json:"git"`
	Ask         bool            `json:"ask,omitempty"`
}

// TierEgress: Methods limits every request of the run phase ([] : as the request's rules
// say); Allow and HTTP are rules the tier adds to every phase; Setup, if set, is a setup
// phase the sandbox starts in (closed by switching to run); AllowAll lets a request open
// the network.
type TierEgress struct {
	Methods  []string   `json:"methods,omitempty"`
	Allow    []string   `json:"allow,omitempty"`
	HTTP     []string   `json:"http,omitempty"`
	Setup    *TierPhase `json:"setup,omitempty"`
	AllowAll bool       `json:"allow_all,omitempty"`
}

// TierPhase is the rules a tier's setup phase adds.
type TierPhase struct {
	Allow []string `json:"allow,omitempty"`
	HTTP  []string `json:"http,omitempty"`
}

// TierCredentials: Mode is "none", "read-only" (GET and HEAD only) or "as-bound";
// Approve makes each use wait for a person's approval.
type TierCredentials struct {
	Mode    string `json:"mode"`
	Approve bool   `json:"approve,omitempty"`
}

// TierGit: Push is "none" or "agent-branch"; Protected is "refuse" or "hold".
type TierGit struct {
	Push      string `json:"push"`
	Protected string `json:"protected,omitempty"`
}
