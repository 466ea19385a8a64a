package runtime

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The sandbox's seccomp profile: one allowlist, written as data. It starts from the set of
// system calls an ordinary Linux userland (glibc, musl, Go, Python, Node, the JVM, git,
// compilers, package managers) uses, which is close to Docker's default profile, and is
// stricter than Docker in the places listed in forbiddenSyscalls' comments. Everything not
// listed fails with EPERM.
//
// Names this host's libseccomp does not know are skipped by runc and crun (they still fail
// with EPERM/ENOSYS, which is the safe direction), so new system calls can be listed
// before every host knows them.

// errnoEPERM, errnoENOSYS and errnoEPROTONOSUPPORT are the errno values the filter returns.
var (
	errnoEPERM           = uint(unix.EPERM)
	errnoENOSYS          = uint(unix.ENOSYS)
	errnoEPROTONOSUPPORT = uint(unix.EPROTONOSUPPORT)
)

// cloneNamespaceFlags are the clone(2) flags that create namespaces. clone is allowed only
// when none of them is set: creating namespaces (even a user namespace, which needs no
// privilege) multiplies the kernel attack surface reachable from the sandbox and would let
// a process regain a full capability set inside a namespace of its own.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

// socketRules are the (family, type, protocol) combinations socket(2) may create; every
// other combination fails (EPERM, or EPROTONOSUPPORT for netlink protocols, see
// seccompProfile). A sandbox speaks TCP, UDP, ICMP echo (ping sockets, where the network
// namespace's ping_group_range allows them), local sockets and routing netlink (iproute2,
// glibc's getaddrinfo) only:
//   - AF_PACKET (raw link-layer access, the source of several kernel escapes), AF_VSOCK
//     (the hypervisor channel), AF_ALG, AF_KEY, AF_BLUETOOTH and the other exotic
//     families are refused;
//   - within AF_INET/AF_INET6, MPTCP, SCTP, DCCP, UDP-Lite, raw sockets and every other
//     protocol are refused: each is kernel code (often a loadable module the kernel would
//     load on demand) the sandbox has no use for;
//   - within AF_NETLINK, only NETLINK_ROUTE: audit, uevents, sock_diag, netfilter,
//     generic netlink and the rest reach host-wide or rarely-audited kernel code.
//
// The type is compared as type & SOCK_TYPE_MASK, so SOCK_NONBLOCK and SOCK_CLOEXEC may be
// set (the kernel refuses any other flag). This is an allowlist by value because runc ORs
// several comparisons of one argument, so a list of "!=" rules would allow everything.
func socketRules() []socketRule {
	return []socketRule{
		{family: unix.AF_UNIX, anyType: true, anyProtocol: true},
		{family: unix.AF_INET, sockType: unix.SOCK_STREAM, protocol: 0},
		{family: unix.AF_INET, sockType: unix.SOCK_STREAM, protocol: unix.IPPROTO_TCP},
		{family: unix.AF_INET, sockType: unix.SOCK_DGRAM, protocol: 0},
		{family: unix.AF_INET, sockType: unix.SOCK_DGRAM, protocol: unix.IPPROTO_UDP},
		{family: unix.AF_INET, sockType: unix.SOCK_DGRAM, protocol: unix.IPPROTO_ICMP},
		{family: unix.AF_INET6, sockType: unix.SOCK_STREAM, protocol: 0},
		{family: unix.AF_INET6, sockType: unix.SOCK_STREAM, protocol: unix.IPPROTO_TCP},
		{family: unix.AF_INET6, sockType: unix.SOCK_DGRAM, protocol: 0},
		{family: unix.AF_INET6, sockType: unix.SOCK_DGRAM, protocol: unix.IPPROTO_UDP},
		{family: unix.AF_INET6, sockType: unix.SOCK_DGRAM, protocol: unix.IPPROTO_ICMPV6},
		{family: unix.AF_NETLINK, anyType: true, protocol: unix.NETLINK_ROUTE},
	}
}

// socketRule is one entry of socketRules; anyType and anyProtocol leave that argument
// unchecked.
type socketRule struct {
	family, sockType, protocol uint64
	anyType, anyProtocol       bool
}

// sockTypeMask is the kernel's SOCK_TYPE_MASK: the bits of socket(2)'s type argument that
// hold the type; above them are the SOCK_NONBLOCK and SOCK_CLOEXEC flags.
const sockTypeMask = 0xf

