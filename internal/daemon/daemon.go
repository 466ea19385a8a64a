// Package daemon is moat's composition root: it builds every subsystem (state store,
// storage, network, runtimes, sandbox manager, API server) in start order, serves the API on
// a unix socket and optionally TCP, and shuts down through named closers in reverse order.
// `moat serve` runs it; `moat run` without a daemon runs it in-process on a private socket.
package daemon

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/doctor"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/egress/proxy"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/initlog"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/metrics"
	"github.com/moatdev/moat/internal/netns"
	moatruntime "github.com/moatdev/moat/internal/runtime"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/storage"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/internal/tiers"
	"github.com/moatdev/moat/sdk"
)

// Config configures a daemon.
type Config struct {
	DataDir  string // default /var/lib/moat
	RunDir   string // default /run/moat
	Socket   string // default /run/moat/moat.sock
	Listen   string // optional TCP address; requires API keys
	InitPath string // moat-init binary; default: next to the running executable
	// RuntimePaths names a runtime's binary (e.g. "runsc" → /usr/bin/runsc); a runtime not
	// named is chosen from RuntimeDir, PATH and the system directories (runtimes.go).
	RuntimePaths map[string]string
	// RuntimeDir is moat's own runtime directory, preferred to the system's binaries;
	// default moatruntime.DefaultDir (where `make deps` builds the pinned runc and runsc).
	RuntimeDir string
	// Warm keeps, per pool ("runc" = runc with the host template, "runc:debian"), this
	// many default sandboxes started for creates to claim (sandbox/pool.go).
	Warm map[string]int
	// SweepInterval is how often running sandboxes are checked for a dead container
	// (default 30 s).
	SweepInterval time.Duration
	// MeterInterval is how often the usage ledger samples the sandboxes' cgroups
	// (metering.go; default 15 s).
	MeterInterval time.Duration
	// IDBase moves sandboxes' host uid ranges (0: the default); for tests that run several
	// daemons on one host at once.
	IDBase uint32
	// EgressHosts pins names to addresses for the egress proxy (--egress-hosts), before
	// DNS; pinned addresses may be loopback or private.
	EgressHosts egress.Hosts
	// EgressDNS is the upstream DNS server ("ip:port") the proxy resolves names with;
	// empty: the host's resolver.
	EgressDNS string
	// EgressCA is a PEM file of extra roots the proxy trusts for upstream TLS when it
	// intercepts (credential brokering), besides the system's (--egress-ca).
	EgressCA string
	// GitProtected are globs of repository paths (gitgate syntax: anchored, ** across
	// components) a push may not touch, besides gitgate.DefaultProtected(); matched with
	// ASCII case folded (--git-protected).
	GitProtected []string
	// TestWeaken, TEST ONLY, deliberately weakens every sandbox (redteam.go); no flag or
	// API field sets it.
	TestWeaken TestWeaken
	// Egress connection limits (zero: defaults of internal/egress/proxy).
	EgressIdleTimeout time.Duration
	EgressMaxDuration time.Duration
	EgressMaxConns    int
	// EgressAsker, a test hook, decides the connections and credential uses a sandbox's
	// policy asks about instead of the approvals service (ask mode: create --ask, ask
	// rules, bindings with approve). nil: approvals decide them (approvals.go).
	EgressAsker egress.Asker
	// DiskOvercommit lets the sizes of the drives add up to more than the data filesystem
	// holds (--disk-overcommit): drives stay sparse, and once the filesystem is full every
	// sandbox that writes to a not yet allocated part of its drive gets I/O errors (see
	// storage.DiskPolicy). Default: every drive is allocated in full when it is created, and
	// a create that does not fit is refused.
	DiskOvercommit bool
	// DrivePool is the size of the XFS drive pool to make (--drive-pool; snapshot.go in
	// internal/storage): drives live in it so snapshots and forks are reflinks. A pool made
	// earlier is used whatever this says; 0 and no pool: drives on the data filesystem,
	// snapshots copy.
	DrivePool int64
	// DiskReserve is the space of the data filesystem kept free of drives for the
	// database, logs, layers and templates (--disk-reserve); 0: storage.DefaultReserve.
	DiskReserve int64
	// DefaultLimits override the built-in defaults of new sandboxes' limits, field by field
	// (zero: built-in). MaxLimits are the operator's maxima of every sandbox's limits (zero
	// fields: only the host bounds them; API keys may have lower maxima of their own).
	// FileBudget is the most open files one sandbox may hold (0: fs.file-max /
	// sandbox.HostShare). See sandbox.EffectiveLimits.
	DefaultLimits sandbox.Limits
	MaxLimits     sandbox.Limits
	FileBudget    int64
	// EgressBudget is the budget of proxied connections of all sandboxes together (each
	// may hold proxy.FDsPerConn descriptors); 0: what RLIMIT_NOFILE leaves after a reserve
	// for the API, the store and the sandboxes themselves (egressBudget).
	EgressBudget int
	// The API listeners: concurrent TCP connections (--listen; default 256, of them 64
	// from one remote address; the unix socket has no cap), the time a client has to send
	// its request headers (default 10 s) and to send its next request on a kept-alive
	// connection (default 120 s).
	APIMaxConns        int
	APIMaxConnsPerAddr int
	APIHeaderTimeout   time.Duration
	APIIdleTimeout     time.Duration
	// E2BTemplates maps E2B template names to moat templates (default: base → debian).
	E2BTemplates map[string]string
	// DefaultIdle and DefaultDeleteAfter are the idle period and the unused period of
	// sandboxes whose create names none (--idle, --delete-after; 0: 5 min and 7 days,
	// negative: off). See sandbox/idle.go.
	DefaultIdle        time.Duration
	DefaultDeleteAfter time.Duration
	// IdleFreeze is how long an idle sandbox stays frozen before it is stopped
	// (--idle-freeze; 0: 10 min, negative: stopped at once).
	IdleFreeze time.Duration
	// ArchiveKeep is how long drive archives are kept (--archive-keep; 0: for ever).
	ArchiveKeep time.Duration
	// AuditKeep and AuditMax are the audit log's retention (--audit-keep, --audit-max; 0:
	// for ever, no limit): audit.go.
	AuditKeep time.Duration
	AuditMax  int64
	Log       *slog.Logger

	// SocketListener, when set, is the unix listener the API is served on instead of one
	// made at Socket (systemd socket activation, see activation.go); Socket then only
	// names it in messages. The daemon neither checks, nor changes, nor removes its file.
	SocketListener net.Listener

	// Tiers are the operator's consequence tiers (moat serve --tiers FILE), added to the
	// built-ins or replacing them by name (internal/tiers).
	Tiers []tiers.Tier
	// CredentialAsker, a test hook, answers the questions about credentials bound with
	// approve (the operate tier) instead of the approvals service (approvals.go).
	CredentialAsker egress.Asker

	// Exclusive makes the daemon the only one on its data directory: it refuses to start
	// while another moat daemon (a `moat serve`, an in-process `moat run`) uses it, and
	// keeps others from starting there while it runs (datalock.go). `moat serve` sets it
	// unless --share-data.
	Exclusive bool

	// Approvals configure approvals and their webhook (approvals.go).
	Approvals ApprovalsConfig

	// MetricsToken, when set, is the bearer token TCP scrapes of /metrics must bear;
	// without it only loopback peers (and the unix socket) may scrape (metrics.go).
	MetricsToken []byte

	// Previews configure port previews (previews.go).
	Previews PreviewsConfig
	// ConsoleSecureCookie: a TLS proxy is in front of Listen, so the web console's cookies
	// are Secure and its origin https (moat serve --console-secure-cookie).
	ConsoleSecureCookie bool
}

