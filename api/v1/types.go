// Package v1 holds the wire types of moat's native REST API (`/v1/...`). It has no logic:
// the daemon (internal/apiserver) serves these types and the Go SDK (sdk/) sends them.
package v1

import "time"

// CreateSandboxRequest is the body of POST /v1/sandboxes. Zero values take the daemon's
// defaults.
type CreateSandboxRequest struct {
	Runtime  string `json:"runtime,omitempty"`
	Template string `json:"template,omitempty"`
	Repo     string `json:"repo,omitempty"` // host directory: a git work tree
	// FromSnapshot makes the sandbox from a snapshot (its filesystem, template and
	// repository; unset limits and policy are the snapshot's).
	FromSnapshot   string            `json:"from_snapshot,omitempty"`
	User           string            `json:"user,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	MemoryBytes    int64             `json:"memory_bytes,omitempty"`
	CPUs           float64           `json:"cpus,omitempty"`
	Pids           int64             `json:"pids,omitempty"`
	DiskBytes      int64             `json:"disk_bytes,omitempty"`
	Nofile         int64             `json:"nofile,omitempty"`  // open files per process
	IOBps          int64             `json:"io_bps,omitempty"`  // drive reads and writes, bytes/s each
	IOIops         int64             `json:"io_iops,omitempty"` // drive reads and writes, requests/s each
	TimeoutSeconds int64             `json:"timeout_seconds,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Policy         *Policy           `json:"policy,omitempty"` // egress; nil: deny-all
	Credentials    []Credential      `json:"credentials,omitempty"`
	// AgentBranchPrefix is where the sandbox may push (the git gate): "agent/NAME/" or
	// "refs/heads/agent/NAME/" (any ref prefix strictly below refs/heads/; a missing
	// "refs/heads/" or trailing "/" is added). Empty: refs/heads/agent/<sandbox id>/.
	AgentBranchPrefix string `json:"agent_branch_prefix,omitempty"`
	// GitProtected is what the git gate does with a push whose only problem is protected
	// paths (its refs are allowed and it fast-forwards): "refuse" (default) or "hold" —
	// keep it for a person to approve (POST …/changes/{cid}/approve) or deny.
	GitProtected string `json:"git_protected,omitempty"`
	// Lifecycle (idle stop, resume, deletion when unused; docs/api.md). IdleSeconds: stop
	// the sandbox after this long without activity (nil: the daemon's default, 300; 0:
	// never). DeleteAfterSeconds: delete it after this long unused, whatever its state
	// (nil: the daemon's default, 7 days; 0: never). Archive: write its drive to
	// <data>/archives/<id>.tar.zst before that deletion.
	IdleSeconds        *int64 `json:"idle_seconds,omitempty"`
	DeleteAfterSeconds *int64 `json:"delete_after_seconds,omitempty"`
	Archive            bool   `json:"archive,omitempty"`
	// Name names the sandbox: unique among the caller's sandboxes, usable wherever an ID
	// is. Labels are KEY=VALUE pairs validated like Kubernetes labels, for list filters.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Ask holds every connection the policy does not allow (and no deny rule denies) for
	// a person's decision instead of refusing it (the policy's ask_all); AskWaitSeconds is
	// the longest hold (0: the daemon's default, 120). See docs/api.md, "Ask mode".
	Ask            bool  `json:"ask,omitempty"`
	AskWaitSeconds int64 `json:"ask_wait_seconds,omitempty"`
	// Tier is a consequence tier (GET /v1/tiers): it sets the policy's phases and
	// methods, the credentials' limits and approvals and the git gate together, and
	// refuses what the request asks beyond it (tiers.go).
	Tier string `json:"tier,omitempty"`
	// Users are accounts to add to the sandbox (users.go; POST …/users adds more later).
	Users []UserRequest `json:"users,omitempty"`
	// Visibility: VisibilityPrivate (default) or VisibilityTeam (see Sandbox.Visibility).
	Visibility string `json:"visibility,omitempty"`
}

