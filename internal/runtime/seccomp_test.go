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
	if dup := intersect(allowedSyscalls, forbiddenSyscalls); len(dup) > 0 {
		t.Fatalf("both allowed and forbidden: %v", dup)
	}
	for _, rt := range Names {
		p := seccompProfile(rt)
		for _, name := range append(slices.Clone(mustDeny), forbiddenSyscalls...) {
			if r := allowRules(p, name); len(r) > 0 {
				t.Errorf("%s profile allows %s: %+v", rt, name, r)
			}
		}
		for _, name := range mustDeny {
			if !slices.Contains(forbiddenSyscalls, name) {
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
	for _, n := range allowedSyscalls {
		if !nameRE.MatchString(n) {
			t.Errorf("bad syscall name %q", n)
		}
		if seen[n] {
			t.Errorf("%s listed twice", n)
		}
		seen[n] = true
	}
	for _, rt := range Names {
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

		// socket: only the listed families, each by equality.
		var fams []uint64
		for _, r := range allowRules(p, "socket") {
			if len(r.Args) != 1 || r.Args[0].Index != 0 || r.Args[0].Op != specs.OpEqualTo {
				t.Errorf("%s: socket rule %+v", rt, r)
				continue
			}
			fams = append(fams, r.Args[0].Value)
		}
		slices.Sort(fams)
		if !slices.Equal(fams, []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}) {
			t.Errorf("%s: socket families %v", rt, fams)
		}
		for _, bad := range []uint64{unix.AF_PACKET, unix.AF_VSOCK, unix.AF_ALG, unix.AF_KEY} {
			if slices.Contains(fams, bad) {
				t.Errorf("%s: socket family %d allowed", rt, bad)
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
			t.Errorf("%s: personalities %x", rt, pers)
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