// args renders r as seccomp comparisons (ANDed: each on its own argument).
func (r socketRule) args() []specs.LinuxSeccompArg {
	a := []specs.LinuxSeccompArg{{Index: 0, Value: r.family, Op: specs.OpEqualTo}}
	if !r.anyType {
		a = append(a, specs.LinuxSeccompArg{Index: 1, Value: sockTypeMask, ValueTwo: r.sockType, Op: specs.OpMaskedEqual})
	}
	if !r.anyProtocol {
		a = append(a, specs.LinuxSeccompArg{Index: 2, Value: r.protocol, Op: specs.OpEqualTo})
	}
	return a
}

// personalities are the personality(2) values a process may set: the Linux default, the
// same with UNAME26 or ADDR_NO_RANDOMIZE (used by setarch and some debuggers), and the
// query value 0xffffffff. Other flags (READ_IMPLIES_EXEC, MMAP_PAGE_ZERO) weaken the
// process' memory protections.
func personalities() []uint64 {
	return []uint64{0x0, 0x0008, 0x20000, 0x20008, 0xffffffff}
}

// allowedSyscalls may be called with any arguments.
func allowedSyscalls() []string {
	return []string{
		// file descriptors and files
		"access", "chdir", "chmod", "chown", "chown32", "close", "close_range", "copy_file_range",
		"creat", "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fadvise64_64",
		"fallocate", "fchdir", "fchmod", "fchmodat", "fchmodat2", "fchown", "fchown32", "fchownat",
		"fcntl", "fcntl64", "fdatasync", "flock", "fstat", "fstat64", "fstatat64", "fstatfs",
		"fstatfs64", "fsync", "ftruncate", "ftruncate64", "futimesat", "getcwd", "getdents",
		"getdents64", "lchown", "lchown32", "link", "linkat", "_llseek", "lseek", "lstat",
		"lstat64", "mkdir", "mkdirat", "newfstatat", "open", "openat", "openat2", "pread64",
		"preadv", "preadv2", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
		"readlinkat", "readv", "rename", "renameat", "renameat2", "rmdir", "sendfile",
		"sendfile64", "splice", "stat", "stat64", "statfs", "statfs64", "statx", "symlink",
		"symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate", "truncate64", "umask",
		"unlink", "unlinkat", "utime", "utimensat", "utimensat_time64", "utimes", "vmsplice",
		"write", "writev", "cachestat",
		// device nodes: mknod is harmless without CAP_MKNOD (only FIFOs and sockets can be
		// made), and the devices cgroup refuses the rest.
		"mknod", "mknodat",
		// extended attributes (file capabilities and ACLs; namespaced by the user namespace)
		"fgetxattr", "flistxattr", "fremovexattr", "fsetxattr", "getxattr", "lgetxattr",
		"listxattr", "llistxattr", "lremovexattr", "lsetxattr", "removexattr", "setxattr",
		"getxattrat", "listxattrat", "removexattrat", "setxattrat",
		// polling, events, inotify, pipes, signals and timers
		"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait",
		"epoll_pwait2", "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "inotify_add_watch",
		"inotify_init", "inotify_init1", "inotify_rm_watch", "pipe", "pipe2", "poll", "ppoll",
		"ppoll_time64", "pselect6", "pselect6_time64", "select", "_newselect", "alarm",
		"getitimer", "setitimer", "pause", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
		"rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait",
		"rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sigaltstack", "signalfd", "signalfd4",
		"sigprocmask", "sigreturn", "restart_syscall", "kill", "tgkill", "tkill",
		"pidfd_open", "pidfd_send_signal", "timer_create", "timer_delete", "timer_getoverrun",
		"timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64", "timerfd_create",
		"timerfd_gettime", "timerfd_gettime64", "timerfd_settime", "timerfd_settime64",
		// clocks: reading only. Setting the clock is refused (CAP_SYS_TIME is not granted
		// either); adjtimex/clock_adjtime are left out because they can write too.
		"clock_getres", "clock_getres_time64", "clock_gettime", "clock_gettime64",
		"clock_nanosleep", "clock_nanosleep_time64", "gettimeofday", "nanosleep", "time", "times",
		// memory
		"brk", "madvise", "membarrier", "memfd_create", "mincore", "mlock", "mlock2", "mlockall",
		"mmap", "mmap2", "mprotect", "mremap", "msync", "munlock", "munlockall", "munmap",
		"pkey_alloc", "pkey_free", "pkey_mprotect", "remap_file_pages", "map_shadow_stack",
		"mseal",
		// processes and threads. clone is in argumentRules (no namespace flags); clone3 is in
		// errnoRules (ENOSYS, so libc falls back to clone, whose flags seccomp can inspect).
		"execve", "execveat", "exit", "exit_group", "fork", "vfork", "wait4", "waitid", "waitpid",
		"set_robust_list", "get_robust_list", "set_tid_address", "rseq", "futex", "futex_time64",
		"futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "getpid", "getppid", "gettid",
		"getpgid", "getpgrp", "setpgid", "getsid", "setsid", "getpriority", "setpriority",
		"ioprio_get", "ioprio_set", "sched_getaffinity", "sched_getattr", "sched_getparam",
		"sched_get_priority_max", "sched_get_priority_min", "sched_getscheduler",
		"sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_setaffinity",
		"sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "getcpu",
		"getrlimit", "ugetrlimit", "setrlimit", "prlimit64", "getrusage", "prctl", "arch_prctl",
		"get_thread_area", "set_thread_area", "process_mrelease",
		// seccomp: a process may add its own, stricter filters (browsers and sandboxing
		// tools do); filters only ever narrow what is allowed.
		"seccomp",
		// landlock: unprivileged self-sandboxing, only narrows access.
		"landlock_add_rule", "landlock_create_ruleset", "landlock_restrict_self",
		// credentials: all within the sandbox's user namespace (a 65536-id range of
		// unprivileged host ids); needed by sudo, su, login, package managers.
		"capget", "capset", "getegid", "getegid32", "geteuid", "geteuid32", "getgid", "getgid32",
		"getgroups", "getgroups32", "getresgid", "getresgid32", "getresuid", "getresuid32",
		"getuid", "getuid32", "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid",
		"setgid32", "setgroups", "setgroups32", "setregid", "setregid32", "setresgid",
		"setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32", "setuid", "setuid32",
		// chroot: CAP_SYS_CHROOT is granted (build tools and package managers use it); it
		// cannot leave the sandbox's mount namespace.
		"chroot",
		// sockets. socket and socketpair are allowed by argument (socketRules). socketcall, the
		// 32-bit multiplexer, is left out: its arguments live in memory where seccomp cannot
		// see them, so it would bypass the family allowlist (32-bit libcs use the direct
		// calls on kernels >= 4.3).
		"accept", "accept4", "bind", "connect", "getpeername", "getsockname", "getsockopt",
		"listen", "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg", "send",
		"sendmmsg", "sendmsg", "sendto", "setsockopt", "shutdown",
		// System V and POSIX IPC: private to the sandbox's IPC namespace
		"ipc", "msgctl", "msgget", "msgrcv", "msgsnd", "semctl", "semget", "semop", "semtimedop",
		"semtimedop_time64", "shmat", "shmctl", "shmdt", "shmget", "mq_getsetattr", "mq_notify",
		"mq_open", "mq_timedreceive", "mq_timedreceive_time64", "mq_timedsend",
		"mq_timedsend_time64", "mq_unlink",
		// asynchronous I/O (the old aio interface; io_uring is refused)
		"io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
		"io_setup", "io_submit",
		// misc
		"getrandom", "ioctl", "sysinfo", "uname",
	}
}

