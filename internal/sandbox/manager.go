package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/initlog"
)

// EnvdPort is the port moat-init serves the envd protocol on inside every sandbox.
const EnvdPort = 49983

// Store is the durable sandbox state. Implemented by *store.Store.
type Store interface {
	Insert(ctx context.Context, sb *Sandbox) error
	Update(ctx context.Context, id string, fn func(*Sandbox) error) (*Sandbox, error)
	Get(ctx context.Context, id string) (*Sandbox, error)
	List(ctx context.Context) ([]*Sandbox, error)
	Delete(ctx context.Context, id string) error
	// AddEvent records an event of sandbox id outside any state change.
	AddEvent(ctx context.Context, id, kind, detail string) error
}

// Namespaces pins the per-sandbox user and network namespaces. Implemented in the
// composition root with internal/linux.
type Namespaces interface {
	// Create makes the user namespace (mapped onto ids) and the network namespace owned
	// by it, pinned at the given paths.
	Create(userns, netns string, ids IDRange) error
	// Remove unpins both. Idempotent.
	Remove(userns, netns string) error
}

// Config is what the Manager needs besides its subsystems.
type Config struct {
	RunDir        string // e.g. /run/moat
	DataDir       string // e.g. /var/lib/moat
	InitPath      string // host path of the moat-init binary
	DefaultLimits Limits
	// Host is this host's capacity, MaxLimits the operator's maxima (zero fields: none) and
	// FileBudget the most open files of one sandbox (0: Host.FileMax/HostShare); every
	// sandbox's limits stay within them (EffectiveLimits).
	Host       Capacity
	MaxLimits  Limits
	FileBudget int64
	// HealthTimeout bounds how long a new sandbox may take to answer /health.
	HealthTimeout time.Duration
	// Unusable names runtimes known to this host that cannot run sandboxes, with why.
	Unusable map[string]string
	// Warm is, per pool ("RUNTIME" for the host template, or "RUNTIME:TEMPLATE"), the
	// number of default sandboxes kept started for Create to claim (pool.go).
	Warm map[string]int
	// IDBase moves the host uid ranges of new sandboxes (0: HostIDBase). Only for several
	// daemons on one host (tests): a host has one daemon, whose slots never overlap.
	IDBase uint32
	// Secrets tells the scopes of stored secrets, which credential bindings must stay
	// within (scope.go); nil: bindings are refused.
	Secrets Secrets
	// DefaultIdle and DefaultDeleteAfter are the idle period and unused period of a
	// sandbox whose create names none (0: DefaultIdle/DefaultDeleteAfter of idle.go;
	// negative: off). Now is the clock of the idle sweep (nil: time.Now).
	DefaultIdle        time.Duration
	DefaultDeleteAfter time.Duration
	Now                func() time.Time
	// IdleFreeze is how long an idle sandbox stays frozen before it is stopped (0:
	// DefaultIdleFreeze; negative: no freeze, stopped at once).
	IdleFreeze time.Duration
}

// Manager drives sandboxes through their lifecycle. It is safe for concurrent use; operations
// on one sandbox are serialized.
type Manager struct {
	cfg      Config
	store    Store
	runtimes map[string]Runtime
	storage  Storage
	network  Network
	egress   Egress
	ns       Namespaces
	log      *slog.Logger

	locks idLocks           // one mutex per sandbox id (idlock.go)
	logs  sync.Map          // id → *initlog.Log of a running sandbox
	pools map[PoolKey]*pool // warm pools (pool.go)
	// poolSlot is held while a pool builds; creating counts Creates and Starts in flight
	// and lastCreate (unix ns) is when the last one ended: the pools refill around them.
	poolSlot   chan struct{}
	creating   atomic.Int64
	lastCreate atomic.Int64
	bg         sync.WaitGroup
	envd       *http.Transport
	envdConns  envdConns // envd's open connections per sandbox, closed when it stops
	// done closes when the daemon shuts down (Close): background retries end.
	done      chan struct{}
	closeOnce sync.Once
	// layerGC: a create or start holds it shared from getting its repository layer until
	// its record names it; the layer GC holds it exclusively (snapshot.go).
	layerGC sync.RWMutex
	hook    func(point string) // failpoint of tests (SetHook, snapshot.go); nil: none
	// act is each sandbox's activity since this daemon started (idle.go).
	act sync.Map // id → *activity
	// ledger receives the usage samples (metering.go); nil: none.
	ledger UsageLedger
}

