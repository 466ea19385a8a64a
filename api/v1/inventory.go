package v1

import "time"

// Inventory is the answer of GET /v1/inventory: the access each sandbox, template and API
// key the caller may see actually has, the host's isolation, and what would widen access
// (Flags). The operator sees everything; an API key its own sandboxes and itself.
type Inventory struct {
	GeneratedAt time.Time `json:"generated_at"`
	// Scope: "operator" or "api-key" (then APIKey is the key's id).
	Scope     string              `json:"scope"`
	APIKey    string              `json:"api_key,omitempty"`
	Host      *InventoryHost      `json:"host,omitempty"`
	Sandboxes []InventorySandbox  `json:"sandboxes"`
	Templates []InventoryTemplate `json:"templates"`
	APIKeys   []InventoryAPIKey   `json:"api_keys"`
	// Flags are every subject's flags, most severe first.
	Flags []InventoryFlag `json:"flags"`
}

// InventoryFlag is one thing that widens access: Kind is a stable identifier
// ("allow-all", "shared-wildcard", "shared-host", "tld-wildcard", "wide-cidr",
// "private-cidr", "credential-any-method", "credential-shared-host",
// "credential-plain-http", "github-write", "sudo-with-credentials", "sudo-bypasses-user-egress",
// "ask-all", "ask-rules", "tier-mismatch", "approver-key", "no-key-maxima"), Severity
// "high", "medium" or "low".
type InventoryFlag struct {
	Subject  string `json:"subject"` // "sandbox ID", "api-key ID", "template NAME", "host"
	Kind     string `json:"kind"`
	Severity string `json:"severity"`
	Phase    string `json:"phase,omitempty"`
	User     string `json:"user,omitempty"`
	Rule     string `json:"rule,omitempty"`
	Detail   string `json:"detail"`
}

// InventorySandbox is one sandbox's access.
type InventorySandbox struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	State    string `json:"state"`
	Runtime  string `json:"runtime"`
	Template string `json:"template"`
	// Owner is the API key that created it ("": the operator). Shown to the operator only.
	Owner string `json:"owner,omitempty"`
	Tier  string `json:"tier,omitempty"`
	// Phase is the current phase; Phases every phase, sorted by name.
	Phase       string           `json:"phase"`
	Phases      []InventoryPhase `json:"phases"`
	AskAll      bool             `json:"ask_all,omitempty"`
	AskWait     string           `json:"ask_wait,omitempty"`
	Credentials []Credential     `json:"credentials"`
	Git         InventoryGit     `json:"git"`
	Users       []InventoryUser  `json:"users"`
	Flags       []InventoryFlag  `json:"flags"`
}

// InventoryPhase is one phase of a sandbox's egress policy.
type InventoryPhase struct {
	Name    string          `json:"name"`
	Current bool            `json:"current,omitempty"`
	Net     string          `json:"net"` // "allow-all", "deny-all" or "rules"
	Rules   []InventoryRule `json:"rules"`
	Error   string          `json:"error,omitempty"` // the rules did not parse (should not happen)
}

// InventoryRule is one rule with sets expanded (see internal/egress/policy.Entry).
type InventoryRule struct {
	Verb       string   `json:"verb"` // allow, deny, http, ask
	Text       string   `json:"text"`
	Set        string   `json:"set,omitempty"`
	Kind       string   `json:"kind"` // name, wildcard, cidr
	Host       string   `json:"host,omitempty"`
	CIDR       string   `json:"cidr,omitempty"`
	Ports      string   `json:"ports"`
	HTTP       bool     `json:"http,omitempty"`
	Methods    []string `json:"methods,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
}

// InventoryGit is a sandbox's git gate.
type InventoryGit struct {
	Repo              string `json:"repo,omitempty"`
	AgentBranchPrefix string `json:"agent_branch_prefix"`
	Push              string `json:"push"`      // "agent-branch" or "none"
	Protected         string `json:"protected"` // "refuse" or "hold"
	// ProtectedPaths are the globs a push may not touch without Protected applying.
	ProtectedPaths []string `json:"protected_paths"`
}

// InventoryUser is an account moat added to a sandbox.
type InventoryUser struct {
	Name   string   `json:"name"`
	UID    uint32   `json:"uid"`
	Sudo   bool     `json:"sudo,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Egress is the user's own egress (nil: the sandbox's).
	Egress *InventoryUserEgress `json:"egress,omitempty"`
}

// InventoryUserEgress is a user's own egress: its rules and credential names.
type InventoryUserEgress struct {
	Rules       []InventoryRule `json:"rules"`
	Credentials []string        `json:"credentials,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// InventoryTemplate is a template and the sandboxes made from it.
type InventoryTemplate struct {
	Name      string `json:"name"`
	Source    string `json:"source"`
	Builtin   bool   `json:"builtin,omitempty"`
	Layers    int    `json:"layers"`
	Sandboxes int    `json:"sandboxes"`
	// With ?scan=true (operator only): Scanned, the default user ("": root) and the
	// set-user-ID and set-group-ID programs of its layers (at most 200).
	Scanned     bool     `json:"scanned,omitempty"`
	DefaultUser string   `json:"default_user,omitempty"`
	SetID       []string `json:"setid,omitempty"`
	ScanError   string   `json:"scan_error,omitempty"`
}

// InventoryAPIKey is an API key's authority.
type InventoryAPIKey struct {
	ID        string    `json:"id"`
	Secrets   []string  `json:"secrets"`
	Approver  bool      `json:"approver,omitempty"`
	Max       KeyMaxima `json:"max"`
	Sandboxes int       `json:"sandboxes"`
}

// InventoryHost is the host's isolation, from the doctor's report (GET /v1/doctor).
type InventoryHost struct {
	Runtimes  []InventoryRuntime `json:"runtimes"`
	Isolation []InventoryLevel   `json:"isolation"`
	Kernel    []InventoryCheck   `json:"kernel"`
	KVM       *InventoryKVM      `json:"kvm,omitempty"`
}

// InventoryRuntime is one OCI runtime.
type InventoryRuntime struct {
	Name      string `json:"name"`
	Usable    bool   `json:"usable"`
	Version   string `json:"version,omitempty"`
	Isolation string `json:"isolation"`
}

// InventoryLevel is an isolation level.
type InventoryLevel struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Detail    string `json:"detail"`
}

// InventoryCheck is one kernel feature.
type InventoryCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// InventoryKVM is the kind of KVM (doctor's classification).
type InventoryKVM struct {
	Kind     string   `json:"kind"` // none, vt-x, amd-v, kvm-pvm, unknown
	Nested   string   `json:"nested"`
	Guest    bool     `json:"guest"`
	Hardware bool     `json:"hardware"`
	Detail   string   `json:"detail"`
	Allows   []string `json:"allows"`
}
