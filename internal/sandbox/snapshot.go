package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

// Snapshot is an immutable capture of a sandbox's filesystem: its drive (a copy-free clone,
// storage) and what is needed to mount it again (template, repository layer). It outlives
// its sandbox. Sandbox (and Parent, the snapshot that sandbox was made from) make the tree.
type Snapshot struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Sandbox string `json:"sandbox"`          // the sandbox it was taken of
	Parent  string `json:"parent,omitempty"` // the snapshot that sandbox was made from
	// What a sandbox made from it starts with.
	Template      string       `json:"template"`
	TemplateAlias string       `json:"template_alias,omitempty"`
	Runtime       string       `json:"runtime"`
	Repo          string       `json:"repo,omitempty"`
	RepoLayer     *Layer       `json:"repo_layer,omitempty"`
	User          string       `json:"user,omitempty"`
	Limits        Limits       `json:"limits"`
	Policy        *policy.Spec `json:"policy,omitempty"`
	CreatedAt     time.Time    `json:"created_at"`
	SizeBytes     int64        `json:"size_bytes"` // the drive's size (its disk limit)
	// Method is how the image was made: "reflink" (no data copied) or "copy".
	Method string `json:"method"`
	// Fork marks the transient snapshot a fork is made from (removed when it is done, or at
	// the next start after a crash); it is never listed.
	Fork  bool   `json:"fork,omitempty"`
	Owner string `json:"owner,omitempty"` // API key id ("": the operator)
}

// StoredSnapshot is a snapshot as storage keeps it: the record (a Snapshot as JSON) beside
// the image, how the image was made, the drive size, and the host uid of the sandbox's root
// in its files.
type StoredSnapshot struct {
	ID     string
	Record []byte
	Method string
	Size   int64
	IDBase uint32
}

// SnapshotStorage keeps drive snapshots. Implemented by *storage.Store.
type SnapshotStorage interface {
	// SnapshotDrive clones sandbox id's drive (frozen while mounted) into snapshot snap
	// with record; it returns the method ("reflink" or "copy").
	SnapshotDrive(ctx context.Context, id, snap string, idBase uint32, record any) (string, error)
	// CreateDriveFrom makes sandbox id's drive a clone of snapshot snap.
	CreateDriveFrom(ctx context.Context, id, snap string) (string, error)
	// RestoreDrive replaces sandbox id's unmounted drive by a clone of snapshot snap.
	RestoreDrive(ctx context.Context, id, snap string) (string, error)
	Snapshots() ([]StoredSnapshot, error)
	Snapshot(id string) (StoredSnapshot, error)
	DeleteSnapshot(id string) error
}

func (m *Manager) snapshots() (SnapshotStorage, error) {
	ss, ok := m.storage.(SnapshotStorage)
	if !ok {
		return nil, fmt.Errorf("snapshots: %w", errdefs.ErrNotImplemented)
	}
	return ss, nil
}

func newSnapshotID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "snap-" + hex.EncodeToString(b[:])
}

func decodeSnapshot(st StoredSnapshot) (*Snapshot, error) {
	var sn Snapshot
	if err := json.Unmarshal(st.Record, &sn); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", st.ID, err)
	}
	sn.ID, sn.Method, sn.SizeBytes = st.ID, st.Method, st.Size
	return &sn, nil
}

// driveIDBase is the host uid of the sandbox's root in the files of its drive.
func driveIDBase(sb *Sandbox) uint32 {
	if !sb.InUserNS() {
		return 0
	}
	return sb.HostIDs().Host
}

// TakeSnapshot captures sandbox id's filesystem as snapshot named name. A running sandbox's
// drive is frozen for the moment of the clone; it keeps running.
func (m *Manager) TakeSnapshot(ctx context.Context, id, name string) (*Snapshot, error) {
	unlock := m.lock(id)
	defer unlock()
	return m.snapshotLocked(ctx, id, name, false)
}

