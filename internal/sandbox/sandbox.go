// Package sandbox holds moat's sandbox model: the Sandbox record, its lifecycle state table,
// and the Manager that drives a sandbox through its states with the runtime, storage and
// network subsystems it is given. It declares the small interfaces it consumes (deps.go);
// the composition root (internal/daemon) supplies the implementations.
package sandbox

import (
	"fmt"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/gitgate"
)

// State is a sandbox's lifecycle state.
type State string

// The lifecycle (DESIGN §6). "deleting" is durable: a daemon that dies mid-delete finishes
// the job when it starts again.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateStopped  State = "stopped"
	StateDeleting State = "deleting"
)

// Known says whether s is one of the lifecycle states.
func (s State) Known() bool {
	switch s {
	case StateCreating, StateRunning, StatePaused, StateStopped, StateDeleting:
		return true
	}
	return false
}

// CanTransition reports whether a sandbox in state from may move to state to: the one
// table of legal lifecycle moves, enforced on every update of a record (checkedStore).
func CanTransition(from, to State) bool {
	switch from {
	case StateCreating:
		return to == StateRunning || to == StateStopped || to == StateDeleting
	case StateRunning:
		return to == StatePaused || to == StateStopped || to == StateDeleting
	case StatePaused:
		return to == StateRunning || to == StateStopped || to == StateDeleting
	case StateStopped:
		return to == StateCreating || to == StateDeleting
	}
	return false // deleting is final; an unknown state goes nowhere
}

// checkTransition returns an ErrConflict-class error when from → to is not allowed.
func checkTransition(id string, from, to State) error {
	if CanTransition(from, to) {
		return nil
	}
	return fmt.Errorf("sandbox %s is %s, cannot become %s: %w", id, from, to, errdefs.ErrConflict)
}

