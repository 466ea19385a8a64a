package runtime

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// InitPath is where moat-init appears inside every sandbox.
const InitPath = "/.moat/moat-init"

// ociVersion is the runtime-spec version written into config.json. The spec uses nothing
// newer than 1.0.2, and crun 1.8 refuses any other major.minor than 1.0 ("unknown version
// specified"), so it is pinned rather than taken from the specs-go module (1.3.0).
const ociVersion = "1.0.2"

// defaultPath is the PATH moat-init starts with unless InitEnv sets one.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Capabilities is the sandbox's capability set: bounding = effective = permitted;
// inheritable and ambient stay empty, so a program that drops to a non-root user keeps no
// capability. It is Docker's default set minus CAP_NET_RAW and CAP_MKNOD. Every
// capability is scoped to the sandbox's user namespace (runc/crun) or to gVisor's kernel
// (runsc), never to the host.
//
// Left out, and why:
//   - CAP_SYS_ADMIN: mount, namespaces, and a large share of kernel code paths.
//   - CAP_NET_ADMIN: interfaces, routes and firewall of the sandbox namespace; the sandbox
//     must not reshape its own network boundary.
//   - CAP_NET_RAW: raw and packet sockets (spoofing, sniffing, AF_PACKET exploits); ping
//     works without it through ICMP datagram sockets where the host allows them.
//   - CAP_MKNOD: device nodes; the sandbox gets the standard nodes and no others.
//   - CAP_SYS_PTRACE: inspecting and tampering with other processes (moat-init).
//   - CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_BOOT, CAP_SYS_TIME, CAP_SYSLOG, CAP_SYS_PACCT,
//     CAP_SYS_NICE, CAP_SYS_RESOURCE, CAP_SYS_TTY_CONFIG, CAP_LEASE, CAP_WAKE_ALARM,
//     CAP_BLOCK_SUSPEND, CAP_MAC_*, CAP_AUDIT_CONTROL, CAP_AUDIT_READ, CAP_IPC_LOCK,
//     CAP_IPC_OWNER, CAP_LINUX_IMMUTABLE, CAP_NET_BROADCAST, CAP_DAC_READ_SEARCH, CAP_BPF,
//     CAP_PERFMON, CAP_CHECKPOINT_RESTORE: host-wide state, hardware, or bypasses of
//     permission checks that no agent workload needs.
func Capabilities() []string {
	return []string{
		"CAP_CHOWN",            // package managers and tar set file owners
		"CAP_DAC_OVERRIDE",     // root inside may read/write any file of the sandbox
		"CAP_FSETID",           // keep setuid/setgid bits when root edits a file
		"CAP_FOWNER",           // chmod/utime on files of other sandbox users
		"CAP_SETGID",           // sudo, su, and daemons dropping privileges
		"CAP_SETUID",           // idem
		"CAP_SETFCAP",          // installing packages that carry file capabilities
		"CAP_SETPCAP",          // dropping capabilities from the bounding set
		"CAP_NET_BIND_SERVICE", // dev servers on ports < 1024
		"CAP_SYS_CHROOT",       // build tools (debootstrap, mock) and package scripts
		"CAP_KILL",             // root may signal every sandbox process
		"CAP_AUDIT_WRITE",      // PAM (sudo, login) writes audit records or fails
	}
}

// maskedPaths are hidden (a bind of /dev/null or an empty read-only tmpfs): they expose
// host kernel state (memory, keys, timers, firmware, power capping side channels).
func maskedPaths() []string {
	return []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
}

// readonlyPaths are remounted read-only: kernel tunables and triggers that are not (all)
// namespaced.
func readonlyPaths() []string {
	return []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
}

// hostFeatures is what the spec depends on about the host. BuildSpec detects it; tests
// pass their own.
type hostFeatures struct {
	cgroupNS   bool // the kernel has cgroup namespaces
	cgroupV2   bool // /sys/fs/cgroup is the unified hierarchy
	memsw      bool // cgroup v1 memory controller accounts swap (memory.memsw.*)
	swappiness bool // cgroup v1 memory.swappiness exists
	// drive is the block device of the sandbox's drive, when its I/O is throttled.
	drive *device
	// joinUserNSByPath: the runtime build reads the mappings of a user namespace it joins
	// from the namespace itself, so the spec names the path alone (userNSByPathOnly).
	joinUserNSByPath bool
}