// Daemon is a running moat daemon.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	Store   *store.Store
	Manager *sandbox.Manager
	Egress  *egress.Manager
	api     *apiserver.Server
	closers []namedCloser
	lock    *os.File
	// dataLock marks the data directory as used by this daemon (datalock.go); sockIno
	// is the inode of the socket it made, removed at shutdown only while it is still ours.
	dataLock *os.File
	sockIno  sockID
	servers  []*http.Server
	wg       sync.WaitGroup
	// archives are the drive archives (listed, removed, expired after cfg.ArchiveKeep).
	archives archives
	audit    *auditLog // audit.go
	// Approvals are the approvals (approvals.go).
	Approvals *approvals.Service
	// metrics are served at GET /metrics (metrics.go).
	metrics *metrics.Metrics
}

type namedCloser struct {
	name string
	fn   func() error
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.DataDir == "" {
		c.DataDir = "/var/lib/moat"
	}
	if c.RunDir == "" {
		c.RunDir = "/run/moat"
	}
	if c.Socket == "" {
		c.Socket = filepath.Join(c.RunDir, "moat.sock")
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if c.RuntimeDir == "" {
		c.RuntimeDir = moatruntime.DefaultDir
	}
}

// FindInit locates the moat-init binary: next to the running executable, then
// /usr/local/lib/moat/moat-init, then /usr/lib/moat/moat-init.
func FindInit() (string, error) {
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "moat-init"))
	}
	candidates = append(candidates, "/usr/local/lib/moat/moat-init", "/usr/lib/moat/moat-init")
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() {
			return c, nil
		}
	}
	return "", fmt.Errorf("moat-init not found (looked in %v); build it with `make build`", candidates)
}