func (m *Manager) snapshotLocked(ctx context.Context, id, name string, fork bool) (*Snapshot, error) {
	ss, err := m.snapshots()
	if err != nil {
		return nil, err
	}
	if len(name) > 128 {
		return nil, fmt.Errorf("snapshot name is longer than 128 bytes: %w", errdefs.ErrInvalidArgument)
	}
	sb, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	switch sb.State {
	case StateRunning, StatePaused, StateStopped:
	default:
		return nil, fmt.Errorf("sandbox %s is %s: only a running, paused or stopped sandbox can be snapshotted: %w", id, sb.State, errdefs.ErrConflict)
	}
	sn := &Snapshot{
		ID: newSnapshotID(), Name: name, Sandbox: sb.ID, Parent: sb.Snapshot,
		Template: sb.Template, TemplateAlias: sb.TemplateAlias, Runtime: sb.Runtime, Repo: sb.Repo, RepoLayer: sb.RepoLayer,
		User: sb.User, Limits: sb.Limits, Policy: sb.Policy, CreatedAt: time.Now().UTC(), SizeBytes: sb.Limits.DiskBytes,
		Fork: fork, Owner: sb.Owner,
	}
	method, err := ss.SnapshotDrive(ctx, sb.ID, sn.ID, driveIDBase(sb), sn)
	if err != nil {
		return nil, err
	}
	sn.Method = method
	if !fork {
		m.event(context.WithoutCancel(ctx), sb.ID, "snapshot", sn.ID)
	}
	return sn, nil
}

// ListSnapshots returns the snapshots the caller may use, oldest first.
func (m *Manager) ListSnapshots(ctx context.Context) ([]*Snapshot, error) {
	ss, err := m.snapshots()
	if err != nil {
		return nil, err
	}
	all, err := ss.Snapshots()
	if err != nil {
		return nil, err
	}
	c := CallerFrom(ctx)
	var out []*Snapshot
	for _, st := range all {
		sn, err := decodeSnapshot(st)
		if err != nil || sn.Fork || !mayUseSnapshot(c, sn) {
			continue
		}
		out = append(out, sn)
	}
	return out, nil
}

func mayUseSnapshot(c Caller, sn *Snapshot) bool {
	return c.Operator || (c.APIKey != "" && (c.Admin || c.APIKey == sn.Owner))
}

// GetSnapshot returns snapshot id if the caller may use it (ErrNotFound otherwise).
func (m *Manager) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	ss, err := m.snapshots()
	if err != nil {
		return nil, err
	}
	st, err := ss.Snapshot(id)
	if err != nil {
		return nil, err
	}
	sn, err := decodeSnapshot(st)
	if err != nil {
		return nil, err
	}
	if !mayUseSnapshot(CallerFrom(ctx), sn) {
		return nil, fmt.Errorf("snapshot %s: %w", id, errdefs.ErrNotFound)
	}
	return sn, nil
}

// DeleteSnapshot removes snapshot id. Sandboxes made from it keep their drives (clones),
// and snapshots taken of those keep it as their parent's id.
func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := m.GetSnapshot(ctx, id); err != nil {
		return err
	}
	ss, _ := m.snapshots()
	if err := ss.DeleteSnapshot(id); err != nil {
		return err
	}
	m.collectLayers(ctx)
	return nil
}

// fromSnapshot fills create options from snapshot sn: what the request leaves unset, and
// always the filesystem's own (template, repository, drive size). Pure.
func fromSnapshot(opts CreateOptions, sn *Snapshot) CreateOptions {
	opts.Template, opts.TemplateAlias = sn.Template, sn.TemplateAlias
	opts.Repo = ""
	if opts.Runtime == "" {
		opts.Runtime = sn.Runtime
	}
	if opts.User == "" {
		opts.User = sn.User
	}
	l := opts.Limits
	if l.MemoryBytes == 0 {
		l.MemoryBytes = sn.Limits.MemoryBytes
	}
	if l.CPUs == 0 {
		l.CPUs = sn.Limits.CPUs
	}
	if l.Pids == 0 {
		l.Pids = sn.Limits.Pids
	}
	if l.IOBps == 0 {
		l.IOBps = sn.Limits.IOBps
	}
	if l.IOIops == 0 {
		l.IOIops = sn.Limits.IOIops
	}
	l.DiskBytes = sn.SizeBytes
	opts.Limits = l
	if opts.Policy == nil && sn.Policy != nil {
		p := *sn.Policy
		opts.Policy = &p
	}
	return opts
}

// createFromSnapshot makes and starts a sandbox whose drive is a clone of snapshot
// opts.FromSnapshot. Like Create, nothing of it remains on error, and a daemon that dies
// meanwhile removes it at its next start (Provisioning).
func (m *Manager) createFromSnapshot(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	// The layer GC must not take the snapshot's repository layer before the new record
	// names it (the snapshot may be removed meanwhile).
	m.layerGC.RLock()
	defer m.layerGC.RUnlock()
	sn, err := m.GetSnapshot(ctx, opts.FromSnapshot)
	if err != nil {
		return nil, err
	}
	return m.createFrom(ctx, fromSnapshot(opts, sn), sn, "", false)
}