// Deps are the subsystems a Manager drives, supplied by the composition root.
type Deps struct {
	Store Store
	// Runtimes maps runtime names ("runc", "runsc", …) to drivers; only those that work
	// on this host should be present.
	Runtimes   map[string]Runtime
	Storage    Storage
	Network    Network
	Egress     Egress
	Namespaces Namespaces
	Log        *slog.Logger
}

// NewManager wires a Manager.
func NewManager(cfg Config, d Deps) *Manager {
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = 20 * time.Second
	}
	m := &Manager{
		cfg: cfg, store: checkedStore{d.Store}, runtimes: d.Runtimes, storage: d.Storage, network: d.Network, egress: d.Egress, ns: d.Namespaces, log: d.Log,
		pools: map[PoolKey]*pool{}, done: make(chan struct{}),
	}
	m.newPools()
	m.envd = &http.Transport{
		// Hosts are sandbox IDs: every connection is dialled from the sandbox's gateway
		// namespace; nothing resolves or routes through the host.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			c, err := m.network.DialSandbox(ctx, host, EnvdPort)
			if err != nil {
				return nil, err
			}
			return m.envdConns.track(host, c), nil
		},
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     60 * time.Second,
		DisableCompression:  true,
	}
	return m
}

// CreateOptions are the caller's choices for a new sandbox. Zero values take defaults.
type CreateOptions struct {
	Runtime  string            `json:"runtime,omitempty"`
	Template string            `json:"template,omitempty"`
	Repo     string            `json:"repo,omitempty"`
	User     string            `json:"user,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Limits   Limits            `json:"limits"`
	Timeout  time.Duration     `json:"timeout,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Policy is the egress policy (nil: deny-all).
	Policy *policy.Spec `json:"policy,omitempty"`
	// OnTimeout: OnTimeoutStop (default), OnTimeoutDelete or OnTimeoutPause.
	OnTimeout string `json:"on_timeout,omitempty"`
	// TemplateAlias is the name the client asked for when it differs from Template (an
	// E2B template name such as "base").
	TemplateAlias string `json:"template_alias,omitempty"`
	// Credentials bind stored secrets to hosts (credentials.go).
	Credentials []Credential `json:"credentials,omitempty"`
	// AgentBranchPrefix is the ref prefix the git gate lets the sandbox push under
	// (NormalizeAgentPrefix); "" is gitgate.DefaultPrefix(id).
	AgentBranchPrefix string `json:"agent_branch_prefix,omitempty"`
	// GitProtected is what the git gate does with a push whose only problem is protected
	// paths: GitProtectedRefuse ("" too) or GitProtectedHold.
	GitProtected string `json:"git_protected,omitempty"`
	// FromSnapshot makes the sandbox's filesystem a copy-free clone of this snapshot
	// (snapshot.go); template and repository are the snapshot's.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Visibility: VisibilityPrivate ("" too) or VisibilityTeam (owners.go).
	Visibility string `json:"visibility,omitempty"`
	// Idle and DeleteAfter: nil takes the daemon's default (Config.DefaultIdle,
	// DefaultDeleteAfter), 0 turns it off. Archive and AutoResume: see Sandbox (idle.go).
	Idle        *time.Duration `json:"idle,omitempty"`
	DeleteAfter *time.Duration `json:"delete_after,omitempty"`
	Archive     bool           `json:"archive,omitempty"`
	AutoResume  bool           `json:"auto_resume,omitempty"`
	// Name and Labels (names.go): the name must be free among the caller's sandboxes.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Tier is the consequence tier the options were made with (internal/tiers.Apply set
	// the rest); GitPush is GitPushNone when the git gate refuses every push.
	Tier    string `json:"tier,omitempty"`
	GitPush string `json:"git_push,omitempty"`
	// Users are accounts to add at create (useradd.go); their ids are chosen once the
	// root filesystem is mounted.
	Users []UserSpec `json:"users,omitempty"`
	// inherited are a fork's parent's users, recorded as they are (useradd.go).
	inherited *accounts
}

// Create makes and starts a sandbox, or hands over a warm one (pool.go). On any error,
// nothing of it remains. Credential bindings must be granted to the caller ctx carries
// (CallerFrom) and lie within their secrets' scopes (checkBindings); the sandbox is that
// caller's (Sandbox.Owner).
func (m *Manager) Create(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	defer m.busy()()
	return m.create(ctx, opts, false, nil)
}