// New builds the subsystems in start order. It takes the data directory's lock: the
// first process to hold it alone reconciles the host with the stored state.
func New(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	cfg.Defaults()
	d := &Daemon{cfg: cfg, log: cfg.Log}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if os.Geteuid() != 0 {
		return nil, errors.New("the moat daemon must run as root (it creates namespaces, mounts and cgroups)")
	}
	protected, err := gitgate.NewPathMatcher(append(gitgate.DefaultProtected(), cfg.GitProtected...), gitgate.MatcherOptions{CaseInsensitive: true})
	if err != nil {
		return nil, fmt.Errorf("--git-protected: %w", err)
	}
	for key := range cfg.Warm {
		if _, err := sandbox.ParsePoolKey(key); err != nil {
			return nil, err
		}
	}
	if cfg.InitPath == "" {
		if cfg.InitPath, err = FindInit(); err != nil {
			return nil, err
		}
	}
	if err := CheckRuntimePaths(cfg.RuntimePaths); err != nil {
		return nil, err
	}
	// Which binary each runtime uses is probed while the rest starts (runtimes.go).
	chosenRuntimes := selectRuntimes(ctx, cfg, d.log.With("component", "runtime"))
	defer chosenRuntimes() // no probe outlives a failed New
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", cfg.DataDir, err)
	}
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	// The run directory holds sandbox root filesystems: searchable by every sandbox's host
	// root (runc sets up the root filesystem as that uid), listable by root only. Each
	// sandbox's own directory inside is closed to every other host account (see
	// internal/sandbox/rundir.go).
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("creating %s: %w", cfg.RunDir, err)
	}
	if err := os.Chmod(cfg.RunDir, 0o711); err != nil {
		return nil, err
	}
	if d.cfg.InitPath, err = stageInit(cfg.InitPath, cfg.RunDir); err != nil {
		return nil, err
	}
	if d.dataLock, err = lockDataDir(cfg.DataDir, cfg.Socket, cfg.Exclusive); err != nil {
		return nil, err
	}
	if cfg.SocketListener == nil {
		if err := clearStaleSocket(cfg.Socket); err != nil {
			return nil, err // before any work: another daemon has this socket
		}
	}
	exclusive, err := d.takeLock()
	if err != nil {
		return nil, err
	}

	st, err := store.Open(filepath.Join(cfg.DataDir, "moat.db"))
	if err != nil {
		return nil, err
	}
	d.Store = st
	d.addCloser("store", st.Close)
	akey, err := loadAuditKey(cfg.DataDir) // audit.go
	if err != nil {
		return nil, err
	}
	d.audit = &auditLog{st: st, key: akey, keep: cfg.AuditKeep, max: cfg.AuditMax, log: d.log.With("component", "audit")}
	if err := d.newApprovals(); err != nil { // approvals.go
		return nil, err
	}

	sec, err := secrets.Open(cfg.DataDir)
	if err != nil {
		return nil, err
	}

	stor, err := storage.New(cfg.DataDir, cfg.RunDir, d.log.With("component", "storage"))
	if err != nil {
		return nil, fmt.Errorf("opening storage: %w", err)
	}
	d.addCloser("storage", stor.Close)
	// Each sandbox's init log (and its one rotated part) is written beside its drive.
	stor.SetDiskPolicy(storage.DiskPolicy{Overcommit: cfg.DiskOvercommit, Reserve: cfg.DiskReserve, PerDrive: logShare})
	failpoint := killFailpoint(d.log)
	stor.SetHook(failpoint)
	if err := openDrivePool(ctx, stor, cfg); err != nil {
		return nil, err
	}

	net := netns.New(cfg.RunDir, d.log.With("component", "netns"))
	d.addCloser("network", net.Close)

	if exclusive {
		if err := st.CloseOpenEgress(ctx); err != nil {
			d.log.Warn("closing egress log entries of the previous run", "err", err)
		}
	}
	roots, err := upstreamRoots(cfg.EgressCA)
	if err != nil {
		return nil, err
	}
	budget, floor := egressBudget(nofile(), cfg.EgressBudget)
	d.log.Info("egress budget", "connections", budget, "per_sandbox_floor", floor, "rlimit_nofile", nofile())
	d.metrics = d.newMetrics(st) // metrics.go
	d.Egress = egress.New(egress.Config{
		Observer:     d.metrics,
		Listener:     net,
		Journal:      st,
		Resolver:     egress.NewResolver(cfg.EgressHosts, cfg.EgressDNS),
		Secrets:      sec,
		CADir:        filepath.Join(cfg.DataDir, "ca"),
		GitDir:       filepath.Join(cfg.DataDir, "git"),
		GitProtected: protected,
		RootCAs:      roots,
		Audit: func(id, kind, detail string) {
			if err := st.AddEvent(context.Background(), id, kind, detail); err != nil {
				d.log.Error("recording an egress event", "sandbox", id, "kind", kind, "err", err)
			}
		},
		Log:         d.log.With("component", "egress"),
		Budget:      proxy.NewBudget(budget, floor),
		MaxConns:    cfg.EgressMaxConns,
		IdleTimeout: cfg.EgressIdleTimeout,
		MaxDuration: cfg.EgressMaxDuration,
		// approvals.go: the approvals service decides, unless a test hook is set.
		Asker:           d.egressAsker(cfg.EgressAsker),
		CredentialAsker: d.egressAsker(cfg.CredentialAsker),
	})
	d.addCloser("egress", d.Egress.Close)

	runtimes, unusable := newRuntimes(cfg, chosenRuntimes(), d.log.With("component", "runtime"))
	if len(runtimes) == 0 {
		return nil, errors.New("no OCI runtime available: apt-get install runc (see `moat doctor`)")
	}

	host, errs := hostCapacity(cfg.DataDir)
	if err := errors.Join(errs...); err != nil {
		d.log.Warn("reading the host's capacity; limits are not bounded by what could not be read", "err", err)
	}

	ns := namespaces{owner: linux.OwnerRange}
	if err := linux.ProbeOwnerRange(cfg.RunDir); err != nil {
		ns.owner = linux.OwnerRoot
		d.log.Warn("sandboxes' user namespaces will belong to root: every sandbox and host root share one budget of per-user kernel limits (inotify instances, POSIX message queues), so one sandbox can exhaust them for all (see `moat doctor`)", "err", err)
	}
	d.Manager = sandbox.NewManager(sandbox.Config{
		RunDir: cfg.RunDir, DataDir: cfg.DataDir, InitPath: d.cfg.InitPath,
		DefaultLimits: defaultLimits(cfg.DefaultLimits),
		Host:          host,
		MaxLimits:     cfg.MaxLimits,
		FileBudget:    cfg.FileBudget,
		Unusable:      unusable,
		Warm:          cfg.Warm,
		IDBase:        cfg.IDBase,
		Secrets:       sec,
		DefaultIdle:   cfg.DefaultIdle, DefaultDeleteAfter: cfg.DefaultDeleteAfter, IdleFreeze: cfg.IdleFreeze,
	}, sandbox.Deps{Store: st, Runtimes: runtimes, Storage: stor, Network: net, Egress: d.Egress, Namespaces: ns, Log: d.log.With("component", "sandbox")})
	d.Manager.SetHook(failpoint)
	// An approval of a held connection for the whole sandbox adds its rule here (ask mode).
	d.Egress.SetRuleAdder(d.Manager.AddEgressRule)
	// Closed after background work (reverse order): a deletion still closes its own.
	d.addCloser("init logs", func() error { d.Manager.CloseLogs(); return nil })
	d.addCloser("background work", func() error { d.Manager.Close(); return nil })

	if exclusive {
		if err := stor.Cleanup(ctx); err != nil {
			d.log.Warn("cleaning storage", "err", err)
		}
		if err := stor.CleanupArchives(); err != nil {
			d.log.Warn("cleaning interrupted drive archives", "err", err)
		}
		if err := d.Manager.Reconcile(ctx); err != nil {
			return nil, fmt.Errorf("reconciling sandboxes: %w", err)
		}
		d.Manager.ReconcileSnapshots(ctx)
		d.Manager.CollectLayers(ctx)
	}
	if err := d.shareLock(); err != nil {
		return nil, err
	}

	tmpls := templates{s: stor, changed: d.Manager.KickPools, m: d.Manager, locks: &nameLocks{},
		client: sdk.NewUnix(d.cfg.Socket), log: d.log.With("component", "templates")}
	if exclusive {
		tmpls.removeBuildSandboxes(ctx)
	}
	d.api = apiserver.New(apiserver.Deps{
		Sandboxes: d.Manager, Templates: tmpls, Events: events{st, d.Egress}, Keys: apiKeys{st}, Secrets: secretStore{sec, d.Manager},
		Doctor: func(ctx context.Context) any {
			r := doctor.Run(ctx, ProbeRuntimeWith(cfg.RuntimePaths, cfg.RuntimeDir))
			r.Storage = append(r.Storage, d.dataFSCheck(stor))
			r.Storage = append(r.Storage, snapshotCheck(stor))
			r.Storage = append(r.Storage, checkpointChecks(ctx, d.Manager)...)
			return r
		},
		E2B: apiserver.E2BConfig{Templates: cfg.E2BTemplates}, Log: d.log.With("component", "api"),
	})
	d.api.SetTemplateAdmin(tmpls)
	// E2B templates as code: e2btemplates.go.
	d.api.SetE2BTemplates(newE2BTemplates(tmpls, cfg.DataDir))
	d.api.SetE2BBuildRecords(st, exclusive)   // their build records survive a restart
	d.api.SetProtectedPaths(cfg.GitProtected) // GET /v1/inventory
	d.api.SetTemplateScanner(templateScanner{stor})
	d.api.SetMetrics(d.metrics.Handler(), cfg.MetricsToken, d.metrics) // metrics.go
	tierSet, err := tiers.NewSet(cfg.Tiers)
	if err != nil {
		return nil, fmt.Errorf("tiers: %w", err)
	}
	d.api.SetTiers(tierSet)
	d.api.SetWorkspaces(&workspaces{
		m: d.Manager, gitDir: filepath.Join(cfg.DataDir, "git"), protected: protected, log: d.log.With("component", "workspace"),
		audit: func(id, kind, detail string) {
			if err := st.AddEvent(context.Background(), id, kind, detail); err != nil {
				d.log.Error("recording a workspace event", "sandbox", id, "kind", kind, "err", err)
			}
		},
	})
	d.api.SetChanges(d.Egress)
	d.api.SetSnapshots(d.Manager)
	d.api.SetUsers(d.Manager) // users (issue 15)
	d.archives = archives{s: stor, st: st, log: d.log.With("component", "archives")}
	d.api.SetArchives(d.archives)
	d.api.SetAudit(d.audit)                                  // audit.go
	d.api.SetConsole(st, st, cfg.ConsoleSecureCookie)        // the web console's sessions (apiserver/session.go)
	if err := d.startApprovals(ctx, exclusive); err != nil { // approvals.go
		return nil, err
	}
	d.startMetering(st) // metering.go
	d.startPreviews(st) // previews.go
	return d, nil
}