func detectHost() hostFeatures {
	var h hostFeatures
	_, err := os.Stat("/proc/self/ns/cgroup")
	h.cgroupNS = err == nil
	h.cgroupV2 = DetectCgroupMode() == CgroupUnified
	if !h.cgroupV2 {
		_, err = os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
		h.memsw = err == nil
		_, err = os.Stat("/sys/fs/cgroup/memory/memory.swappiness")
		h.swappiness = err == nil
	}
	return h
}

// BuildSpec returns the hardened OCI runtime spec of one sandbox container for the runtime
// named runtimeName ("runc", "crun" or "runsc") at version v (its parsed --version; the zero
// Version when unknown, which gets the spec every build accepts). It is the one place where
// the sandbox's process, mounts, namespaces, capabilities, seccomp profile and cgroup limits
// are decided. It reads a few host facts (cgroup layout, swap accounting) and otherwise is
// pure. Bad input (unknown runtime, relative paths, missing namespaces) is an
// ErrInvalidArgument.
func BuildSpec(spec sandbox.ContainerSpec, runtimeName string, v Version) (*specs.Spec, error) {
	host := detectHost()
	host.joinUserNSByPath = userNSByPathOnly(runtimeName, v)
	if spec.Drive != "" && (spec.Limits.IOBps > 0 || spec.Limits.IOIops > 0) {
		dev, err := blockDevice(spec.Drive)
		if err != nil {
			return nil, fmt.Errorf("the sandbox's drive: %w", err)
		}
		host.drive = &dev
	}
	return buildSpec(spec, runtimeName, host)
}

// device is a block device's number.
type device struct{ major, minor int64 }

// blockDevice returns the device of the filesystem mounted at dir (the drive's loop device).
func blockDevice(dir string) (device, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return device{}, err
	}
	if unix.Major(st.Dev) == 0 {
		return device{}, fmt.Errorf("%s is not on a block device (device 0:%d)", dir, unix.Minor(st.Dev))
	}
	return device{int64(unix.Major(st.Dev)), int64(unix.Minor(st.Dev))}, nil
}

func buildSpec(cs sandbox.ContainerSpec, runtimeName string, host hostFeatures) (*specs.Spec, error) {
	if err := validateContainerSpec(cs, runtimeName); err != nil {
		return nil, err
	}
	gvisor := runtimeName == "runsc"
	lim := effectiveLimits(cs.Limits)

	s := &specs.Spec{
		Version:  ociVersion,
		Hostname: cs.Hostname,
		Root: &specs.Root{
			Path: cs.Rootfs,
			// The root is the sandbox's own overlay (template layers read-only below,
			// its drive above), so writing to it is the sandbox's business.
			Readonly: false,
		},
		Process: &specs.Process{
			Args: []string{InitPath},
			Env:  initEnv(cs.InitEnv),
			Cwd:  "/",
			// moat-init runs as the sandbox's root and drops to the default user for
			// the processes it starts. Root here is an unprivileged host uid (the
			// first id of the sandbox's range) under runc/crun, and gVisor's own root
			// under runsc.
			User: specs.User{UID: 0, GID: 0},
			// no_new_privs stays off: passwordless sudo inside the sandbox needs setuid
			// to work. That is safe because "root" inside is already an unprivileged
			// host uid thanks to the user namespace, and the capability bounding set,
			// seccomp filter and cgroup limits below still apply to every process,
			// setuid or not: no exec can gain more than the sandbox already has.
			// (runsc 2022-12 ignores this and behaves as if no_new_privs were set, so
			// setuid does not elevate and sudo does not work under gVisor.)
			NoNewPrivileges: false,
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  slices.Clone(Capabilities()),
				Effective: slices.Clone(Capabilities()),
				Permitted: slices.Clone(Capabilities()),
				// Inheritable and ambient stay empty: capabilities never survive an
				// exec as a non-root user.
			},
			Rlimits: []specs.POSIXRlimit{
				// Open files per process, inherited by everything moat-init starts; no
				// sandbox process can raise it (CAP_SYS_RESOURCE is not in the set).
				// There is no cgroup for files: Nofile × Pids bounds the sandbox's total
				// (sandbox.EffectiveLimits). (Start lowers it to the daemon's own hard
				// limit when the daemon lacks CAP_SYS_RESOURCE: the runtime could not
				// raise it either.)
				{Type: "RLIMIT_NOFILE", Hard: uint64(lim.Nofile), Soft: uint64(lim.Nofile)},
			},
			// When the host runs out of memory, the kernel kills a sandbox before the
			// daemon or anything else on the host.
			OOMScoreAdj: ptr(500),
		},
		Mounts: mounts(cs, gvisor),
		Linux: &specs.Linux{
			Namespaces: namespaces(cs, gvisor, host),
			// runc's cgroupfs driver: /sys/fs/cgroup/<controller>/moat/<id> (v1) or
			// /sys/fs/cgroup/moat/<id> (v2). Stop removes it with the container.
			CgroupsPath:   "/moat/" + cs.ID,
			Resources:     resources(lim, host),
			Seccomp:       seccompProfile(runtimeName),
			MaskedPaths:   slices.Clone(maskedPaths()),
			ReadonlyPaths: slices.Clone(readonlyPaths()),
		},
	}
	m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: cs.IDs.Host, Size: cs.IDs.Size}}
	switch {
	case gvisor && cs.UserNS != "":
		// runsc makes a user namespace with the sandbox's range for its Sentry and gofer
		// (it cannot join one by path: setns into a user namespace needs a single-threaded
		// process); it equals the pinned one, whose idmapped layers it then sees as its
		// own root's. Its processes and the drive's files belong to the sandbox's range.
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings = m
		s.Linux.GIDMappings = slices.Clone(m)
	case !gvisor && !host.joinUserNSByPath:
		// The container joins the sandbox's pinned user namespace. runc 1.1 and crun
		// insist on seeing the mappings even when they join by path; they must equal the
		// namespace's own, which the daemon created with exactly this range.
		s.Linux.UIDMappings = m
		s.Linux.GIDMappings = slices.Clone(m)
	}
	if gvisor {
		// Where runsc runs (see OCI.netnsOf); runsc ignores annotations it does not know.
		s.Annotations = map[string]string{netnsAnnotation: cs.NetNS}
	}
	return s, nil
}