// createFrom is Create with the drive cloned from sn; fork names the parent of a fork.
// Lazy leaves the new sandbox stopped as if for idleness, so that its first use starts it
// (Acquire): the call then costs a clone and a record, not a start.
func (m *Manager) createFrom(ctx context.Context, opts CreateOptions, sn *Snapshot, fork string, lazy bool) (*Sandbox, error) {
	ss, err := m.snapshots()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	step := func(name string) {
		m.log.Debug("create-from step", "snapshot", sn.ID, "step", name, "took", time.Since(t0))
		t0 = time.Now()
	}
	if err := m.validate(ctx, &opts); err != nil {
		return nil, err
	}
	if err := m.checkBindings(ctx, opts.Credentials); err != nil {
		return nil, err
	}
	tmpl, err := m.storage.Template(ctx, opts.Template)
	if err != nil {
		return nil, fmt.Errorf("template %s of snapshot %s: %w", opts.Template, sn.ID, err)
	}
	var extra []Layer
	if sn.RepoLayer != nil {
		extra = []Layer{*sn.RepoLayer}
	}
	now := time.Now().UTC()
	sb := &Sandbox{
		ID: newID(), State: StateCreating, Runtime: opts.Runtime, Template: opts.Template,
		Repo: sn.Repo, RepoLayer: sn.RepoLayer, User: opts.User, Env: opts.Env, Limits: opts.Limits, Metadata: opts.Metadata,
		Policy: opts.Policy, OnTimeout: opts.OnTimeout, TemplateAlias: opts.TemplateAlias,
		Credentials: opts.Credentials, AgentBranchPrefix: opts.AgentBranchPrefix, GitProtected: opts.GitProtected,
		Tier: opts.Tier, GitPush: opts.GitPush,
		CreatedAt: now, UpdatedAt: now, AccessToken: newToken(), IDBase: m.cfg.IDBase,
		Owner: CallerFrom(ctx).Owner(), Provisioning: true, Snapshot: sn.ID, ForkOf: fork,
		Name: opts.Name, Labels: opts.Labels, Mapped: m.mapsUsers(opts.Runtime),
	}
	setOwner(ctx, sb, opts) // owners.go: a fork is its forker's, private unless asked
	if sn.Fork {
		sb.Snapshot = sn.Parent // a fork descends from what its parent descends from
	}
	opts.inherited.applyTo(sb) // a fork's users are its parent's (useradd.go)
	if opts.Timeout > 0 {
		exp := now.Add(opts.Timeout)
		sb.ExpiresAt, sb.Timeout = &exp, opts.Timeout
	}
	m.setLifecycle(sb, opts, now) // idle and unused periods, as Create does
	if err := m.store.Insert(ctx, sb); err != nil {
		return nil, err
	}
	unlock := m.lock(sb.ID)
	defer unlock()
	step("validate+insert")
	m.at("create-from-inserted")
	if _, err := ss.CreateDriveFrom(ctx, sb.ID, sn.ID); err != nil {
		m.destroy(sb.ID)
		return nil, fmt.Errorf("creating drive from snapshot %s: %w", sn.ID, err)
	}
	step("drive clone")
	m.at("create-from-drive")
	if lazy {
		defer step("recorded")
		made, err := m.store.Update(ctx, sb.ID, func(s *Sandbox) error {
			if err := checkTransition(s.ID, s.State, StateStopped); err != nil {
				return err
			}
			s.State, s.StopReason, s.Provisioning = StateStopped, StopIdle, false
			return nil
		})
		if err != nil {
			m.destroy(sb.ID)
			return nil, err
		}
		m.event(ctx, sb.ID, "fork_lazy", "made stopped: its first call starts it")
		return made, nil
	}
	if err := m.up(ctx, sb, tmpl, extra); err != nil {
		m.destroy(sb.ID)
		return nil, err
	}
	return m.provisioned(ctx, sb)
}

// SetHook sets the failpoint hook, called at named points of snapshot and fork operations
// (tests; nil: none). Call it before the manager is used.
func (m *Manager) SetHook(h func(point string)) { m.hook = h }

func (m *Manager) at(point string) {
	if m.hook != nil {
		m.hook(point)
	}
}