// Sandbox is the durable record of one sandbox.
type Sandbox struct {
	ID       string            `json:"id"`
	State    State             `json:"state"`
	Runtime  string            `json:"runtime"`
	Template string            `json:"template"`
	Repo     string            `json:"repo,omitempty"`
	User     string            `json:"user"`
	Env      map[string]string `json:"env,omitempty"`
	Limits   Limits            `json:"limits"`
	Slot     int               `json:"slot"`
	// IDBase is the host uid of slot 0's root (0: HostIDBase). Fixed per sandbox.
	IDBase uint32 `json:"id_base,omitempty"`
	// Mapped: the sandbox runs in a user namespace of its own host uid range (HostIDs), so
	// its processes and the files of its drive belong to that range. Decided at create from
	// what its runtime can do (always under runc and crun; under runsc only with a current
	// gVisor) and fixed for the sandbox's life. nil: a record from before the field, when
	// only runsc sandboxes ran without one (see InUserNS).
	Mapped    *bool             `json:"mapped,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Error     string            `json:"error,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	// Warm marks a pool sandbox not yet handed to anyone (pool.go).
	Warm bool `json:"warm,omitempty"`
	// Provisioning marks a sandbox whose create has not finished: it is stored before the
	// first side effect (drive, namespaces, mounts, container) and cleared when the sandbox
	// first runs. Nobody was ever handed such a sandbox, so a daemon that finds one at its
	// start (it died mid-create) removes it entirely (Manager.Reconcile).
	Provisioning bool `json:"provisioning,omitempty"`
	// OOMKills counts the sandbox's processes the kernel's OOM killer killed (its memory
	// limit was reached), over all its runs; LastOOMAt is when the daemon saw the latest.
	// OOMCounter is the current run's cgroup counter at the daemon's last look (0 at each
	// start, whose container gets a new cgroup).
	OOMKills   uint64     `json:"oom_kills,omitempty"`
	LastOOMAt  *time.Time `json:"last_oom_at,omitempty"`
	OOMCounter uint64     `json:"oom_counter,omitempty"`
	// PidsLimitHits counts the forks refused at the sandbox's pids limit over all its runs,
	// LastPidsLimitAt when the daemon saw the latest; PidsCounter is the current run's
	// cgroup counter at the daemon's last look (0 at each start). See stats.go.
	PidsLimitHits   uint64     `json:"pids_limit_hits,omitempty"`
	LastPidsLimitAt *time.Time `json:"last_pids_limit_at,omitempty"`
	PidsCounter     uint64     `json:"pids_counter,omitempty"`
	// Timeout is the sandbox's lifetime per start (0: none); ExpiresAt is when the current
	// run ends: the daemon stops the sandbox then.
	Timeout   time.Duration `json:"timeout,omitempty"`
	ExpiresAt *time.Time    `json:"expires_at,omitempty"`
	// OnTimeout is what the timeout does: "stop" (the default: processes end, the drive
	// stays), "delete", or "pause" (processes frozen in memory).
	OnTimeout string `json:"on_timeout,omitempty"`
	// TemplateAlias is the template name the client used when it differs from Template
	// (an E2B name such as "base").
	TemplateAlias string `json:"template_alias,omitempty"`

	// Policy is the sandbox's egress policy with its current phase (nil: deny-all).
	Policy *policy.Spec `json:"policy,omitempty"`
	// Credentials are the secrets bound to hosts (credentials.go).
	Credentials []Credential `json:"credentials,omitempty"`
	// AgentBranchPrefix is the ref prefix the git gate lets the sandbox push under, as
	// asked at create (normalized); "" is the default (GitPrefix).
	AgentBranchPrefix string `json:"agent_branch_prefix,omitempty"`
	// RepoLayer is the layer --repo put at /workspace (repo-<sha256(top)>-<commit>), fixed
	// at create: later starts mount the same one, and its commit is the base of `moat
	// diff` and `moat export` (workspace.go). nil for sandboxes without a repository.
	RepoLayer *Layer `json:"repo_layer,omitempty"`
	// GitProtected is what the git gate does with a push whose only problem is protected
	// paths: "" (refuse) or GitProtectedHold (keep it for a person to approve).
	GitProtected string `json:"git_protected,omitempty"`

	// Snapshot is the snapshot the sandbox was made from (create --from, or its fork
	// parent's), ForkOf the sandbox it was forked from: the snapshot tree (snapshot.go).
	Snapshot string `json:"snapshot,omitempty"`
	ForkOf   string `json:"fork_of,omitempty"`
	// Idle stop, transparent resume and deletion when unused (idle.go). IdleAfter: a
	// running sandbox with no activity for this long is stopped (0: never). DeleteAfter:
	// a sandbox unused for this long is deleted, whatever its state (0: never); Archive
	// writes its drive to <data>/archives/<id>.tar.zst first. AutoResume (E2B's) lets a
	// sandbox its timeout stopped or paused resume on the next call too. LastUsedAt is
	// the latest activity the daemon recorded (at most idleFlush old while it runs).
	// StopReason says who stopped or paused it last: StopIdle, StopTimeout, or "" (a
	// person, or anything else); only StopIdle (and StopTimeout with AutoResume) resume
	// on their own.
	IdleAfter   time.Duration `json:"idle_after,omitempty"`
	DeleteAfter time.Duration `json:"delete_after,omitempty"`
	Archive     bool          `json:"archive,omitempty"`
	AutoResume  bool          `json:"auto_resume,omitempty"`
	LastUsedAt  *time.Time    `json:"last_used_at,omitempty"`
	StopReason  string        `json:"stop_reason,omitempty"`

	// Users are the accounts moat added to the sandbox, at create or later (users.go).
	Users []User `json:"users,omitempty"`
	// SharedGroups are the groups moat made for its users, with gids fixed for the
	// sandbox's life (usernames.go).
	SharedGroups []SharedGroup `json:"shared_groups,omitempty"`
	// RetiredUIDs are the uids of removed users: never given again in this sandbox (files
	// the old user left, a kept home, stay out of a new user's reach).
	RetiredUIDs []uint32 `json:"retired_uids,omitempty"`

	// Tier is the consequence tier the sandbox was made with ("": none; internal/tiers):
	// its policy, credentials and git settings below are the tier's merged with the
	// request. GitPush is GitPushNone when the git gate refuses every push.
	Tier    string `json:"tier,omitempty"`
	GitPush string `json:"git_push,omitempty"`

	// Name is the sandbox's name, unique among its owner's sandboxes ("": none), and
	// Labels its labels (names.go). Both are fixed at create.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`

	// AccessToken authenticates the daemon to the sandbox's moat-init. It is never
	// sent to API clients of the native API.
	AccessToken string `json:"-"`
	// Owner is the id of the API key that created the sandbox ("": the operator, or a
	// warm sandbox not yet handed over). Only its owner and the operator may see it or act
	// on it (Caller.MayUse). Fixed at create (or hand-over); stored in its own column.
	Owner string `json:"-"`
	// OwnerName is the owner key's owner name at create ("": the operator, or a key
	// without one) and Visibility who else may use it: VisibilityPrivate ("" too) or
	// VisibilityTeam (owners.go).
	OwnerName  string `json:"owner_name,omitempty"`
	Visibility string `json:"visibility,omitempty"`
}