// create makes a sandbox (warm: for a pool, pool.go); used, if not nil, receives the
// template it was built from.
func (m *Manager) create(ctx context.Context, opts CreateOptions, warm bool, used *Template) (*Sandbox, error) {
	if err := CheckUserSpecs(opts.Users); err != nil {
		return nil, err
	}
	if _, err := CheckVisibility(opts.Visibility); err != nil { // owners.go
		return nil, err
	}
	if opts.FromSnapshot != "" {
		if len(opts.Users) > 0 {
			return nil, fmt.Errorf("users at create are not taken with from_snapshot (the snapshot's record has its own): add them after: %w", errdefs.ErrInvalidArgument)
		}
		return m.createFromSnapshot(ctx, opts)
	}
	askedNofile := opts.Limits.Nofile != 0
	if err := m.validate(ctx, &opts); err != nil {
		return nil, err
	}
	if err := m.checkBindings(ctx, opts.Credentials); err != nil {
		return nil, err
	}
	tmpl, err := m.storage.Template(ctx, opts.Template)
	if err != nil {
		return nil, err
	}
	if used != nil {
		*used = tmpl
	}
	if !warm {
		if p := m.fitsPool(&opts, askedNofile); p != nil {
			if sb := m.claim(ctx, p, opts, tmpl); sb != nil {
				return sb, nil
			}
		}
	}
	var extra []Layer
	var repoLayer *Layer
	if opts.Repo != "" {
		// The layer GC must not take the layer before the record below names it.
		m.layerGC.RLock()
		defer m.layerGC.RUnlock()
		layer, err := m.storage.RepoLayer(ctx, opts.Repo)
		if err != nil {
			return nil, fmt.Errorf("preparing repository %s: %w", opts.Repo, err)
		}
		extra = append(extra, layer)
		repoLayer = &layer
	}
	now := time.Now().UTC()
	sb := &Sandbox{
		ID: newID(), State: StateCreating, Runtime: opts.Runtime, Template: opts.Template,
		Repo: opts.Repo, RepoLayer: repoLayer, User: opts.User, Env: opts.Env, Limits: opts.Limits, Metadata: opts.Metadata,
		Policy: opts.Policy, OnTimeout: opts.OnTimeout, TemplateAlias: opts.TemplateAlias,
		Credentials: opts.Credentials, AgentBranchPrefix: opts.AgentBranchPrefix, GitProtected: opts.GitProtected, CreatedAt: now, UpdatedAt: now, AccessToken: newToken(), Warm: warm, IDBase: m.cfg.IDBase,
		Owner: CallerFrom(ctx).Owner(), Provisioning: true, Name: opts.Name, Labels: opts.Labels, Mapped: m.mapsUsers(opts.Runtime),
		Tier: opts.Tier, GitPush: opts.GitPush,
		Users: pendingUsers(opts.Users),
	}
	setOwner(ctx, sb, opts) // owners.go
	if opts.Timeout > 0 {
		exp := now.Add(opts.Timeout)
		sb.ExpiresAt, sb.Timeout = &exp, opts.Timeout
	}
	m.setLifecycle(sb, opts, now)
	if err := m.store.Insert(ctx, sb); err != nil {
		return nil, err
	}
	unlock := m.lock(sb.ID)
	defer unlock()
	t0 := time.Now()
	if err := m.storage.CreateDrive(ctx, sb.ID, sb.Limits.DiskBytes); err != nil {
		m.destroy(sb.ID)
		return nil, fmt.Errorf("creating drive: %w", err)
	}
	m.log.Debug("create step", "sandbox", sb.ID, "step", "drive", "took", time.Since(t0))
	if err := m.up(ctx, sb, tmpl, extra); err != nil {
		m.destroy(sb.ID)
		return nil, err
	}
	return m.provisioned(ctx, sb)
}

// provisioned records that the new sandbox sb is up: running, no longer Provisioning (an
// interrupted create is then a stopped sandbox, not a half-made one to remove).
func (m *Manager) provisioned(ctx context.Context, sb *Sandbox) (*Sandbox, error) {
	return m.store.Update(ctx, sb.ID, func(s *Sandbox) error {
		if err := checkTransition(s.ID, s.State, StateRunning); err != nil {
			return err
		}
		s.State = StateRunning
		s.User = sb.User
		s.Provisioning = false
		s.OOMCounter, s.PidsCounter = 0, 0
		return nil
	})
}