// Restore puts sandbox id's filesystem back to snapshot snap in place: a running or paused
// sandbox is stopped, its drive replaced by a clone of the snapshot, and started again; a
// stopped one stays stopped. The sandbox keeps its identity (id, token, uid range,
// network, credentials); the snapshot must be of the same template.
func (m *Manager) Restore(ctx context.Context, id, snap string) (*Sandbox, error) {
	ss, err := m.snapshots()
	if err != nil {
		return nil, err
	}
	sn, err := m.GetSnapshot(ctx, snap)
	if err != nil {
		return nil, err
	}
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sn.Template != sb.Template {
		return nil, fmt.Errorf("snapshot %s is of template %s, sandbox %s of %s: %w", snap, sn.Template, id, sb.Template, errdefs.ErrConflict)
	}
	if sn.SizeBytes != sb.Limits.DiskBytes {
		return nil, fmt.Errorf("snapshot %s has a %d-byte drive, sandbox %s a %d-byte one: %w", snap, sn.SizeBytes, id, sb.Limits.DiskBytes, errdefs.ErrConflict)
	}
	wasRunning := false
	switch sb.State {
	case StateRunning, StatePaused:
		wasRunning = true
		if sb, err = m.stopLocked(ctx, sb, ""); err != nil {
			return nil, err
		}
		if sb.Error != "" {
			return nil, fmt.Errorf("stopping sandbox %s for the restore: %s: %w", id, sb.Error, errdefs.ErrConflict)
		}
	case StateStopped:
	default:
		return nil, fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrConflict)
	}
	if _, err := ss.RestoreDrive(ctx, id, snap); err != nil {
		return nil, err
	}
	if sb, err = m.store.Update(ctx, id, func(s *Sandbox) error {
		s.RepoLayer, s.Repo = sn.RepoLayer, sn.Repo
		return nil
	}); err != nil {
		return nil, err
	}
	m.event(context.WithoutCancel(ctx), id, "restore", snap)
	if !wasRunning {
		return sb, nil
	}
	return m.startLocked(ctx, id)
}

// What a fork inherits from its parent and what it gets of its own (ForkReport).
var (
	ForkInherits = []string{"filesystem", "template", "runtime", "user", "env", "limits", "egress_policy", "phase",
		"credential_bindings", "timeout", "metadata", "linux_users"}
	ForkRenews = []string{"sandbox_id", "host_uid_range", "network_namespace", "envd_access_token", "interception_ca",
		"credential_placeholders", "github_app_tokens", "machine_id", "random_seed", "agent_branch_prefix"}
)

// ForkReport says what Fork made and what the forks inherited or got anew.
type ForkReport struct {
	Parent    string     `json:"parent"`
	Forks     []*Sandbox `json:"-"`
	Inherited []string   `json:"inherited"`
	Renewed   []string   `json:"renewed"`
}

// forkOptions are a fork's create options: the parent's, with nothing of its identity.
// Pure.
func forkOptions(p *Sandbox) CreateOptions {
	creds := make([]Credential, len(p.Credentials))
	for i, c := range p.Credentials {
		c.Placeholder = "" // validate gives each fork its own
		creds[i] = c
	}
	var pol *policy.Spec
	if p.Policy != nil {
		cp := *p.Policy
		pol = &cp
	}
	prefix := p.AgentBranchPrefix
	// The parent's idle and unused periods as set (0 stays off: an E2B sandbox has no idle
	// stop, and its forks none either).
	idle, unused := p.IdleAfter, p.DeleteAfter
	return CreateOptions{
		Runtime: p.Runtime, Template: p.Template, TemplateAlias: p.TemplateAlias, User: p.User,
		Env: p.Env, Limits: p.Limits, Timeout: p.Timeout, Metadata: p.Metadata, Policy: pol,
		OnTimeout: p.OnTimeout, Credentials: creds, AgentBranchPrefix: prefix, GitProtected: p.GitProtected,
		Tier: p.Tier, GitPush: p.GitPush,
		Idle: &idle, DeleteAfter: &unused, Archive: p.Archive, AutoResume: p.AutoResume,
		Labels:    p.Labels, // a fork keeps the labels; a name is one sandbox's
		inherited: accountsOf(p),
	}
}

// MaxFork is the most forks one call makes.
const MaxFork = 32

// ForkOptions are a fork's choices: how many (1 to MaxFork), and whether they are made
// stopped, to start on their first use (Lazy: the fork itself then costs a clone and a
// record per fork; the first exec, file call or connect pays the start, as after an idle
// stop).
type ForkOptions struct {
	Count int  `json:"count"`
	Lazy  bool `json:"lazy,omitempty"`
}