// What a sandbox's timeout does (Sandbox.OnTimeout).
const (
	OnTimeoutStop   = "stop"
	OnTimeoutDelete = "delete"
	OnTimeoutPause  = "pause"
)

// EgressPolicy returns the sandbox's egress policy; deny-all when none was given.
func (s *Sandbox) EgressPolicy() policy.Spec {
	if s.Policy == nil {
		return policy.DenyAll()
	}
	return *s.Policy
}

// GitPrefix is the ref prefix the git gate lets the sandbox push under: the one asked at
// create, or refs/heads/agent/<id>/.
func (s *Sandbox) GitPrefix() string {
	if s.AgentBranchPrefix != "" {
		return s.AgentBranchPrefix
	}
	return gitgate.DefaultPrefix(s.ID)
}

// What the git gate does with a push whose only problem is protected paths
// (Sandbox.GitProtected).
const (
	GitProtectedRefuse = "refuse"
	GitProtectedHold   = "hold"
)

// GitSettings is what the git gate knows of a sandbox.
type GitSettings struct {
	Prefix string // the ref prefix it may push under (GitPrefix)
	// Hold: a push whose refs are fine but which touches protected paths is held for a
	// person to approve instead of refused.
	Hold bool
	// NoPush: every push is refused (a read tier).
	NoPush bool
}

// GitPushNone is Sandbox.GitPush of a sandbox that may not push at all.
const GitPushNone = "none"

// GitSettings returns the sandbox's git gate settings.
func (s *Sandbox) GitSettings() GitSettings {
	return GitSettings{Prefix: s.GitPrefix(), Hold: s.GitProtected == GitProtectedHold, NoPush: s.GitPush == GitPushNone}
}

// NormalizeAgentPrefix makes a create request's agent branch prefix a full ref prefix
// ("agent/x" → "refs/heads/agent/x/") and checks it (gitgate.Compile): a valid ref name
// strictly below refs/heads/. Bad input is errdefs.ErrInvalidArgument.
func NormalizeAgentPrefix(p string) (string, error) {
	if !strings.HasPrefix(p, "refs/") {
		p = "refs/heads/" + p
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	if _, err := gitgate.Compile(gitgate.PolicySpec{Prefix: p}); err != nil {
		return "", fmt.Errorf("agent branch prefix: %w", err)
	}
	return p, nil
}

// HostIDs returns the host uid/gid range of the sandbox's user namespace.
// InUserNS reports whether the sandbox runs in a user namespace of its own host uid range
// (see Mapped): otherwise (runsc 2022-12) its processes and drive files are host root's.
func (s *Sandbox) InUserNS() bool {
	if s.Mapped != nil {
		return *s.Mapped
	}
	return !TraitsOf(s.Runtime).OwnKernel
}

func (s *Sandbox) HostIDs() IDRange {
	base := s.IDBase
	if base == 0 {
		base = HostIDBase
	}
	return IDRange{Host: base + uint32(s.Slot)*IDRangeSize, Size: IDRangeSize}
}

// Per-sandbox host id ranges: each sandbox gets its own 65536 ids, so no two sandboxes
// (and no host user) share a uid. Base 0x40000000 stays clear of /etc/subuid ranges
// (100000+) and systemd's dynamic and container ranges.
const (
	HostIDBase  uint32 = 0x40000000
	IDRangeSize uint32 = 65536
	MaxSlots           = 16384
)