// logShare is what each sandbox may write to the data filesystem beside its drive: its
// capped init log and the rotated part.
var logShare = 2 * initlog.DefaultLimits.MaxBytes

// dataFSCheck is the doctor's finding on the data filesystem: how many more sandboxes with
// the default drive it admits.
func (d *Daemon) dataFSCheck(stor *storage.Store) doctor.Check {
	sp, err := stor.Space()
	if err != nil {
		return doctor.Check{Name: "data filesystem", Detail: err.Error()}
	}
	disk := d.Manager.DefaultLimits().DiskBytes
	return doctor.DataFilesystem(doctor.DataFS{FS: sp.FS, Free: sp.Free, Promised: sp.Promised, Reserve: sp.Reserve,
		DefaultDisk: disk, Fits: sp.DrivesThatFit(disk, logShare), Size: storage.SizeText})
}

// takeLock takes the data directory lock: exclusive when no other moat process holds it
// (this one then reconciles), shared otherwise.
func (d *Daemon) takeLock() (bool, error) {
	f, err := os.OpenFile(filepath.Join(d.cfg.DataDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return false, err
	}
	d.lock = f
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return true, nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		return false, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return false, nil
}

func (d *Daemon) shareLock() error {
	return unix.Flock(int(d.lock.Fd()), unix.LOCK_SH)
}

func (d *Daemon) addCloser(name string, fn func() error) {
	d.closers = append(d.closers, namedCloser{name, fn})
}

// Serve serves the API until ctx ends: on the unix socket (mode 0600) and, when
// configured, on TCP with API keys. It also enforces sandbox timeouts.
func (d *Daemon) Serve(ctx context.Context, ready func()) error {
	ul, err := d.unixListener()
	if err != nil {
		return err
	}
	d.serve(ul, d.api.Handler(nil))
	if d.cfg.Listen != "" {
		tl, err := net.Listen("tcp", d.cfg.Listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", d.cfg.Listen, err)
		}
		n := d.cfg.APIMaxConns
		if n <= 0 {
			n = defaultAPIConns
		}
		var last atomic.Int64 // one warning a minute at most: refusals come in floods
		addr := tl.Addr().String()
		perAddr := d.cfg.APIMaxConnsPerAddr
		if perAddr <= 0 {
			perAddr = defaultAPIConnsPerAddr
		}
		tl = newLimitListener(tl, n, perAddr, func() {
			if now, prev := time.Now().UnixNano(), last.Load(); now-prev > int64(time.Minute) && last.CompareAndSwap(prev, now) {
				d.log.Warn("API connections refused: too many at once", "addr", addr, "max", n, "max_per_address", perAddr)
			}
		})
		d.serve(tl, d.api.Handler(d.Store))
		d.log.Info("listening", "addr", tl.Addr().String())
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.Manager.RunPools(ctx) // returns at shutdown, after deleting the warm sandboxes
	}()
	d.log.Info("moat daemon ready", "socket", d.cfg.Socket, "data", d.cfg.DataDir, "warm", d.cfg.Warm)
	if ready != nil {
		ready()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sweep := d.cfg.SweepInterval
	if sweep == 0 {
		sweep = 30 * time.Second
	}
	lastSweep := time.Now()
	for {
		select {
		case <-ctx.Done():
			return d.shutdownServers()
		case now := <-tick.C:
			d.Manager.Expire(ctx, now)
			d.Manager.WatchOOM(ctx)
			d.Manager.WatchPids(ctx)
			d.Manager.Idle(ctx)
			if now.Sub(lastSweep) >= sweep {
				lastSweep = now
				d.Manager.Sweep(ctx)
				d.archives.expire(ctx, now, d.cfg.ArchiveKeep)
				d.audit.tick(ctx, now) // audit.go: checkpoint, retention
			}
		}
	}
}

func (d *Daemon) serve(l net.Listener, h http.Handler) {
	header, idle := d.cfg.APIHeaderTimeout, d.cfg.APIIdleTimeout
	if header <= 0 {
		header = 10 * time.Second
	}
	if idle <= 0 {
		idle = 120 * time.Second
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: header, // a client that never finishes its headers is cut
		IdleTimeout:       idle,
		// No read or write timeout: exec, PTY and log streams and file uploads last as
		// long as they need.
	}
	d.servers = append(d.servers, srv)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("API server stopped", "addr", l.Addr().String(), "err", err)
		}
	}()
}