// Credential binds a stored secret (moat secret set) to hosts. Without Header the sandbox
// gets an environment variable named Secret holding a placeholder, which the egress proxy
// swaps for the real value in PlaceholderHeader of requests to the hosts; with Header the
// proxy sets that header (Template with {{value}}) on requests to them. Responses from
// the hosts, on any port, are scrubbed of the value.
type Credential struct {
	Secret     string   `json:"secret"`
	Hosts      []string `json:"hosts"`
	Header     string   `json:"header,omitempty"`
	Template   string   `json:"template,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	Methods    []string `json:"methods,omitempty"`
	// GitHub, for a secret that is a GitHub App's key, is the scope of the installation
	// tokens moat mints for this sandbox; the placeholder stands for the current token.
	GitHub *GitHubScope `json:"github,omitempty"`
	// PlainHTTP lets the value into plain HTTP requests to the hosts too (default: TLS
	// only; plain HTTP to a bound host is refused).
	PlainHTTP bool `json:"plain_http,omitempty"`
	// PlaceholderHeader, without Header, is the request header the placeholder is swapped
	// in (default Authorization), in the forms "SCHEME PH" (Bearer, token, ...), "PH", and
	// Basic credentials with PH as user or password. The placeholder anywhere else (other
	// headers, the query string, the path, the body) reaches the host unchanged.
	PlaceholderHeader string `json:"placeholder_header,omitempty"`
	// Approve: each request the value would be injected into waits for a person's
	// approval; denied or unanswered it gets 403 and is not sent (the operate tier sets it).
	Approve bool `json:"approve,omitempty"`
}

// GitHubScope limits the GitHub App installation tokens of one sandbox.
type GitHubScope struct {
	Repositories []string          `json:"repositories"`          // names without owner
	Permissions  map[string]string `json:"permissions,omitempty"` // e.g. contents: write; default contents: read
}

// Sandbox is a sandbox as the API reports it.
type Sandbox struct {
	ID       string            `json:"id"`
	State    string            `json:"state"`
	Runtime  string            `json:"runtime"`
	Template string            `json:"template"`
	Repo     string            `json:"repo,omitempty"`
	User     string            `json:"user"`
	Env      map[string]string `json:"env,omitempty"`
	Limits   Limits            `json:"limits"`
	// Snapshot is the snapshot the sandbox was made from, ForkOf the sandbox it was
	// forked from (the snapshot tree).
	Snapshot  string            `json:"snapshot,omitempty"`
	ForkOf    string            `json:"fork_of,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Error     string            `json:"error,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	// HostUID is the host uid that is root inside the sandbox (runc/crun); 0 for runsc.
	HostUID uint32 `json:"host_uid"`
	// Policy is the egress policy with its current phase.
	Policy Policy `json:"policy"`
	// Credentials are the secret bindings (never the values).
	Credentials []Credential `json:"credentials,omitempty"`
	// AgentBranchPrefix is the ref prefix the git gate lets the sandbox push under, e.g.
	// "refs/heads/agent/sb-0123456789ab/".
	AgentBranchPrefix string `json:"agent_branch_prefix"`
	// GitProtected is "refuse" or "hold" (see CreateSandboxRequest).
	GitProtected string `json:"git_protected"`
	// Tier is the consequence tier it was made with ("": none); GitPush is "none" when
	// the git gate refuses every push (the read tier), else "agent-branch".
	Tier    string `json:"tier,omitempty"`
	GitPush string `json:"git_push"`
	// OOMKills counts the sandbox's processes the kernel's OOM killer ended (its memory
	// limit was reached), over all its runs; LastOOMAt is when the latest was seen.
	OOMKills  uint64     `json:"oom_kills,omitempty"`
	LastOOMAt *time.Time `json:"last_oom_at,omitempty"`
	Lifecycle
	// Name and Labels, as given at create.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// PidsLimitHits counts the forks refused at its pids limit over all its runs (runc);
	// LastPidsLimitAt is when the latest was seen.
	PidsLimitHits   uint64     `json:"pids_limit_hits,omitempty"`
	LastPidsLimitAt *time.Time `json:"last_pids_limit_at,omitempty"`
	// Users and SharedGroups are the accounts moat added (users.go).
	Users        []User        `json:"users,omitempty"`
	SharedGroups []SharedGroup `json:"shared_groups,omitempty"`
	// Owner is the id of the API key that created the sandbox ("": the operator) and
	// OwnerName that key's owner name. Visibility is who else may use it for the console,
	// terminal, previews and files: VisibilityPrivate (its owner) or VisibilityTeam (every
	// key of the daemon). Admin keys and the operator may use every sandbox.
	Owner      string `json:"owner,omitempty"`
	OwnerName  string `json:"owner_name,omitempty"`
	Visibility string `json:"visibility"`
}

