package sandbox

import (
	"context"
	"net"
	"os"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/secrets"
)

// UserNamespaces is implemented by runtimes that say whether they run sandboxes in the
// sandbox's user namespace (ContainerSpec.UserNS and IDs). A runtime without it does
// unless it has its own kernel (TraitsOf).
type UserNamespaces interface {
	MapsUsers() bool
}

// Runtime starts and stops the container of a sandbox with one OCI runtime binary.
// Implemented by *runtime.OCI (internal/runtime).
type Runtime interface {
	// Name is the runtime's name as recorded on the sandbox: "runc", "crun" or "runsc".
	Name() string
	// Start creates and starts the container described by spec; its PID 1 is moat-init.
	// It returns once the container process runs. On error nothing of the container remains.
	Start(ctx context.Context, spec ContainerSpec) error
	// Stop kills the container (SIGKILL to all its processes) and deletes the runtime's
	// state for it. Idempotent: an unknown container is not an error.
	Stop(ctx context.Context, id string) error
	// Running reports whether the container exists and its init process is alive.
	Running(ctx context.Context, id string) (bool, error)
	// Update changes the running container's cgroup limits (ErrUnavailable where the
	// runtime cannot).
	Update(ctx context.Context, id string, l Limits) error
	// Pause freezes every process of the container; Resume thaws them.
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	// Stats reads the running container's CPU and memory figures from its cgroup
	// (ErrNotFound for an unknown container, ErrUnavailable where they cannot be read).
	Stats(ctx context.Context, id string) (Stats, error)
	// OOMKills counts the processes the kernel's OOM killer killed in the container's
	// memory cgroup since its start (ErrNotFound for an unknown container).
	OOMKills(ctx context.Context, id string) (uint64, error)
}

// ContainerSpec is everything a runtime needs to start one sandbox's container.
type ContainerSpec struct {
	ID        string
	BundleDir string // the runtime writes config.json here; created by the caller
	Rootfs    string // mounted overlay root
	InitPath  string // host path of the moat-init binary (bind-mounted read-only)
	// InitEnv is moat-init's environment. Nothing secret: other processes of the
	// sandbox may read it (gVisor shows /proc/1/environ to every user).
	InitEnv []string
	// InitInput is what moat-init reads on its stdin, a pipe closed after it (its access
	// token). It never enters the spec, an environment or a file. At most 4 KiB.
	InitInput []byte
	Hostname  string
	UserNS    string // path of the pinned user namespace (empty: none, runsc 2022-12)
	IDs       IDRange
	NetNS     string // path of the pinned network namespace S
	Limits    Limits
	// Drive is the host directory the sandbox's drive is mounted on (Storage.Mount's
	// run/drive): Limits.IOBps and IOIops throttle its block device. Empty: no throttle.
	Drive  string
	Output InitOutput // moat-init's stdout and stderr, and the runtime's own messages
}

// InitOutput is where a container's stdout and stderr go: the write end of a pipe whose
// reader caps what reaches the host. Implemented by *initlog.Log.
type InitOutput interface {
	// File is the write end to give the runtime, which hands it to the container.
	File() *os.File
	// Tail gives up the caller's write end, waits up to wait for every other writer to
	// close it and their output to be read, and returns the last output (a few KiB).
	Tail(wait time.Duration) string
}

// IDRange maps container ids [0, Size) to host ids [Host, Host+Size).
type IDRange struct {
	Host uint32
	Size uint32
}

// Limits are the cgroup and disk limits of one sandbox. Zero means the daemon default.
type Limits struct {
	MemoryBytes int64   // memory limit; swap may not add to it
	CPUs        float64 // CPU quota in cores
	Pids        int64   // maximum number of tasks
	DiskBytes   int64   // size of the sandbox's drive
	// Nofile is every sandbox process' RLIMIT_NOFILE (soft = hard). EffectiveLimits
	// chooses it so that Pids × Nofile stays within the sandbox's open-file budget.
	Nofile int64
	// IOBps and IOIops throttle reads and writes (each) to the sandbox's drive, in bytes
	// and requests per second (0: unthrottled).
	IOBps  int64
	IOIops int64
}