// paths of one sandbox's run directory.
type paths struct{ dir, userns, netns, rootfs, bundle, fifo string }

func (m *Manager) paths(id string) paths {
	dir := filepath.Join(m.cfg.RunDir, "sandboxes", id)
	return paths{
		dir:    dir,
		userns: filepath.Join(dir, "userns"),
		netns:  filepath.Join(dir, "netns"),
		rootfs: filepath.Join(dir, "rootfs"),
		bundle: filepath.Join(dir, "bundle"),
		fifo:   filepath.Join(dir, "init.fifo"),
	}
}

// LogPath is where moat-init's own output for sandbox id goes (initlog: capped, the
// previous part in LogPath(id)+".1").
func (m *Manager) LogPath(id string) string {
	return filepath.Join(m.cfg.DataDir, "logs", id+".log")
}

// closeLog stops reading sandbox id's output, after reading what its (stopped)
// container left. Idempotent.
func (m *Manager) closeLog(id string) {
	if v, ok := m.logs.LoadAndDelete(id); ok {
		lg := v.(*initlog.Log)
		lg.Tail(500 * time.Millisecond)
		if err := lg.Close(); err != nil {
			m.log.Warn("closing init log", "sandbox", id, "err", err)
		}
	}
}

// CloseLogs stops reading every sandbox's output; the sandboxes keep running, and a
// restarted daemon reads on (Reconcile). For daemon shutdown.
func (m *Manager) CloseLogs() {
	m.logs.Range(func(k, v any) bool {
		m.logs.Delete(k)
		_ = v.(*initlog.Log).Close()
		return true
	})
}