// Sandbox visibilities (Sandbox.Visibility).
const (
	VisibilityPrivate = "private"
	VisibilityTeam    = "team"
)

// VisibilityRequest is the body of PUT /v1/sandboxes/{id}/visibility.
type VisibilityRequest struct {
	Visibility string `json:"visibility"`
}

// Limits are a sandbox's resource limits. Nofile is each process' RLIMIT_NOFILE, chosen
// so that pids × nofile stays within the sandbox's open-file budget; IOBps and IOIops
// throttle reads and writes to its drive (0: unthrottled).
type Limits struct {
	MemoryBytes int64   `json:"memory_bytes"`
	CPUs        float64 `json:"cpus"`
	Pids        int64   `json:"pids"`
	DiskBytes   int64   `json:"disk_bytes"`
	Nofile      int64   `json:"nofile"`
	IOBps       int64   `json:"io_bps"`
	IOIops      int64   `json:"io_iops"`
}

// KeyMaxima are an API key's maxima of the limits of the sandboxes it creates; zero
// fields: only the daemon's maxima and the host bound them.
type KeyMaxima struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
}

// Template is a template as GET /v1/templates reports it.
type Template struct {
	Name    string    `json:"name"`
	Source  string    `json:"source"`
	Builtin bool      `json:"builtin,omitempty"`
	Created time.Time `json:"created,omitempty"`
	Layers  int       `json:"layers"`
	// Recorded from a Dockerfile's LABEL, CMD and ENTRYPOINT (sandboxes do not run them).
	Labels     map[string]string `json:"labels,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
}

// TemplateRequest is the body of POST /v1/templates/{build,import,pull}.
type TemplateRequest struct {
	Name     string `json:"name"`
	Path     string `json:"path,omitempty"`     // import: a tar on the daemon's host
	Ref      string `json:"ref,omitempty"`      // pull: an image reference
	Insecure bool   `json:"insecure,omitempty"` // pull: plain HTTP registry
	Mirror   string `json:"mirror,omitempty"`   // build: Debian mirror URL
}

// Progress is one line of a streamed long operation (NDJSON). The last line has Done set,
// and Error when it failed.
type Progress struct {
	Message string    `json:"message,omitempty"`
	Done    bool      `json:"done,omitempty"`
	Error   string    `json:"error,omitempty"`
	Result  *Template `json:"result,omitempty"`
	// Build is a Dockerfile build's report (POST /v1/templates/dockerfile).
	Build *BuildReport `json:"build,omitempty"`
}

// Error is the body of every non-2xx response.
type Error struct {
	Code    string `json:"code"` // not_found, invalid_argument, conflict, unavailable, unauthenticated, permission_denied, internal
	Message string `json:"message"`
}

// Event is one lifecycle event of a sandbox.
type Event struct {
	Seq    int64     `json:"seq"`
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	Detail string    `json:"detail"`
}

// APIKey describes an API key. Key is only set in the answer to a create.
type APIKey struct {
	ID      string    `json:"id"`
	Key     string    `json:"key,omitempty"`
	Created time.Time `json:"created"`
	// Secrets are the secrets the key may bind in credential bindings (its grants); a
	// binding of any other secret over this key is refused (403).
	Secrets []string `json:"secrets"`
	// Max are the key's maxima of its sandboxes' limits (a create over one is refused).
	Max KeyMaxima `json:"max"`
	// Approver: the key may decide approvals (not those it asked, nor of its sandboxes).
	Approver bool `json:"approver,omitempty"`
	// Owner is the name of the person or agent the key belongs to (shown as each of its
	// sandboxes' owner); Admin keys may see and use every sandbox, as the operator.
	Owner string `json:"owner,omitempty"`
	Admin bool   `json:"admin,omitempty"`
}

// APIKeyRequest is the body of POST /v1/apikeys (optional) and of
// PUT /v1/apikeys/{id}/secrets: the secrets the key may bind (none by default). Max, on
// POST only, sets the key's maxima (PUT /v1/apikeys/{id}/max changes them).
type APIKeyRequest struct {
	Secrets []string   `json:"secrets"`
	Max     *KeyMaxima `json:"max,omitempty"`
	// Approver, on POST only: the key may decide approvals (internal/approvals).
	Approver bool `json:"approver,omitempty"`
	// Owner and Admin, on POST only: see APIKey.
	Owner string `json:"owner,omitempty"`
	Admin bool   `json:"admin,omitempty"`
}

// PolicyRules is one phase of an egress policy.
type PolicyRules struct {
	Net   string   `json:"net,omitempty"` // "allow-all", "deny-all" or "" (allow rules only)
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// HTTP rules, "HOST[:PORTS] [METHODS] [/PATH-PREFIX]": each allows its host and
	// limits the requests sent to it (moat terminates TLS to check them).
	HTTP []string `json:"http,omitempty"`
	// Ask rules: connections they cover that no allow rule allows are held for approval.
	Ask []string `json:"ask,omitempty"`
}

// Policy is a sandbox's egress policy: named phases and the current one.
type Policy struct {
	Phases map[string]PolicyRules `json:"phases"`
	Phase  string                 `json:"phase"`
	Sets   map[string][]string    `json:"sets,omitempty"`
	// AskAll holds what no rule allows or denies for approval (create's ask); AskWait is
	// the longest hold as a Go duration ("90s", "2m"; "": the daemon's default).
	AskAll  bool   `json:"ask_all,omitempty"`
	AskWait string `json:"ask_wait,omitempty"`
}

// SetPolicyRequest is the body of PUT /v1/sandboxes/{id}/policy: a new policy, a new
// phase, or both.
type SetPolicyRequest struct {
	Policy *Policy `json:"policy,omitempty"`
	Phase  string  `json:"phase,omitempty"`
}

// SetPolicyResponse reports the sandbox with its new policy and how many open
// connections the change cut.
type SetPolicyResponse struct {
	Sandbox        Sandbox `json:"sandbox"`
	ConnectionsCut int     `json:"connections_cut"`
}

// EgressEntry is one decision of a sandbox's egress log (GET /v1/sandboxes/{id}/egress).
type EgressEntry struct {
	Seq        int64     `json:"seq"`
	Time       time.Time `json:"time"`
	Phase      string    `json:"phase"`
	Proto      string    `json:"proto"` // "tcp", "dns", "http" (an HTTP rule decided a request) or "git" (the git gate decided a push)
	Name       string    `json:"name,omitempty"`
	Addr       string    `json:"addr,omitempty"`
	Port       int       `json:"port,omitempty"`
	Allowed    bool      `json:"allowed"`
	Rule       string    `json:"rule,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Upstream   string    `json:"upstream,omitempty"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS float64   `json:"duration_ms"`
	Open       bool      `json:"open,omitempty"`
	Error      string    `json:"error,omitempty"`
	// User is the sandbox user who made the connection or request ("" for root and users
	// moat does not tell apart).
	User string `json:"user,omitempty"`
}