// Storage owns templates, layers and drives. Implemented by *storage.Store.
type Storage interface {
	// Template resolves a template name; ErrNotFound (wrapped) names those that exist.
	Template(ctx context.Context, name string) (Template, error)
	// RepoLayer returns the cached layer holding a checkout of dir's HEAD at /workspace,
	// building it on first use.
	RepoLayer(ctx context.Context, dir string) (Layer, error)
	// CreateDrive makes the sandbox's empty drive of the given size; errdefs.ErrResourceExhausted
	// when the host's storage cannot hold it (nothing is made then).
	CreateDrive(ctx context.Context, id string, sizeBytes int64) error
	// Mount assembles the sandbox's root filesystem at req.Target.
	Mount(ctx context.Context, req MountRequest) error
	// Unmount undoes Mount. Idempotent.
	Unmount(ctx context.Context, id string, target string) error
	// DeleteDrive removes the drive. Idempotent.
	DeleteDrive(ctx context.Context, id string) error
}

// Template is a resolved, immutable root filesystem recipe.
type Template struct {
	Name  string
	Parts []Part
	// Env, User and Workdir are the image's defaults (from its OCI config), if any.
	Env     []string
	User    string
	Workdir string
}

// Part is one overlay of a template: Layers (first = topmost) mounted at Target.
type Part struct {
	Target string   // "/" or an absolute path such as "/usr"
	Layers []string // host directories
}

// Layer is an immutable directory tree to add on top of a template's root part.
type Layer struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

// MountRequest describes one sandbox root filesystem.
type MountRequest struct {
	ID       string
	Template Template
	Extra    []Layer // topmost lowers of the "/" part (e.g. the repo layer)
	Target   string  // where the root goes (created)
	UserNS   string  // idmap the lowers through this user namespace (empty: plain)
	RootUID  uint32  // host uid/gid of the sandbox's root (owns the upper dirs)
}

// Network plumbs a sandbox's network namespace to its gateway. Implemented by
// *netns.Manager.
type Network interface {
	// Setup creates the gateway namespace of sandbox id and the veth pair between it and
	// the sandbox namespace at sandboxNS. Idempotent.
	Setup(ctx context.Context, id string, sandboxNS string) error
	// Teardown removes what Setup made. Idempotent.
	Teardown(ctx context.Context, id string) error
	// DialSandbox connects from the gateway namespace to port in the sandbox.
	DialSandbox(ctx context.Context, id string, port int) (net.Conn, error)
}

// Egress serves the network boundary (DNS and proxy) of running sandboxes. Implemented by
// *egress.Manager.
type Egress interface {
	// Attach starts serving sandbox id's boundary, in its gateway namespace, with spec and
	// the credential bindings creds. With bindings it returns the PEM certificate of the
	// sandbox's interception CA (the same across daemon restarts) for its trust store.
	// Attaching an attached sandbox sets its policy (as SetPolicy) and returns the same.
	// git is what its git gate knows (Sandbox.GitSettings): the ref prefix its pushes are
	// limited to, and whether a push touching protected paths is held for approval.
	Attach(id string, spec policy.Spec, creds []Credential, git GitSettings) (caPEM string, err error)
	// SetPolicy replaces the policy of an attached sandbox at once and cuts the open
	// connections it no longer allows, returning how many; a detached sandbox is no error.
	SetPolicy(id string, spec policy.Spec) (int, error)
	// Detach stops serving sandbox id and cuts its connections. Idempotent.
	Detach(id string)
	// Forget drops what the boundary keeps of a deleted sandbox (its CA). Idempotent.
	Forget(id string)
}

// Secrets says what a stored secret is and where it may be sent. Implemented by
// *secrets.Store.
type Secrets interface {
	// Stat returns the kind and scope of secret name, authenticated against its sealed
	// value (errdefs.ErrNotFound when there is none).
	Stat(name string) (secrets.Info, error)
}