// up brings a sandbox whose drive exists to running: namespaces, network, root filesystem,
// container, and a healthy moat-init. On error the caller tears down with down.
func (m *Manager) up(ctx context.Context, sb *Sandbox, tmpl Template, extra []Layer) error {
	p := m.paths(sb.ID)
	ids := sb.HostIDs()
	t0 := time.Now()
	// Only the sandbox's own root (runc) may pass through to its root filesystem (rundir.go);
	// the bundle with the spec stays private.
	mapped := sb.InUserNS()
	if mapped && !*m.mapsUsers(sb.Runtime) {
		return fmt.Errorf("sandbox %s runs in a user namespace of its own uid range, which this %s (%s) cannot give it: %w",
			sb.ID, sb.Runtime, m.runtimeBinary(sb.Runtime), errdefs.ErrUnavailable)
	}
	if err := prepareSandboxDir(p.dir, mapped, ids); err != nil {
		return fmt.Errorf("preparing the sandbox directory: %w", err)
	}
	if err := os.MkdirAll(p.bundle, 0o700); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.LogPath(sb.ID)), 0o700); err != nil {
		return err
	}
	step := func(name string) {
		m.log.Debug("create step", "sandbox", sb.ID, "step", name, "took", time.Since(t0))
		t0 = time.Now()
	}
	step("dirs")
	defer step("health")
	if err := m.ns.Create(p.userns, p.netns, ids); err != nil {
		return fmt.Errorf("creating namespaces: %w", err)
	}
	step("namespaces")
	// The network (gateway namespace, veth pair, firewall, egress boundary) and the root
	// filesystem (drive, layers, overlays) do not depend on each other: both are set up at
	// once, and a failure of either leaves its part for the caller's teardown, as before.
	var caPEM string
	netDone := make(chan error, 1)
	go func() {
		t := time.Now()
		if err := m.network.Setup(ctx, sb.ID, p.netns); err != nil {
			netDone <- fmt.Errorf("setting up network: %w", err)
			return
		}
		m.log.Debug("create step", "sandbox", sb.ID, "step", "netns+veth", "took", time.Since(t))
		t = time.Now()
		pem, err := m.egress.Attach(sb.ID, sb.EgressPolicy(), sb.Credentials, sb.GitSettings())
		if err != nil {
			netDone <- fmt.Errorf("starting egress: %w", err)
			return
		}
		m.log.Debug("create step", "sandbox", sb.ID, "step", "egress", "took", time.Since(t))
		if _, err := m.applyUserNetwork(sb); err != nil { // per-user egress (useregress.go)
			netDone <- err
			return
		}
		caPEM = pem
		netDone <- nil
	}()
	// A sandbox without a user namespace of ours (runsc 2022-12): its layers are not
	// idmapped and its files belong to root of the host-side filesystem view.
	req := MountRequest{ID: sb.ID, Template: tmpl, Extra: extra, Target: p.rootfs, UserNS: p.userns, RootUID: ids.Host}
	if !mapped {
		req.UserNS, req.RootUID = "", 0
	}
	mountErr := m.storage.Mount(ctx, req)
	if mountErr != nil {
		mountErr = fmt.Errorf("mounting root filesystem: %w", mountErr)
	} else {
		m.log.Debug("create step", "sandbox", sb.ID, "step", "mount", "took", time.Since(t0))
	}
	if err := errors.Join(<-netDone, mountErr); err != nil {
		return err
	}
	step("network+mount")
	user, err := resolveUser(p.rootfs, sb.User, tmpl)
	if err != nil {
		return err
	}
	sb.User = user
	env, _ := json.Marshal(credentialEnv(mergeEnv(tmpl.Env, sb.Env), sb.Credentials, caPEM != ""))
	spec := ContainerSpec{
		ID: sb.ID, BundleDir: p.bundle, Rootfs: p.rootfs, InitPath: m.cfg.InitPath,
		InitInput: []byte(sb.AccessToken),
		InitEnv: []string{
			"MOAT_ENV=" + string(env),
			"MOAT_DEFAULT_USER=" + sb.User,
			"MOAT_RUNTIME=" + sb.Runtime,
			"MOAT_CA_PEM=" + caPEM,
		},
		Hostname: "sandbox", UserNS: p.userns, IDs: ids, NetNS: p.netns,
		Limits: sb.Limits, Drive: filepath.Join(p.dir, "drive"),
	}
	if sb.Limits.Nofile > 0 {
		// The open-file limit also where the runtime could not set it from the spec (runc
		// without CAP_SYS_RESOURCE): moat-init lowers its own before anything runs.
		spec.InitEnv = append(spec.InitEnv, "MOAT_NOFILE="+strconv.FormatInt(sb.Limits.Nofile, 10))
	}
	if !mapped {
		spec.UserNS = ""
	}
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return fmt.Errorf("sandbox %s was created with runtime %q, which is not available now (available: %s): %w",
			sb.ID, sb.Runtime, strings.Join(m.Runtimes(), ", "), errdefs.ErrUnavailable)
	}
	m.closeLog(sb.ID)
	lg, err := initlog.Create(p.fifo, m.LogPath(sb.ID), initlog.DefaultLimits, m.log)
	if err != nil {
		return fmt.Errorf("init log: %w", err)
	}
	m.logs.Store(sb.ID, lg)
	m.watchInit(sb.ID, lg)
	spec.Output = lg
	if err := rt.Start(ctx, spec); err != nil {
		return fmt.Errorf("starting %s container: %w", sb.Runtime, err)
	}
	lg.Release() // the container holds the write end now
	step("runtime start")
	if err := m.waitHealthy(ctx, sb.ID); err != nil {
		return fmt.Errorf("moat-init did not become ready: %w (its log: %s)", err, m.LogPath(sb.ID))
	}
	return m.applyUsers(ctx, sb.ID) // useradd.go
}

// mergeEnv combines image defaults (KEY=VALUE list) with the sandbox's own variables.
func mergeEnv(image []string, own map[string]string) map[string]string {
	out := map[string]string{}
	for _, kv := range image {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "PATH" && k != "HOME" {
			out[k] = v
		}
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}

// resolveUser checks that user exists in the sandbox's /etc/passwd (ErrNotFound naming the
// template's users otherwise). An empty user picks the default: "user" when the template
// has it, else the image's configured user, else root. The file is read through os.Root:
// it belongs to the sandbox.
func resolveUser(rootfs, user string, tmpl Template) (string, error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return "", err
	}
	defer root.Close()
	f, err := root.Open("etc/passwd")
	if err != nil {
		if user == "" || user == "root" {
			return "root", nil
		}
		return "", fmt.Errorf("template %s has no /etc/passwd, so no user %q: %w", tmpl.Name, user, errdefs.ErrNotFound)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return "", err
	}
	var users []string
	for _, line := range strings.Split(string(data), "\n") {
		if name, _, _ := strings.Cut(line, ":"); name != "" {
			users = append(users, name)
		}
	}
	if user == "" {
		imageUser, _, _ := strings.Cut(tmpl.User, ":")
		for _, want := range []string{"user", imageUser} {
			if want != "" && slices.Contains(users, want) {
				return want, nil
			}
		}
		return "root", nil
	}
	if slices.Contains(users, user) {
		return user, nil
	}
	if len(users) > 8 {
		users = append(users[:8], "…")
	}
	return "", fmt.Errorf("user %q does not exist in template %s (users: %s): %w", user, tmpl.Name, strings.Join(users, ", "), errdefs.ErrNotFound)
}