func (d *Daemon) shutdownServers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, s := range d.servers {
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, s.Close())
		}
	}
	d.wg.Wait()
	removeOwnSocket(d.cfg.Socket, d.sockIno)
	return errors.Join(errs...)
}

// Close runs the named closers in reverse order. Sandboxes keep running: a daemon restart
// adopts them.
func (d *Daemon) Close() error {
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		c := d.closers[i]
		if err := c.fn(); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", c.name, err))
		}
	}
	d.closers = nil
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
	unlockDataDir(d.dataLock)
	d.dataLock = nil
	return errors.Join(errs...)
}

// namespaces implements sandbox.Namespaces with internal/linux. owner is OwnerRange unless
// this host cannot give a sandbox's user namespace to its own uid (ProbeOwnerRange).
type namespaces struct{ owner linux.Owner }

func (n namespaces) Create(userns, netns string, ids sandbox.IDRange) error {
	return linux.CreateUserAndNetNS(linux.NamespaceFiles{User: userns, Net: netns}, linux.IDRange{Host: ids.Host, Size: ids.Size}, n.owner)
}

func (namespaces) Remove(userns, netns string) error {
	return errors.Join(linux.UnmountFile(netns), linux.UnmountFile(userns))
}

// RuntimeArgs returns, for the benchmark's raw baseline, how moat's driver invokes a
// runtime: its binary (paths[name], or as Available finds it) and global flags, with the
// daemon's run directory.
func RuntimeArgs(runDir string, paths map[string]string) func(name string) (string, []string, error) {
	return func(name string) (string, []string, error) {
		rt, err := moatruntime.New(name, moatruntime.Options{Binary: paths[name], Root: filepath.Join(runDir, "runtime", name)}, nil)
		if err != nil {
			return "", nil, err
		}
		return rt.Binary(), rt.GlobalArgs(), nil
	}
}