// forbiddenSyscalls must never be allowed, whatever the arguments. The profile builder
// checks that no rule allows them (a programming error panics in tests), and the tests
// check it again on the generated spec. Each group says why.
func forbiddenSyscalls() []string {
	return []string{
		// mounting and the new mount API: the mount table is the filesystem boundary.
		"mount", "umount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "fspick",
		"move_mount", "open_tree", "mount_setattr", "statmount", "listmount",
		// namespaces: creating or joining them (clone with namespace flags is refused too).
		"unshare", "setns",
		// BPF, perf and userfaultfd: large kernel attack surfaces, common in exploits.
		"bpf", "perf_event_open", "userfaultfd",
		// io_uring: bypasses seccomp for the operations it performs; many kernel CVEs.
		"io_uring_setup", "io_uring_enter", "io_uring_register",
		// the kernel keyring is not namespaced.
		"keyctl", "add_key", "request_key",
		// kernel modules and kexec.
		"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"create_module", "get_kernel_syms", "query_module",
		// file handles bypass path permissions (the "shocker" escape).
		"open_by_handle_at", "name_to_handle_at",
		// host-wide state: swap, reboot, the kernel log, process accounting, the clock,
		// quotas, profiling.
		"swapon", "swapoff", "reboot", "syslog", "acct", "settimeofday", "stime",
		"clock_settime", "clock_settime64", "adjtimex", "clock_adjtime", "clock_adjtime64",
		"quotactl", "quotactl_fd", "lookup_dcookie", "nfsservctl", "_sysctl", "sethostname",
		"setdomainname", "vhangup",
		// raw hardware access and legacy x86 modes.
		"vm86", "vm86old", "iopl", "ioperm", "modify_ldt", "uselib",
		// debugging other processes: ptrace and cross-process memory access. Docker allows
		// ptrace on kernels >= 4.8; moat refuses it: it is the classic tool to tamper with
		// another process of the sandbox (e.g. moat-init), and strace/gdb are rarely needed
		// by agents.
		"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
		"process_madvise",
		// NUMA memory policy (CAP_SYS_NICE in Docker) and fanotify (host-wide watching).
		"mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node", "migrate_pages",
		"move_pages", "fanotify_init", "fanotify_mark",
		// secret memory areas hide memory from the kernel (and from moat's inspection).
		"memfd_secret",
		// the 32-bit socket multiplexer (see allowedSyscalls).
		"socketcall",
	}
}