// userNSByPathOnly reports whether runtime name at version v takes a user namespace to join
// by its path alone. runc 1.2 and later read the joined namespace's mappings themselves
// (specconv.setupUserNamespace) and warn that a spec giving both "may return an error" in
// a future version; runc 1.1.5 fails without them ("User namespaces enabled, but no uid
// mappings found"). crun computes the container's root uid from the spec's mappings, so it
// keeps them. runsc never joins by path (see buildSpec). An unknown version keeps them.
// Pure.
func userNSByPathOnly(name string, v Version) bool {
	return name == "runc" && (v.Major > 1 || (v.Major == 1 && v.Minor >= 2))
}

// validateContainerSpec rejects what would make an unsafe or broken container.
func validateContainerSpec(cs sandbox.ContainerSpec, runtimeName string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("container spec: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	if !slices.Contains(Names(), runtimeName) {
		return bad("unknown runtime %q (want one of %s)", runtimeName, strings.Join(Names(), ", "))
	}
	if !validID(cs.ID) {
		return bad("bad container id %q", cs.ID)
	}
	for name, p := range map[string]string{"rootfs": cs.Rootfs, "init path": cs.InitPath, "network namespace": cs.NetNS} {
		if p == "" || !filepath.IsAbs(p) {
			return bad("%s %q is not an absolute path", name, p)
		}
	}
	// runsc runs without a user namespace of moat's when UserNS is empty (runsc 2022-12).
	if runtimeName != "runsc" || cs.UserNS != "" {
		if cs.UserNS == "" || !filepath.IsAbs(cs.UserNS) {
			return bad("user namespace %q is not an absolute path", cs.UserNS)
		}
		if cs.IDs.Size == 0 || cs.IDs.Host == 0 || uint64(cs.IDs.Host)+uint64(cs.IDs.Size) > math.MaxUint32 {
			return bad("bad id range %d+%d", cs.IDs.Host, cs.IDs.Size)
		}
	}
	if cs.Limits.MemoryBytes < 0 || cs.Limits.CPUs < 0 || cs.Limits.Pids < 0 || cs.Limits.Nofile < 0 || cs.Limits.IOBps < 0 || cs.Limits.IOIops < 0 || math.IsNaN(cs.Limits.CPUs) {
		return bad("negative limits %+v", cs.Limits)
	}
	return nil
}