// Start builds a daemon and serves it in the background until the returned stop is
// called; stop shuts the servers down, waits for background work (deletions, the warm
// pools' draining) and closes the daemon. It returns once the socket accepts requests.
// `moat run` without a running daemon, and `moat bench`, use it.
func Start(ctx context.Context, cfg Config) (d *Daemon, stop func(), err error) {
	d, err = New(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		d.Close()
		return nil, nil, err
	}
	return d, func() {
		cancel()
		<-done
		d.Close()
	}, nil
}

// stageInit refuses a moat-init that is not a static executable (checkStaticELF), then
// copies it into the run directory (root-owned, 0755, named
// by size and modification time) and returns the copy's path. Older copies stay: another
// moat process (a daemon, an in-process `moat run`) may still start sandboxes from one;
// the run directory is a tmpfs cleared at boot. Sandboxes bind-mount the copy:
// it is reachable whatever the permissions of the directory moat was installed or built
// in, and rebuilding moat-init never changes a running sandbox's.
func stageInit(src, runDir string) (string, error) {
	st, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("moat-init: %w", err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("moat-init: %w", err)
	}
	if err := checkStaticELF(data); err != nil {
		return "", fmt.Errorf("moat-init %s is not a static executable: %v; build it with `make build` (CGO_ENABLED=0)", src, err)
	}
	dir := filepath.Join(runDir, "bin")
	dst := filepath.Join(dir, fmt.Sprintf("moat-init-%d-%d", st.Size(), st.ModTime().UnixNano()))
	if cur, err := os.ReadFile(dst); err == nil && bytes.Equal(cur, data) {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".moat-init-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	return dst, nil
}

// upstreamRoots is the pool the egress proxy verifies upstream TLS against when it
// intercepts: the system's roots plus those in the PEM file extra (--egress-ca).
func upstreamRoots(extra string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if extra == "" {
		return pool, nil
	}
	data, err := os.ReadFile(extra)
	if err != nil {
		return nil, fmt.Errorf("--egress-ca: %w", err)
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("--egress-ca %s: no PEM certificate in it", extra)
	}
	return pool, nil
}

// IOUnthrottled in Config.DefaultLimits.IOBps or IOIops turns that default drive throttle
// off (0 there means the built-in default).
const IOUnthrottled = -1

// defaultLimits is builtinLimits with the non-zero fields of configured (IOUnthrottled: 0,
// no throttle).
func defaultLimits(configured sandbox.Limits) sandbox.Limits {
	d := sandbox.BuiltinLimits()
	if configured.MemoryBytes > 0 {
		d.MemoryBytes = configured.MemoryBytes
	}
	if configured.CPUs > 0 {
		d.CPUs = configured.CPUs
	}
	if configured.Pids > 0 {
		d.Pids = configured.Pids
	}
	if configured.DiskBytes > 0 {
		d.DiskBytes = configured.DiskBytes
	}
	if configured.IOBps > 0 || configured.IOBps == IOUnthrottled {
		d.IOBps = max(configured.IOBps, 0)
	}
	if configured.IOIops > 0 || configured.IOIops == IOUnthrottled {
		d.IOIops = max(configured.IOIops, 0)
	}
	return d
}