// seccompProfile returns the sandbox's seccomp profile for the named runtime. Every call
// returns a fresh value (callers may modify it).
func seccompProfile(runtimeName string) *specs.LinuxSeccomp {
	p := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &errnoEPERM,
		// x86_64 with its 32-bit (x86) and x32 ABIs; aarch64 with 32-bit arm. Listing
		// the compat ABIs makes the filter apply to them too instead of killing them.
		Architectures: []specs.Arch{
			specs.ArchX86_64, specs.ArchX86, specs.ArchX32,
			specs.ArchAARCH64, specs.ArchARM,
		},
	}
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
		Names:  append([]string(nil), allowedSyscalls()...),
		Action: specs.ActAllow,
	})
	// clone without namespace flags. On x86 and arm the flags are argument 0.
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
		Names:  []string{"clone"},
		Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{
			Index: 0, Value: cloneNamespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual,
		}},
	})
	// clone3 passes its flags in memory, out of seccomp's sight: answer ENOSYS so that
	// glibc and Go fall back to clone. (EPERM would not do: glibc >= 2.34 falls back only
	// on ENOSYS, and every pthread_create would fail.)
	clone3 := specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &errnoENOSYS}
	if runtimeName == "runsc" {
		// gVisor ignores a rule's errnoRet and answers EPERM, which breaks threads, so
		// the call is let through to its kernel: gVisor 2022-12 answers ENOSYS itself, a
		// current one implements clone3. Namespaces inside gVisor are the sentry's own.
		clone3 = specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActAllow}
	}
	p.Syscalls = append(p.Syscalls, clone3)
	// One rule per allowed combination: separate rules are ORed.
	for _, r := range socketRules() {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Names: []string{"socket"}, Action: specs.ActAllow, Args: r.args(),
		})
	}
	// Other netlink protocols fail as on a kernel without them: libaudit (sudo, PAM) then
	// treats audit as not configured instead of warning about EPERM. The rule cannot
	// overlap the NETLINK_ROUTE rule above.
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
		Names: []string{"socket"}, Action: specs.ActErrno, ErrnoRet: &errnoEPROTONOSUPPORT,
		Args: []specs.LinuxSeccompArg{
			{Index: 0, Value: unix.AF_NETLINK, Op: specs.OpEqualTo},
			{Index: 2, Value: unix.NETLINK_ROUTE, Op: specs.OpNotEqual},
		},
	})
	// socketpair creates sockets of its family too (loading a protocol's module before
	// failing with EOPNOTSUPP): only AF_UNIX implements it.
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
		Names: []string{"socketpair"}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: 0, Value: unix.AF_UNIX, Op: specs.OpEqualTo}},
	})
	for _, v := range personalities() {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
			Names:  []string{"personality"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 0, Value: v, Op: specs.OpEqualTo}},
		})
	}
	return p
}