// down tears down everything up made, leaving the drive. Idempotent; survives
// cancellation of the caller.
func (m *Manager) down(id string, runtime string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := m.paths(id)
	var errs []error
	m.meterFinal(ctx, id) // metering.go: the CPU time up to now, before the cgroup goes
	m.egress.Detach(id)
	if rt := m.runtimes[runtime]; rt != nil {
		if err := rt.Stop(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("stopping container: %w", err))
		}
	} else {
		// The runtime went away since: try every runtime we have, one of them may know it.
		for name, rt := range m.runtimes {
			if err := rt.Stop(ctx, id); err != nil {
				m.log.Debug("stopping with another runtime", "sandbox", id, "runtime", name, "err", err)
			}
		}
	}
	m.envd.CloseIdleConnections()
	if n := m.envdConns.closeAll(id); n > 0 {
		m.log.Debug("closed the streams of a stopped sandbox", "sandbox", id, "streams", n)
	}
	m.closeLog(id)
	if err := m.storage.Unmount(ctx, id, p.rootfs); err != nil {
		errs = append(errs, fmt.Errorf("unmounting root filesystem: %w", err))
	}
	if err := m.network.Teardown(ctx, id); err != nil {
		errs = append(errs, fmt.Errorf("tearing down network: %w", err))
	}
	if err := m.ns.Remove(p.userns, p.netns); err != nil {
		errs = append(errs, fmt.Errorf("removing namespaces: %w", err))
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(p.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Get returns one sandbox. Warm sandboxes (pool.go) are not visible.
func (m *Manager) Get(ctx context.Context, id string) (*Sandbox, error) {
	sb, err := m.store.Get(ctx, id)
	if err == nil && sb.Warm {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return sb, err
}

// List returns every sandbox the daemon knows, except warm ones.
func (m *Manager) List(ctx context.Context) ([]*Sandbox, error) {
	all, err := m.store.List(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(sb *Sandbox) bool { return sb.Warm }), nil
}

// Wait blocks until background work (deletions, with their retries) has finished.
func (m *Manager) Wait() { m.bg.Wait() }

// Close ends the retries of failed deletions (the next daemon start finishes them) and
// waits for background work. For daemon shutdown.
func (m *Manager) Close() {
	m.closeOnce.Do(func() { close(m.done) })
	m.bg.Wait()
}

// EnvdTransport returns the HTTP transport that reaches sandboxes' moat-init: request
// URLs use the sandbox ID as host, e.g. http://sb-0123456789ab/health.
func (m *Manager) EnvdTransport() http.RoundTripper { return m.envd }

// mapsUsers says whether runtime runs sandboxes in their own user namespace (see
// UserNamespaces), as a record's Mapped.
func (m *Manager) mapsUsers(runtime string) *bool {
	ok := !TraitsOf(runtime).OwnKernel
	if u, is := m.runtimes[runtime].(UserNamespaces); is {
		ok = u.MapsUsers()
	}
	return &ok
}

// runtimeBinary names the binary of runtime, for messages (the runtime's name when the
// driver does not say).
func (m *Manager) runtimeBinary(runtime string) string {
	if b, ok := m.runtimes[runtime].(interface{ Binary() string }); ok {
		return b.Binary()
	}
	return runtime
}

// lock serializes operations on one sandbox within this process.
func (m *Manager) lock(id string) func() { return m.locks.lock(id) }

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Metrics samples a running sandbox's CPU, memory and drive use (over 200 ms).
func (m *Manager) Metrics(ctx context.Context, id string) (Metric, error) {
	sb, err := m.Get(ctx, id)
	if err != nil {
		return Metric{}, err
	}
	if sb.State != StateRunning && sb.State != StatePaused {
		return Metric{}, fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrConflict)
	}
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return Metric{}, fmt.Errorf("runtime %s unavailable: %w", sb.Runtime, errdefs.ErrUnavailable)
	}
	// The drive is mounted at <sandbox dir>/drive (storage.Mount).
	return Sample(ctx, rt, id, filepath.Join(m.paths(id).dir, "drive"), 0)
}