// validID accepts container ids that are safe as a path element and a runtime argument.
func validID(id string) bool {
	if id == "" || len(id) > 128 || id == "." || id == ".." || id[0] == '-' {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// effectiveLimits fills zero cgroup limits from sandbox.BuiltinLimits (the manager gives
// every sandbox its effective limits; this is for a spec built without them).
func effectiveLimits(l sandbox.Limits) sandbox.Limits {
	def := sandbox.BuiltinLimits()
	if l.MemoryBytes == 0 {
		l.MemoryBytes = def.MemoryBytes
	}
	if l.CPUs == 0 {
		l.CPUs = def.CPUs
	}
	if l.Pids == 0 {
		l.Pids = def.Pids
	}
	if l.Nofile == 0 {
		l.Nofile = sandbox.DefaultNofile
	}
	return l
}

// initEnv is InitEnv plus a PATH when it has none.
func initEnv(env []string) []string {
	out := slices.Clone(env)
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return out
		}
	}
	return append(out, defaultPath)
}

// mounts lists every filesystem of the sandbox besides its root. moat-init is the only
// thing that comes from the host; everything else is a fresh kernel filesystem.
func mounts(cs sandbox.ContainerSpec, gvisor bool) []specs.Mount {
	ptsOpts := []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}
	// gid 5 (tty) owns the pty slaves when it is mapped in the user namespace; runc
	// fails to mount devpts with an unmapped gid. gVisor's devpts is its own.
	if gvisor || cs.IDs.Size > 5 {
		ptsOpts = append(ptsOpts, "gid=5")
	}
	ms := []specs.Mount{
		// A procfs of the sandbox's own pid namespace (masked/readonly paths below).
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		// /dev is a small tmpfs; the runtime populates it with the standard nodes only.
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		// A private devpts instance: the sandbox's terminals are its own.
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: ptsOpts},
		// POSIX shared memory, bounded, not executable.
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=64m"}},
		// POSIX message queues of the sandbox's IPC namespace.
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		// sysfs, read-only. The kernel allows mounting it because the sandbox's network
		// namespace is owned by its user namespace.
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		// The sandbox's own cgroup (through the cgroup namespace), read-only: tools read
		// their memory and CPU limits there.
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
			Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		// /tmp is not a tmpfs: it stays on the sandbox's drive, which bounds its size
		// without charging the memory limit.
		//
		// moat-init, the only host file in the sandbox: read-only, no device nodes, no
		// setuid.
		{Destination: InitPath, Type: "bind", Source: cs.InitPath, Options: []string{"bind", "ro", "nosuid", "nodev"}},
	}
	return ms
}

// namespaces are the sandbox's own namespaces. Under runc/crun it joins the pinned user
// namespace U and network namespace S; under runsc the sentry is its own kernel with its own
// namespaces, and runsc itself runs inside S (host network mode) — neither appears here.
func namespaces(cs sandbox.ContainerSpec, gvisor bool, host hostFeatures) []specs.LinuxNamespace {
	ns := []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
	}
	if host.cgroupNS {
		ns = append(ns, specs.LinuxNamespace{Type: specs.CgroupNamespace})
	}
	if !gvisor {
		ns = append(ns,
			specs.LinuxNamespace{Type: specs.UserNamespace, Path: cs.UserNS},
			specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: cs.NetNS},
		)
	}
	return ns
}

// withOwnNetstack makes spec s (a runsc container's) run on gVisor's own network stack in
// the sandbox's network namespace netns: runsc --network=sandbox starts the sandbox process
// in the spec's network namespace and takes over its interface (address, routes) there, so
// the sandbox's TCP/IP is served by gVisor, not the host kernel. Without the entry runsc
// would make a new, empty namespace.
func withOwnNetstack(s *specs.Spec, netns string) {
	s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netns})
}

// cpuPeriod is the CFS period; the quota is CPUs times it.
const cpuPeriod = 100000

// resources are the sandbox's cgroup limits. They are written for cgroup v1 and v2 alike:
// runc and crun translate the v1 fields on a v2 host.
func resources(l sandbox.Limits, host hostFeatures) *specs.LinuxResources {
	mem := &specs.LinuxMemory{Limit: ptr(l.MemoryBytes)}
	switch {
	case host.cgroupV2:
		// memory+swap = memory: runtimes write memory.swap.max = swap - limit = 0.
		mem.Swap = ptr(l.MemoryBytes)
	case host.memsw:
		// v1: memory.memsw.limit_in_bytes = memory limit, so swap adds nothing. Only
		// when the kernel accounts swap; otherwise writing it fails (and there is no
		// swap to escape to).
		mem.Swap = ptr(l.MemoryBytes)
	}
	if !host.cgroupV2 && host.swappiness {
		// v1 only (v2 has no per-cgroup swappiness): never swap sandbox memory.
		mem.Swappiness = ptr(uint64(0))
	}
	quota := int64(math.Round(l.CPUs * cpuPeriod))
	if quota < 1000 {
		quota = 1000 // the kernel's minimum quota is 1ms
	}
	return &specs.LinuxResources{
		Memory: mem,
		CPU:    &specs.LinuxCPU{Quota: ptr(quota), Period: ptr(uint64(cpuPeriod))},
		Pids:   &specs.LinuxPids{Limit: ptr(l.Pids)},
		Devices: append([]specs.LinuxDeviceCgroup{
			// Deny every device, then allow the standard character devices (runc's own
			// defaults): nothing else can be opened even if a node appears.
			{Allow: false, Access: "rwm"},
		}, allowedDevices()...),
		BlockIO: blockIO(l, host.drive),
	}
}

