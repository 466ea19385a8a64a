package runtime

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// mustDeny must never be allowed by the profile, whatever the runtime.
var mustDeny = []string{
	"mount", "umount2", "pivot_root", "bpf", "keyctl", "add_key", "request_key", "perf_event_open",
	"userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "unshare", "setns", "ptrace",
	"open_by_handle_at", "name_to_handle_at", "fsopen", "fsmount", "fsconfig", "fspick",
	"move_mount", "open_tree", "mount_setattr", "swapon", "swapoff", "reboot", "syslog", "acct",
	"settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "lookup_dcookie", "quotactl",
	"vm86", "iopl", "ioperm", "create_module", "get_kernel_syms", "query_module", "uselib",
	"process_vm_writev", "socketcall",
}

// allowRules returns the rules that let name through, per runtime profile.
func allowRules(p *specs.LinuxSeccomp, name string) []specs.LinuxSyscall {
	var out []specs.LinuxSyscall
	for _, r := range p.Syscalls {
		if r.Action == specs.ActAllow && slices.Contains(r.Names, name) {
			out = append(out, r)
		}
	}
	return out
}

func TestSeccompForbidden(t *testing.T) {
	if dup := intersect(allowedSyscalls(), forbiddenSyscalls()); len(dup) > 0 {
		t.Fatalf("both allowed and forbidden: %v", dup)
	}
	for _, rt := range Names() {
		p := seccompProfile(rt)
		for _, name := range append(slices.Clone(mustDeny), forbiddenSyscalls()...) {
			if r := allowRules(p, name); len(r) > 0 {
				t.Errorf("%s profile allows %s: %+v", rt, name, r)
			}
		}
		for _, name := range mustDeny {
			if !slices.Contains(forbiddenSyscalls(), name) {
				t.Errorf("%s is not in forbiddenSyscalls", name)
			}
		}
	}
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func TestSeccompShape(t *testing.T) {
	nameRE := regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	seen := map[string]bool{}
	for _, n := range allowedSyscalls() {
		if !nameRE.MatchString(n) {
			t.Errorf("bad syscall name %q", n)
		}
		if seen[n] {
			t.Errorf("%s listed twice", n)
		}
		seen[n] = true
	}
	for _, rt := range Names() {
		p := seccompProfile(rt)
		if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != uint(unix.EPERM) {
			t.Errorf("%s: default %s %v", rt, p.DefaultAction, p.DefaultErrnoRet)
		}
		for _, a := range []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32, specs.ArchAARCH64} {
			if !slices.Contains(p.Architectures, a) {
				t.Errorf("%s: architecture %s missing", rt, a)
			}
		}
		for _, r := range p.Syscalls {
			if r.Action != specs.ActAllow && r.Action != specs.ActErrno {
				t.Errorf("%s: unexpected action %s", rt, r.Action)
			}
		}

		// clone only without namespace flags.
		clone := allowRules(p, "clone")
		if len(clone) != 1 || len(clone[0].Args) != 1 {
			t.Fatalf("%s: clone rules %+v", rt, clone)
		}
		want := specs.LinuxSeccompArg{Index: 0, Op: specs.OpMaskedEqual, ValueTwo: 0,
			Value: unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
				unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP}
		if clone[0].Args[0] != want {
			t.Errorf("%s: clone arg %+v, want %+v", rt, clone[0].Args[0], want)
		}

		// clone3: ENOSYS, so libc falls back to clone (runsc: gVisor's own ENOSYS).
		var clone3 []specs.LinuxSyscall
		for _, r := range p.Syscalls {
			if slices.Contains(r.Names, "clone3") {
				clone3 = append(clone3, r)
			}
		}
		if len(clone3) != 1 {
			t.Fatalf("%s: clone3 rules %+v", rt, clone3)
		}
		if rt == "runsc" {
			if clone3[0].Action != specs.ActAllow {
				t.Errorf("runsc: clone3 %+v", clone3[0])
			}
		} else if clone3[0].Action != specs.ActErrno || clone3[0].ErrnoRet == nil || *clone3[0].ErrnoRet != 38 {
			t.Errorf("%s: clone3 %+v", rt, clone3[0])
		}

		// socket and socketpair: see TestSeccompSockets. Every socket rule compares the
		// family by equality.
		for _, r := range p.Syscalls {
			if !slices.Contains(r.Names, "socket") && !slices.Contains(r.Names, "socketpair") {
				continue
			}
			if len(r.Names) != 1 || len(r.Args) == 0 || r.Args[0].Index != 0 || r.Args[0].Op != specs.OpEqualTo {
				t.Errorf("%s: socket rule %+v", rt, r)
			}
		}

		// personality: only the safe values.
		var pers []uint64
		for _, r := range allowRules(p, "personality") {
			if len(r.Args) != 1 || r.Args[0].Op != specs.OpEqualTo {
				t.Errorf("%s: personality rule %+v", rt, r)
				continue
			}
			pers = append(pers, r.Args[0].Value)
		}
		if !slices.Equal(pers, []uint64{0, 0x8, 0x20000, 0x20008, 0xffffffff}) {
			t.Errorf("%s: personalities() %x", rt, pers)
		}

		// Everyday calls stay allowed.
		for _, name := range []string{"read", "write", "openat", "execve", "futex", "mmap", "epoll_wait",
			"rseq", "setuid", "setgroups", "capset", "prctl", "wait4", "chroot", "getrandom"} {
			if len(allowRules(p, name)) == 0 {
				t.Errorf("%s: %s not allowed", rt, name)
			}
		}
	}
}