// Fork makes count new sandboxes from sandbox id's current filesystem: each inherits the
// parent's settings (ForkInherits) and gets an identity of its own (ForkRenews). The parent
// keeps running (its drive is frozen only for the clone). Bindings are checked against the
// caller again: a fork gets no secret its caller may not bind now. On error, forks already
// made are deleted.
func (m *Manager) Fork(ctx context.Context, id string, o ForkOptions) (*ForkReport, error) {
	count := o.Count
	if count < 1 || count > MaxFork {
		return nil, fmt.Errorf("fork count %d: must be 1 to %d: %w", count, MaxFork, errdefs.ErrInvalidArgument)
	}
	ss, err := m.snapshots()
	if err != nil {
		return nil, err
	}
	unlock := m.lock(id)
	parent, err := m.Get(ctx, id)
	if err != nil {
		unlock()
		return nil, err
	}
	t0 := time.Now()
	sn, err := m.snapshotLocked(ctx, id, "fork of "+id, true)
	m.log.Debug("fork step", "sandbox", id, "step", "snapshot", "took", time.Since(t0))
	unlock()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := ss.DeleteSnapshot(sn.ID); err != nil {
			m.log.Error("removing a fork's snapshot", "snapshot", sn.ID, "err", err)
		}
	}()
	m.at("fork-snapshot")
	rep := &ForkReport{Parent: id, Inherited: ForkInherits, Renewed: ForkRenews}
	for range count {
		// Options of its own for each fork: validate fills in each one's placeholders.
		child, err := m.createFrom(ctx, forkOptions(parent), sn, id, o.Lazy)
		if err != nil {
			for _, c := range rep.Forks {
				m.deleteLogged(ctx, c.ID, "a fork made before another failed")
			}
			return nil, fmt.Errorf("fork of %s: %w", id, err)
		}
		rep.Forks = append(rep.Forks, child)
	}
	forks := make([]string, len(rep.Forks))
	for i, c := range rep.Forks {
		forks[i] = c.ID
	}
	m.event(ctx, id, "fork", strings.Join(forks, " ")) // the audit log's fork record (issue 16)
	return rep, nil
}

// ReconcileSnapshots removes the transient snapshots of forks a killed daemon left.
func (m *Manager) ReconcileSnapshots(ctx context.Context) {
	ss, err := m.snapshots()
	if err != nil {
		return
	}
	all, err := ss.Snapshots()
	if err != nil {
		m.log.Error("listing snapshots", "err", err)
		return
	}
	for _, st := range all {
		if sn, err := decodeSnapshot(st); err == nil && sn.Fork {
			m.log.Warn("removing the snapshot of an interrupted fork", "snapshot", sn.ID)
			if err := ss.DeleteSnapshot(sn.ID); err != nil {
				m.log.Error("removing the snapshot of an interrupted fork", "snapshot", sn.ID, "err", err)
			}
		}
	}
}

// LayerUser is what GC asks: the layers some sandbox or snapshot still uses.
func (m *Manager) layersInUse(ctx context.Context) (map[string]bool, error) {
	used := map[string]bool{}
	list, err := m.store.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, sb := range list {
		if sb.RepoLayer != nil {
			used[sb.RepoLayer.ID] = true
		}
	}
	if ss, err := m.snapshots(); err == nil {
		all, err := ss.Snapshots()
		if err != nil {
			return nil, err
		}
		for _, st := range all {
			if sn, err := decodeSnapshot(st); err == nil && sn.RepoLayer != nil {
				used[sn.RepoLayer.ID] = true
			}
		}
	}
	return used, nil
}

// RepoLayerGC removes repository layers nobody uses. Implemented by *storage.Store.
type RepoLayerGC interface {
	CollectRepoLayers(inUse map[string]bool) ([]string, error)
}

// collectLayers removes the repository layers no sandbox or snapshot uses.
func (m *Manager) collectLayers(ctx context.Context) {
	gc, ok := m.storage.(RepoLayerGC)
	if !ok {
		return
	}
	m.layerGC.Lock()
	defer m.layerGC.Unlock()
	used, err := m.layersInUse(ctx)
	if err != nil {
		m.log.Warn("layer GC", "err", err)
		return
	}
	removed, err := gc.CollectRepoLayers(used)
	if err != nil {
		m.log.Warn("layer GC", "err", err)
	}
	if len(removed) > 0 {
		slices.Sort(removed)
		m.log.Info("removed unused repository layers", "layers", removed)
	}
}

// CollectLayers runs the layer GC now (daemon start, `moat snapshot rm`, sandbox delete).
func (m *Manager) CollectLayers(ctx context.Context) { m.collectLayers(ctx) }

var _ = errors.New