// blockIO throttles reads and writes to the sandbox's drive (its own loop device) to
// l.IOBps bytes and l.IOIops requests per second each: blkio.throttle.* on cgroup v1,
// io.max on v2 (runc translates). Throttling, not weights: a weight needs the bfq scheduler
// on the device that queues, and loop devices have none; a throttle works at submission,
// whatever the scheduler. The loop driver issues the backing file's I/O in the submitter's
// cgroup, so the data filesystem's device sees the throttled rate. Buffered writes reach
// the drive through the host's flusher threads, which cgroup v1 does not attribute to the
// sandbox: the throttle holds for synced and direct I/O (and for all I/O on cgroup v2).
func blockIO(l sandbox.Limits, drive *device) *specs.LinuxBlockIO {
	if drive == nil || l.IOBps <= 0 && l.IOIops <= 0 {
		return nil
	}
	b := &specs.LinuxBlockIO{}
	if l.IOBps > 0 {
		t := []specs.LinuxThrottleDevice{{Rate: uint64(l.IOBps)}}
		t[0].Major, t[0].Minor = drive.major, drive.minor
		b.ThrottleReadBpsDevice, b.ThrottleWriteBpsDevice = t, slices.Clone(t)
	}
	if l.IOIops > 0 {
		t := []specs.LinuxThrottleDevice{{Rate: uint64(l.IOIops)}}
		t[0].Major, t[0].Minor = drive.major, drive.minor
		b.ThrottleReadIOPSDevice, b.ThrottleWriteIOPSDevice = t, slices.Clone(t)
	}
	return b
}

func allowedDevices() []specs.LinuxDeviceCgroup {
	c := func(major, minor int64) specs.LinuxDeviceCgroup {
		d := specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: ptr(major), Access: "rwm"}
		if minor >= 0 {
			d.Minor = ptr(minor)
		}
		return d
	}
	return []specs.LinuxDeviceCgroup{
		c(1, 3),    // /dev/null
		c(1, 5),    // /dev/zero
		c(1, 7),    // /dev/full
		c(1, 8),    // /dev/random
		c(1, 9),    // /dev/urandom
		c(5, 0),    // /dev/tty
		c(5, 2),    // /dev/ptmx
		c(136, -1), // /dev/pts/*
	}
}

func ptr[T any](v T) *T { return &v }

// CgroupMode is the host's cgroup layout.
type CgroupMode int

const (
	CgroupUnknown CgroupMode = iota
	// CgroupLegacy: only v1 hierarchies.
	CgroupLegacy
	// CgroupHybrid: v1 hierarchies plus a v2 mount at /sys/fs/cgroup/unified.
	CgroupHybrid
	// CgroupUnified: /sys/fs/cgroup is cgroup v2.
	CgroupUnified
)

func (m CgroupMode) String() string {
	switch m {
	case CgroupLegacy:
		return "legacy (cgroup v1)"
	case CgroupHybrid:
		return "hybrid (cgroup v1 + v2 at /sys/fs/cgroup/unified)"
	case CgroupUnified:
		return "unified (cgroup v2)"
	}
	return "unknown"
}

// DetectCgroupMode reports the host's cgroup layout from the filesystem types of
// /sys/fs/cgroup and /sys/fs/cgroup/unified.
func DetectCgroupMode() CgroupMode {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return CgroupUnknown
	}
	switch st.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		return CgroupUnified
	case unix.TMPFS_MAGIC:
		if err := unix.Statfs("/sys/fs/cgroup/unified", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return CgroupHybrid
		}
		return CgroupLegacy
	}
	return CgroupUnknown
}