// TestSeccompJSON: the profile is valid runtime-spec JSON (strict decoding round trip).
func TestSeccompJSON(t *testing.T) {
	p := seccompProfile("runc")
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back specs.LinuxSeccomp
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*p, back) {
		t.Error("profile changed in a JSON round trip")
	}
	for _, want := range []string{`"defaultAction":"SCMP_ACT_ERRNO"`, `"SCMP_ARCH_X86_64"`, `"SCMP_CMP_MASKED_EQ"`, `"errnoRet":38`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("JSON lacks %s", want)
		}
	}
	// Fresh values: callers may modify them.
	p.Syscalls[0].Names[0] = "mount"
	if seccompProfile("runc").Syscalls[0].Names[0] == "mount" {
		t.Fatal("seccompProfile shares its slices")
	}
}

// TestSeccompSockets evaluates the generated profile (rules ORed, a rule's comparisons
// ANDed, as runc, crun and gVisor apply them) for socket(2) and socketpair(2) calls: TCP,
// UDP, ping sockets, AF_UNIX and routing netlink pass, with or without SOCK_NONBLOCK and
// SOCK_CLOEXEC; other protocols and families fail, the netlink ones with EPROTONOSUPPORT.
func TestSeccompSockets(t *testing.T) {
	const (
		flags         = unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC
		ipprotoMPTCP  = 262
		netlinkAudit  = 9
		netlinkUevent = 15
	)
	eperm, enoproto := int(unix.EPERM), int(unix.EPROTONOSUPPORT)
	cases := []struct {
		call                  string
		family, typ, protocol uint64
		want                  int // 0: allowed, else the errno
	}{
		{"socket", unix.AF_INET, unix.SOCK_STREAM, 0, 0},
		{"socket", unix.AF_INET, unix.SOCK_STREAM | flags, unix.IPPROTO_TCP, 0},
		{"socket", unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, 0, 0},
		{"socket", unix.AF_INET6, unix.SOCK_STREAM | unix.SOCK_NONBLOCK, unix.IPPROTO_TCP, 0},
		{"socket", unix.AF_INET, unix.SOCK_DGRAM, 0, 0},
		{"socket", unix.AF_INET, unix.SOCK_DGRAM | flags, unix.IPPROTO_UDP, 0},
		{"socket", unix.AF_INET6, unix.SOCK_DGRAM | flags, unix.IPPROTO_UDP, 0},
		{"socket", unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP, 0},
		{"socket", unix.AF_INET6, unix.SOCK_DGRAM | flags, unix.IPPROTO_ICMPV6, 0},
		{"socket", unix.AF_UNIX, unix.SOCK_STREAM, 0, 0},
		{"socket", unix.AF_UNIX, unix.SOCK_SEQPACKET | flags, 0, 0},
		{"socket", unix.AF_NETLINK, unix.SOCK_RAW | flags, unix.NETLINK_ROUTE, 0},
		{"socket", unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_ROUTE, 0},
		{"socketpair", unix.AF_UNIX, unix.SOCK_STREAM | flags, 0, 0},

		{"socket", unix.AF_INET, unix.SOCK_STREAM, ipprotoMPTCP, eperm},
		{"socket", unix.AF_INET6, unix.SOCK_STREAM | flags, ipprotoMPTCP, eperm},
		{"socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP, eperm},
		{"socket", unix.AF_INET, unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP, eperm},
		{"socket", unix.AF_INET, unix.SOCK_SEQPACKET, 0, eperm},
		{"socket", unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE, eperm},
		{"socket", unix.AF_INET, unix.SOCK_DCCP, unix.IPPROTO_DCCP, eperm},
		{"socket", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP, eperm},
		{"socket", unix.AF_INET, unix.SOCK_RAW, 0, eperm},
		{"socket", unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_TCP, eperm},
		{"socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_UDP, eperm},
		{"socket", unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6, eperm},
		{"socket", unix.AF_INET, unix.SOCK_STREAM, 1<<32 | unix.IPPROTO_TCP, eperm},
		{"socket", unix.AF_PACKET, unix.SOCK_RAW, 0, eperm},
		{"socket", unix.AF_VSOCK, unix.SOCK_STREAM, 0, eperm},
		{"socket", unix.AF_ALG, unix.SOCK_SEQPACKET, 0, eperm},
		{"socket", unix.AF_KEY, unix.SOCK_RAW, 2, eperm},
		{"socket", unix.AF_NETLINK, unix.SOCK_RAW, netlinkAudit, enoproto},
		{"socket", unix.AF_NETLINK, unix.SOCK_DGRAM | flags, netlinkUevent, enoproto},
		{"socket", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG, enoproto},
		{"socket", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC, enoproto},
		{"socketpair", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP, eperm},
		{"socketpair", unix.AF_NETLINK, unix.SOCK_RAW, 0, eperm},
	}
	for _, rt := range Names() {
		p := seccompProfile(rt)
		for _, c := range cases {
			if got := evalSeccomp(t, p, c.call, c.family, c.typ, c.protocol); got != c.want {
				t.Errorf("%s: %s(%d, %#x, %d) = %d, want %d", rt, c.call, c.family, c.typ, c.protocol, got, c.want)
			}
		}
	}
}

// evalSeccomp answers a call as the profile does: 0 if allowed, else its errno. It fails
// the test if a call matches several rules of which one does not allow it (the profile
// keeps such rules disjoint rather than rely on libseccomp's precedence).
func evalSeccomp(t *testing.T, p *specs.LinuxSeccomp, name string, args ...uint64) int {
	t.Helper()
	var matched []specs.LinuxSyscall
	for _, r := range p.Syscalls {
		if !slices.Contains(r.Names, name) {
			continue
		}
		ok := true
		for _, a := range r.Args {
			v := args[a.Index]
			switch a.Op {
			case specs.OpEqualTo:
				ok = ok && v == a.Value
			case specs.OpNotEqual:
				ok = ok && v != a.Value
			case specs.OpMaskedEqual:
				ok = ok && v&a.Value == a.ValueTwo
			default:
				t.Fatalf("rule %+v: operator %s not evaluated here", r, a.Op)
			}
		}
		if ok {
			matched = append(matched, r)
		}
	}
	r := specs.LinuxSyscall{Action: p.DefaultAction, ErrnoRet: p.DefaultErrnoRet}
	switch len(matched) {
	case 0:
	case 1:
		r = matched[0]
	default:
		for _, m := range matched {
			if m.Action != specs.ActAllow {
				t.Fatalf("%s%v matches several rules, not all allowing: %+v", name, args, matched)
			}
		}
		r = matched[0]
	}
	if r.Action == specs.ActAllow {
		return 0
	}
	if r.ErrnoRet == nil {
		return int(unix.EPERM)
	}
	return int(*r.ErrnoRet)
}
