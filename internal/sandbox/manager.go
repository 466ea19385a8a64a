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
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
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
	// done closes when the daemon shuts down (Close): background retries end.
	done      chan struct{}
	closeOnce sync.Once
	// layerGC: a create or start holds it shared from getting its repository layer until
	// its record names it; the layer GC holds it exclusively (snapshot.go).
	layerGC sync.RWMutex
	hook    func(point string) // failpoint of tests (SetHook, snapshot.go); nil: none
	// act is each sandbox's activity since this daemon started (idle.go).
	act sync.Map // id → *activity
}

// NewManager wires a Manager. runtimes maps runtime names ("runc", "runsc", …) to drivers;
// only those that work on this host should be present.
func NewManager(cfg Config, st Store, runtimes map[string]Runtime, storage Storage, network Network, egress Egress, ns Namespaces, log *slog.Logger) *Manager {
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = 20 * time.Second
	}
	m := &Manager{
		cfg: cfg, store: checkedStore{st}, runtimes: runtimes, storage: storage, network: network, egress: egress, ns: ns, log: log,
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
			return m.network.DialSandbox(ctx, host, EnvdPort)
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
	// Idle and DeleteAfter: nil takes the daemon's default (Config.DefaultIdle,
	// DefaultDeleteAfter), 0 turns it off. Archive and AutoResume: see Sandbox (idle.go).
	Idle        *time.Duration `json:"idle,omitempty"`
	DeleteAfter *time.Duration `json:"delete_after,omitempty"`
	Archive     bool           `json:"archive,omitempty"`
	AutoResume  bool           `json:"auto_resume,omitempty"`
	// Name and Labels (names.go): the name must be free among the caller's sandboxes.
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

var (
	userRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	envRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// DefaultRuntime is used when CreateOptions.Runtime is empty.
const DefaultRuntime = "runc"

// Runtimes lists the runtime names this manager can use, sorted.
func (m *Manager) Runtimes() []string {
	names := make([]string, 0, len(m.runtimes))
	for n := range m.runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// validate fills defaults and rejects bad options before anything is created.
func (m *Manager) validate(ctx context.Context, opts *CreateOptions) error {
	if opts.Runtime == "" {
		opts.Runtime = DefaultRuntime
	}
	if why, ok := m.cfg.Unusable[opts.Runtime]; ok {
		return fmt.Errorf("runtime %q cannot run sandboxes on this host: %s (available: %s): %w",
			opts.Runtime, why, strings.Join(m.Runtimes(), ", "), errdefs.ErrUnavailable)
	}
	if _, ok := m.runtimes[opts.Runtime]; !ok {
		return fmt.Errorf("runtime %q is not available on this host (available: %s; see `moat doctor`): %w",
			opts.Runtime, strings.Join(m.Runtimes(), ", "), errdefs.ErrNotFound)
	}
	if opts.Template == "" {
		opts.Template = "host"
	}
	if opts.User != "" && !userRE.MatchString(opts.User) {
		return fmt.Errorf("user %q is not a valid user name: %w", opts.User, errdefs.ErrInvalidArgument)
	}
	for k := range opts.Env {
		if !envRE.MatchString(k) {
			return fmt.Errorf("environment variable name %q is invalid: %w", k, errdefs.ErrInvalidArgument)
		}
	}
	if opts.Timeout < 0 {
		return fmt.Errorf("timeout %s is negative: %w", opts.Timeout, errdefs.ErrInvalidArgument)
	}
	switch opts.OnTimeout {
	case "", OnTimeoutStop, OnTimeoutDelete, OnTimeoutPause:
	default:
		return fmt.Errorf("on-timeout %q: want stop, delete or pause: %w", opts.OnTimeout, errdefs.ErrInvalidArgument)
	}
	if err := validateCredentials(opts.Credentials); err != nil {
		return err
	}
	if err := validateLifecycle(opts); err != nil {
		return err
	}
	if err := m.validateNaming(ctx, opts); err != nil {
		return err
	}
	if opts.AgentBranchPrefix != "" {
		p, err := NormalizeAgentPrefix(opts.AgentBranchPrefix)
		if err != nil {
			return err
		}
		opts.AgentBranchPrefix = p
	}
	switch opts.GitProtected {
	case "", GitProtectedRefuse:
		opts.GitProtected = ""
	case GitProtectedHold:
	default:
		return fmt.Errorf("git protected-path action %q: want refuse or hold: %w", opts.GitProtected, errdefs.ErrInvalidArgument)
	}
	for _, c := range opts.Credentials {
		if _, clash := opts.Env[c.Secret]; clash && c.Header == "" {
			return fmt.Errorf("credential %s: the environment already sets %s: %w", c.Secret, c.Secret, errdefs.ErrInvalidArgument)
		}
	}
	if opts.Policy != nil {
		// Without a phase, the sandbox starts in "run" (policy.StartCreate).
		spec, err := opts.Policy.WithStartPhase(policy.StartCreate, "")
		if err == nil {
			err = spec.Validate()
		}
		if err != nil {
			return fmt.Errorf("egress policy: %w: %w", err, errdefs.ErrInvalidArgument)
		}
		opts.Policy = &spec
	}
	l, err := EffectiveLimits(opts.Limits, m.cfg.DefaultLimits, m.ceilings(CallerFrom(ctx)))
	if err != nil {
		return err
	}
	opts.Limits = l
	return nil
}

// ceilings are the bounds of the limits caller may ask for: the host's, the daemon's, and
// its API key's maxima (none for the operator).
// DefaultLimits are the limits of a sandbox that asks for none, before the ceilings.
func (m *Manager) DefaultLimits() Limits { return m.cfg.DefaultLimits }

func (m *Manager) ceilings(caller Caller) Ceilings {
	c := Ceilings{Host: m.cfg.Host, Daemon: m.cfg.MaxLimits, FileBudget: m.cfg.FileBudget, IODefaults: m.cfg.DefaultLimits}
	if !caller.Operator {
		c.Key, c.KeyID = caller.Max, caller.APIKey
	}
	return c
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
	if opts.FromSnapshot != "" {
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
		Owner: CallerFrom(ctx).Owner(), Provisioning: true, Name: opts.Name, Labels: opts.Labels,
	}
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
	if err := prepareSandboxDir(p.dir, sb.Runtime, ids); err != nil {
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
		caPEM = pem
		netDone <- nil
	}()
	// gVisor has its own kernel and no user namespace of ours: its layers are not idmapped
	// and its files belong to root of the host-side filesystem view.
	req := MountRequest{ID: sb.ID, Template: tmpl, Extra: extra, Target: p.rootfs, UserNS: p.userns, RootUID: ids.Host}
	if sb.Runtime == "runsc" {
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
	if sb.Runtime == "runsc" {
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
	return nil
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

// waitHealthy polls moat-init's /health through the gateway until it answers.
func (m *Manager) waitHealthy(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.HealthTimeout)
	defer cancel()
	// moat-init needs ~20 ms to listen under runc and ~0.5 s under runsc: poll every
	// 3 ms for the first 60 ms, then back off (each poll is a dial through the gateway; a
	// burst of creates on a busy host must not spend its CPU on polling).
	start := time.Now()
	delay := 3 * time.Millisecond
	var last error
	for {
		last = m.health(ctx, id)
		if last == nil {
			return nil
		}
		if time.Since(start) > 60*time.Millisecond {
			delay = min(delay*2, 50*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(delay):
		}
	}
}

func (m *Manager) health(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+id+"/health", nil)
	resp, err := m.envd.RoundTrip(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

// down tears down everything up made, leaving the drive. Idempotent; survives
// cancellation of the caller.
func (m *Manager) down(id string, runtime string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := m.paths(id)
	var errs []error
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

// destroy removes every trace of a sandbox that never became usable (a failed or
// interrupted create). The caller holds the sandbox's lock. The record turns "deleting"
// first, so what a failed teardown leaves is retried (finishDelete) and never shows up as
// a sandbox someone could start.
func (m *Manager) destroy(id string) {
	ctx := context.Background()
	sb, err := m.store.Update(ctx, id, func(s *Sandbox) error { s.State = StateDeleting; return nil })
	if err != nil {
		m.log.Error("cleaning up failed sandbox", "sandbox", id, "err", err)
		sb = &Sandbox{ID: id}
	}
	if err := m.remove(sb); err != nil {
		m.log.Error("cleaning up failed sandbox; retrying", "sandbox", id, "err", err)
		m.retryDelete(sb)
	}
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

// Stop stops a running or paused sandbox's processes and keeps its drive.
func (m *Manager) Stop(ctx context.Context, id string) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == StateStopped {
		return sb, nil
	}
	if err := checkTransition(id, sb.State, StateStopped); err != nil {
		return nil, err
	}
	return m.stopLocked(ctx, sb, "")
}

func (m *Manager) stopLocked(ctx context.Context, sb *Sandbox, reason string) (*Sandbox, error) {
	return m.stopFor(ctx, sb, reason, "")
}

// stopAfter stops sb (the caller holds its lock) where no caller can be told of a
// failure (a failed start, reconcile, expiry): what goes wrong is logged. stopFor has
// already recorded a failed teardown in the record's error.
func (m *Manager) stopAfter(ctx context.Context, sb *Sandbox, reason, by string) {
	if _, err := m.stopFor(ctx, sb, reason, by); err != nil {
		m.log.Error("recording a stopped sandbox", "sandbox", sb.ID, "reason", reason, "err", err)
	}
}

// event records an event of sandbox id; a failure is logged (the operation it records
// has happened either way).
func (m *Manager) event(ctx context.Context, id, kind, detail string) {
	if err := m.store.AddEvent(context.WithoutCancel(ctx), id, kind, detail); err != nil {
		m.log.Error("recording an event", "sandbox", id, "kind", kind, "err", err)
	}
}

// deleteLogged deletes sandbox id in the background of another operation (a failed
// fork or hand-over, a stale warm sandbox): a failure is logged.
func (m *Manager) deleteLogged(ctx context.Context, id, why string) {
	if err := m.Delete(context.WithoutCancel(ctx), id); err != nil {
		m.log.Error("deleting sandbox", "sandbox", id, "why", why, "err", err)
	}
}

// stopFor is stopLocked recording who stopped the sandbox (Sandbox.StopReason).
func (m *Manager) stopFor(ctx context.Context, sb *Sandbox, reason, by string) (*Sandbox, error) {
	downErr := m.down(sb.ID, sb.Runtime)
	if downErr != nil {
		m.log.Error("stopping sandbox", "sandbox", sb.ID, "err", downErr)
	}
	return m.store.Update(context.WithoutCancel(ctx), sb.ID, func(s *Sandbox) error {
		s.State = StateStopped
		s.Error = reason
		s.StopReason = by
		if downErr != nil {
			s.Error = strings.TrimSpace(reason + " teardown: " + downErr.Error())
		}
		return nil
	})
}

// Start brings a stopped sandbox back with its drive.
func (m *Manager) Start(ctx context.Context, id string) (*Sandbox, error) {
	defer m.busy()() // the warm pools wait (pool.go)
	unlock := m.lock(id)
	defer unlock()
	return m.startLocked(ctx, id)
}

func (m *Manager) startLocked(ctx context.Context, id string) (*Sandbox, error) {
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == StateRunning {
		return sb, nil
	}
	if err := checkTransition(id, sb.State, StateCreating); err != nil {
		return nil, err
	}
	tmpl, err := m.storage.Template(ctx, sb.Template)
	if err != nil {
		return nil, err
	}
	m.layerGC.RLock() // until the record names the layer (snapshot.go)
	extra, repoLayer, err := m.repoLayerOf(ctx, sb)
	if err != nil {
		m.layerGC.RUnlock()
		return nil, err
	}
	_, err = m.store.Update(ctx, id, func(s *Sandbox) error {
		s.State = StateCreating
		s.Error = ""
		s.RepoLayer = repoLayer
		return nil
	})
	m.layerGC.RUnlock()
	if err != nil {
		return nil, err
	}
	if err := m.up(ctx, sb, tmpl, extra); err != nil {
		m.stopAfter(ctx, sb, err.Error(), "")
		return nil, fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	return m.store.Update(ctx, id, func(s *Sandbox) error {
		s.State = StateRunning
		s.OOMCounter, s.PidsCounter = 0, 0
		if s.Timeout > 0 {
			exp := time.Now().UTC().Add(s.Timeout)
			s.ExpiresAt = &exp
		}
		return nil
	})
}

// Pause freezes a running sandbox's processes; Resume thaws them.
func (m *Manager) Pause(ctx context.Context, id string) (*Sandbox, error) {
	return m.freeze(ctx, id, StatePaused)
}

// Resume thaws a paused sandbox.
func (m *Manager) Resume(ctx context.Context, id string) (*Sandbox, error) {
	return m.freeze(ctx, id, StateRunning)
}

func (m *Manager) freeze(ctx context.Context, id string, to State) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.State == to {
		return sb, nil
	}
	if err := checkTransition(id, sb.State, to); err != nil {
		return nil, err
	}
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return nil, fmt.Errorf("runtime %s unavailable: %w", sb.Runtime, errdefs.ErrUnavailable)
	}
	op := rt.Pause
	if to == StateRunning {
		op = rt.Resume
	}
	if err := op(ctx, id); err != nil {
		return nil, fmt.Errorf("%s sandbox %s: %w", map[State]string{StatePaused: "pausing", StateRunning: "resuming"}[to], id, err)
	}
	return m.store.Update(ctx, id, func(s *Sandbox) error { s.State, s.StopReason = to, ""; return nil })
}

// Delete removes a sandbox. The record turns "deleting" at once; the teardown (container,
// mounts, network, drive) runs in the background, and a daemon that dies meanwhile
// finishes it on its next start. Wait blocks until background deletions are done.
//
// Deleting frees space, so it works also when the data filesystem is full (possible when
// the daemon overcommits drives): if the database cannot record the deletion, the sandbox
// is torn down and its drive removed first, and then the deletion is recorded.
func (m *Manager) Delete(ctx context.Context, id string) error {
	return m.deleteIf(ctx, id, nil)
}

// deleteIf is Delete of a sandbox whose record cond (when not nil) accepts under the
// sandbox's lock; cond's error is returned and nothing is deleted then (names.go).
func (m *Manager) deleteIf(ctx context.Context, id string, cond func(*Sandbox) error) error {
	unlock := m.lock(id)
	markDeleting := func() (*Sandbox, error) {
		return m.store.Update(ctx, id, func(s *Sandbox) error {
			if s.State == StateDeleting {
				return nil
			}
			if cond != nil {
				if err := cond(s); err != nil {
					return err
				}
			}
			if err := checkTransition(s.ID, s.State, StateDeleting); err != nil {
				return err
			}
			s.State = StateDeleting
			return nil
		})
	}
	sb, err := markDeleting()
	if errors.Is(err, errdefs.ErrResourceExhausted) {
		m.log.Warn("data filesystem full: freeing the sandbox's drive before recording its deletion", "sandbox", id, "err", err)
		if cur, gerr := m.store.Get(ctx, id); gerr == nil && checkTransition(id, cur.State, StateDeleting) == nil && (cond == nil || cond(cur) == nil) {
			if derr := m.down(id, cur.Runtime); derr != nil {
				m.log.Error("deleting sandbox on a full data filesystem: teardown", "sandbox", id, "err", derr)
			} else if derr := m.storage.DeleteDrive(context.WithoutCancel(ctx), id); derr != nil {
				m.log.Error("deleting sandbox on a full data filesystem: drive", "sandbox", id, "err", derr)
			}
		}
		sb, err = markDeleting()
		// The drive's blocks come back only when its loop device lets go of the unlinked
		// file, a moment after the lazy unmount: try again for a while.
		for wait := time.Now().Add(10 * time.Second); errors.Is(err, errdefs.ErrResourceExhausted) && time.Now().Before(wait) && ctx.Err() == nil; {
			time.Sleep(100 * time.Millisecond)
			sb, err = markDeleting()
		}
	}
	unlock()
	if err != nil {
		return err
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		m.finishDelete(sb)
	}()
	return nil
}

// finishDelete removes a deleting sandbox: container, mounts, network, drive, record. A
// teardown that fails is retried in the background with backoff (retryDelete) until it
// succeeds or the manager closes; a daemon that stops meanwhile finishes it when it starts
// again (Reconcile).
func (m *Manager) finishDelete(sb *Sandbox) {
	unlock := m.lock(sb.ID)
	err := m.remove(sb)
	unlock()
	if err != nil {
		m.log.Error("deleting sandbox; retrying", "sandbox", sb.ID, "err", err)
		m.retryDelete(sb)
		return
	}
	if sb.RepoLayer != nil {
		m.collectLayers(context.Background()) // its repository layer may be unused now (snapshot.go)
	}
}

// retryDelete retries remove for sb in the background, backing off from 1 s to 30 s,
// until it succeeds or the manager closes.
func (m *Manager) retryDelete(sb *Sandbox) {
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		for attempt := 1; ; attempt++ {
			select {
			case <-m.done:
				return
			case <-time.After(deleteBackoff(attempt)):
			}
			unlock := m.lock(sb.ID)
			err := m.remove(sb)
			unlock()
			if err == nil {
				m.log.Info("deleted sandbox after retrying", "sandbox", sb.ID, "attempts", attempt+1)
				return
			}
			m.log.Warn("deleting sandbox failed again", "sandbox", sb.ID, "attempt", attempt+1, "err", err)
		}
	}()
}

// deleteBackoff is the wait before the given retry (1, 2, …) of a failed deletion.
func deleteBackoff(attempt int) time.Duration {
	return min(time.Second<<min(attempt-1, 5), 30*time.Second)
}

// remove is one attempt at removing everything of sandbox sb, in an order that keeps what
// is left findable: teardown (down), then the drive, then the record. It is idempotent;
// the caller holds the sandbox's lock.
func (m *Manager) remove(sb *Sandbox) error {
	if err := m.down(sb.ID, sb.Runtime); err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	ctx := context.Background()
	if err := m.storage.DeleteDrive(ctx, sb.ID); err != nil {
		return fmt.Errorf("drive: %w", err)
	}
	m.egress.Forget(sb.ID)
	_ = initlog.Remove(m.LogPath(sb.ID))
	if err := m.store.Delete(ctx, sb.ID); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// Wait blocks until background work (deletions, with their retries) has finished.
func (m *Manager) Wait() { m.bg.Wait() }

// Close ends the retries of failed deletions (the next daemon start finishes them) and
// waits for background work. For daemon shutdown.
func (m *Manager) Close() {
	m.closeOnce.Do(func() { close(m.done) })
	m.bg.Wait()
}

// Reconcile makes the host match the store after a (possibly unclean) daemon start:
// interrupted deletions finish; interrupted creates (Sandbox.Provisioning: no client was
// ever answered with them) are removed with everything they made, since the drive may be
// missing and nobody knows their ID; interrupted starts of existing sandboxes stop (their
// drive holds the owner's data); running sandboxes whose container is alive and healthy
// stay running, and the rest are stopped cleanly.
func (m *Manager) Reconcile(ctx context.Context) error {
	list, err := m.store.List(ctx)
	if err != nil {
		return err
	}
	for _, sb := range list {
		if sb.Warm && sb.State != StateDeleting {
			// A warm sandbox of a previous daemon: disposable, never handed over.
			if err := m.Delete(ctx, sb.ID); err != nil {
				m.log.Error("deleting a previous daemon's warm sandbox", "sandbox", sb.ID, "err", err)
			}
			continue
		}
		switch {
		case sb.State == StateDeleting:
			m.finishDelete(sb)
		case sb.Provisioning:
			m.log.Warn("removing a sandbox whose create was interrupted", "sandbox", sb.ID, "state", sb.State)
			unlock := m.lock(sb.ID)
			m.destroy(sb.ID)
			unlock()
		case sb.State == StateCreating:
			unlock := m.lock(sb.ID)
			m.stopAfter(ctx, sb, "interrupted while starting (daemon restart)", "")
			unlock()
		case sb.State == StateRunning || sb.State == StatePaused:
			older := m.fromOlderDaemon(sb.ID)
			if !older && m.alive(ctx, sb) {
				m.attachLog(sb.ID)
				if _, err := m.egress.Attach(sb.ID, sb.EgressPolicy(), sb.Credentials, sb.GitSettings()); err == nil {
					m.log.Info("adopted running sandbox", "sandbox", sb.ID, "state", sb.State)
					continue
				} else {
					m.log.Error("restarting egress of a running sandbox", "sandbox", sb.ID, "err", err)
				}
			}
			reason := "container was gone after a daemon restart"
			if older {
				reason = "started by an older moat without an output FIFO, a token pipe and closed directories; start it again"
			}
			unlock := m.lock(sb.ID)
			m.stopAfter(ctx, sb, reason, "")
			unlock()
		case sb.State == StateStopped:
			// Leftovers of a crash between teardown steps are removed; the drive stays.
			if _, err := os.Stat(m.paths(sb.ID).dir); err == nil {
				if err := m.down(sb.ID, sb.Runtime); err != nil {
					m.log.Error("cleaning stopped sandbox", "sandbox", sb.ID, "err", err)
				}
			}
		}
	}
	return nil
}

// fromOlderDaemon says whether sandbox id was started by a moat from before its output
// FIFO: such a sandbox also has its access token in moat-init's environment and a run
// directory (and, under runsc, a root overlay) other host users can reach, so it is stopped
// rather than adopted; starting it again sets it up as a new one.
func (m *Manager) fromOlderDaemon(id string) bool {
	fi, err := os.Lstat(m.paths(id).fifo)
	return err != nil || fi.Mode().Type() != os.ModeNamedPipe
}

// attachLog reads on from the output FIFO of a running sandbox of a previous daemon.
func (m *Manager) attachLog(id string) {
	m.closeLog(id)
	lg, err := initlog.Attach(m.paths(id).fifo, m.LogPath(id), initlog.DefaultLimits, m.log)
	if err != nil {
		m.log.Warn("reading the output of a running sandbox", "sandbox", id, "err", err)
		return
	}
	m.logs.Store(id, lg)
	m.watchInit(id, lg)
}

// watchInit notices at once when sandbox id's moat-init (PID 1) is gone: its output FIFO
// then has no writer left, because a PID 1 that ends takes every process of its sandbox
// with it (under runsc, the sandbox process goes too). Unless the daemon itself closed the
// log (stop, delete, shutdown: it is no longer lg in m.logs), the sandbox is checked and,
// its container gone, recorded as stopped with the reason (Check). The liveness sweep
// remains for whatever this misses.
func (m *Manager) watchInit(id string, lg *initlog.Log) {
	go func() {
		<-lg.Ended()
		if cur, ok := m.logs.Load(id); !ok || cur != lg {
			return
		}
		// The runtime may report the container a moment after its output ended (its
		// init not yet reaped): look again for a few seconds.
		for range 25 {
			select {
			case <-m.done:
				return
			default:
			}
			sb, err := m.Check(context.Background(), id)
			if errors.Is(err, errdefs.ErrNotFound) {
				return // deleted meanwhile: its deletion ended it
			}
			if err != nil {
				m.log.Warn("checking a sandbox whose init ended", "sandbox", id, "err", err)
				return
			}
			if sb.State != StateRunning {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
}

func (m *Manager) alive(ctx context.Context, sb *Sandbox) bool {
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return false
	}
	ok, err := rt.Running(ctx, sb.ID)
	if err != nil || !ok {
		return false
	}
	if sb.State == StatePaused {
		return true
	}
	return m.health(ctx, sb.ID) == nil
}

// Check notices a sandbox whose container died on its own (a runsc sandbox killed by its
// memory or pids limit, an external kill): a running sandbox whose container is gone is
// stopped cleanly, with the reason recorded. It returns the sandbox's current record.
func (m *Manager) Check(ctx context.Context, id string) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil || sb.State != StateRunning {
		return sb, err
	}
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return sb, nil
	}
	if ok, err := rt.Running(ctx, id); err != nil || ok {
		return sb, err
	}
	reason := "the sandbox's init (PID 1) exited and its container with it (killed from outside, or by its pids limit)"
	// The OOM watch (WatchOOM, every second) may have recorded the kill first.
	if n := m.noteOOM(ctx, sb); n > 0 || (sb.LastOOMAt != nil && time.Since(*sb.LastOOMAt) < 10*time.Second) {
		reason = fmt.Sprintf("the sandbox's container was ended by the OOM killer (memory limit %d bytes)", sb.Limits.MemoryBytes)
	}
	m.log.Warn("sandbox container exited on its own", "sandbox", id, "reason", reason)
	return m.stopLocked(ctx, sb, reason)
}

// Sweep finds running sandboxes whose moat-init no longer answers and, when their container
// is gone, records them as stopped (Check). A /health dial through the gateway costs
// ~0.2 ms, so the daemon can afford it for every sandbox every few seconds.
func (m *Manager) Sweep(ctx context.Context) {
	list, err := m.store.List(ctx)
	if err != nil {
		m.log.Error("listing sandboxes for the liveness sweep", "err", err)
		return
	}
	for _, sb := range list {
		if sb.State != StateRunning || m.health(ctx, sb.ID) == nil {
			continue
		}
		if _, err := m.Check(ctx, sb.ID); err != nil {
			m.log.Warn("liveness sweep", "sandbox", sb.ID, "err", err)
		}
	}
}

// Expire stops every running sandbox whose timeout has passed. The daemon calls it
// periodically.
func (m *Manager) Expire(ctx context.Context, now time.Time) {
	list, err := m.store.List(ctx)
	if err != nil {
		m.log.Error("listing sandboxes for expiry", "err", err)
		return
	}
	for _, sb := range list {
		if sb.Warm || sb.ExpiresAt == nil || now.Before(*sb.ExpiresAt) || (sb.State != StateRunning && sb.State != StatePaused) {
			continue
		}
		m.expire(ctx, sb.ID, now)
	}
}

// expire acts on one sandbox's timeout under its lock, after checking again that the
// deadline has passed (a concurrent SetTimeout may have moved it) and that the sandbox is
// running or paused.
func (m *Manager) expire(ctx context.Context, id string, now time.Time) {
	unlock := m.lock(id)
	cur, err := m.store.Get(ctx, id)
	if err != nil || cur.ExpiresAt == nil || now.Before(*cur.ExpiresAt) || (cur.State != StateRunning && cur.State != StatePaused) {
		unlock()
		return
	}
	m.log.Info("sandbox timeout reached", "sandbox", id, "on_timeout", cur.OnTimeout)
	switch cur.OnTimeout {
	case OnTimeoutDelete:
		unlock() // Delete takes the lock itself
		if err := m.Delete(ctx, id); err != nil {
			m.log.Error("deleting sandbox at its timeout", "sandbox", id, "err", err)
		}
		return
	case OnTimeoutPause:
		// Frozen, with no deadline until someone resumes it.
		if cur.State == StateRunning {
			if err := m.runtimes[cur.Runtime].Pause(ctx, id); err != nil {
				m.log.Error("pausing sandbox at its timeout", "sandbox", id, "err", err)
				m.stopAfter(ctx, cur, "timeout reached; pausing failed: "+err.Error(), "")
				break
			}
		}
		if _, err := m.store.Update(ctx, id, func(s *Sandbox) error {
			if s.State != StateRunning && s.State != StatePaused {
				return fmt.Errorf("sandbox %s became %s: %w", id, s.State, errdefs.ErrConflict)
			}
			s.State, s.ExpiresAt, s.StopReason = StatePaused, nil, StopTimeout
			return nil
		}); err != nil {
			m.log.Error("recording a sandbox paused at its timeout", "sandbox", id, "err", err)
		}
	default:
		m.stopAfter(ctx, cur, "timeout reached", StopTimeout)
	}
	unlock()
}

// SetTimeout makes sandbox id's timeout end d from now (d ≤ 0: no deadline); a later
// start counts d again.
func (m *Manager) SetTimeout(ctx context.Context, id string, d time.Duration) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	return m.store.Update(ctx, id, func(s *Sandbox) error {
		if s.Warm || s.State == StateDeleting {
			return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
		}
		if d <= 0 {
			s.ExpiresAt = nil
			return nil
		}
		exp := time.Now().UTC().Add(d)
		s.Timeout, s.ExpiresAt = d, &exp
		return nil
	})
}

// EnvdTransport returns the HTTP transport that reaches sandboxes' moat-init: request
// URLs use the sandbox ID as host, e.g. http://sb-0123456789ab/health.
func (m *Manager) EnvdTransport() http.RoundTripper { return m.envd }

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

// PolicyUpdate changes a sandbox's egress policy: a new Spec, a new phase, or both.
type PolicyUpdate struct {
	Spec  *policy.Spec `json:"policy,omitempty"` // nil keeps the current policy
	Phase string       `json:"phase,omitempty"`  // "" keeps the spec's phase
}

// SetPolicy records a sandbox's new egress policy and, when it runs, applies it at once:
// connections the new policy does not allow are cut (their number is returned).
func (m *Manager) SetPolicy(ctx context.Context, id string, u PolicyUpdate) (*Sandbox, int, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	if sb.Warm {
		return nil, 0, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	spec := sb.EgressPolicy()
	if u.Spec != nil {
		current := spec.Phase
		spec = *u.Spec
		if u.Phase == "" {
			// A new policy without a phase keeps the current phase if it has it, else
			// starts in "run" (policy.StartReplace).
			if spec, err = spec.WithStartPhase(policy.StartReplace, current); err != nil {
				return nil, 0, fmt.Errorf("egress policy: %w: %w", err, errdefs.ErrInvalidArgument)
			}
		}
	}
	if u.Phase != "" {
		if _, ok := spec.Phases[u.Phase]; !ok {
			return nil, 0, fmt.Errorf("the policy has no phase %q (phases: %s): %w", u.Phase, strings.Join(slices.Sorted(maps.Keys(spec.Phases)), ", "), errdefs.ErrInvalidArgument)
		}
		spec.Phase = u.Phase
	}
	if err := spec.Validate(); err != nil {
		return nil, 0, fmt.Errorf("egress policy: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	sb, err = m.store.Update(ctx, id, func(s *Sandbox) error { s.Policy = &spec; return nil })
	if err != nil {
		return nil, 0, err
	}
	cut, err := m.egress.SetPolicy(id, spec)
	if err != nil {
		return sb, 0, err
	}
	m.log.Info("egress policy changed", "sandbox", id, "phase", spec.Phase, "connections_cut", cut)
	return sb, cut, nil
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
