// Command testinit stands in for moat-init in the runtime tests: it reports what the
// sandbox looks like from inside (ids, capabilities, seccomp, which forbidden system calls
// fail and how) on stdout, prints READY, and sleeps until killed.
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "whoami" {
		// Run as a setuid-root copy by an unprivileged user: does setuid elevate?
		fmt.Printf("uid=%d,euid=%d\n", os.Getuid(), os.Geteuid())
		return
	}
	fmt.Printf("uid=%d gid=%d pid=%d\n", os.Getuid(), os.Getgid(), os.Getpid())
	if b, err := os.ReadFile("/proc/self/uid_map"); err == nil {
		fmt.Printf("uid_map=%s\n", strings.Join(strings.Fields(string(b)), " "))
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			for _, k := range []string{"Seccomp:", "CapEff:", "CapBnd:", "CapPrm:", "CapInh:", "CapAmb:", "NoNewPrivs:"} {
				if strings.HasPrefix(l, k) {
					fmt.Printf("status %s\n", strings.Join(strings.Fields(l), " "))
				}
			}
		}
	}
	// moat-init's access token comes on stdin (ContainerSpec.InitInput).
	in, err := io.ReadAll(io.LimitReader(os.Stdin, 4096))
	fmt.Printf("stdin=%s\n", in)
	if err != nil {
		fmt.Printf("stdin error: %v\n", err)
	}
	environ, _ := os.ReadFile("/proc/self/environ")
	fmt.Printf("stdin in environ: %v\n", len(in) > 0 && bytes.Contains(environ, in))
	if h, err := os.Hostname(); err == nil {
		fmt.Printf("hostname=%s\n", h)
	}
	for _, p := range []string{"/.moat/moat-init", "/etc/passwd", "/usr/bin"} {
		_, err := os.Stat(p)
		fmt.Printf("stat %s %v\n", p, err == nil)
	}
	// A file on the root (the drive's upper layer; gVisor mounts its own tmpfs on /tmp),
	// whose host owner the tests check.
	_ = os.WriteFile("/written", []byte("x"), 0o644)
	if err := os.WriteFile("/tmp/written", []byte("x"), 0o644); err != nil {
		fmt.Printf("write /tmp: %v\n", err)
	} else {
		fmt.Printf("write /tmp: ok\n")
	}
	probe := func(name string, trap uintptr, a ...uintptr) {
		var args [6]uintptr
		copy(args[:], a)
		r, _, e := syscall.RawSyscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
		if trap == syscall.SYS_CLONE && e == 0 && r == 0 {
			syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0) // the child of a clone that should have failed
		}
		res := "ok"
		if e != 0 {
			res = errnoName(e)
		} else if name == "socket_packet" || name == "userfaultfd" || name == "io_uring_setup" || name == "memfd_secret" || name == "fanotify_init" {
			syscall.Close(int(r))
		}
		fmt.Printf("probe %s %s\n", name, res)
	}
	var params [120]byte
	probe("unshare_user", syscall.SYS_UNSHARE, syscall.CLONE_NEWUSER)
	probe("unshare_net", syscall.SYS_UNSHARE, syscall.CLONE_NEWNET)
	probe("mount", syscall.SYS_MOUNT, cstr("none"), cstr("/tmp"), cstr("tmpfs"), 0, 0)
	probe("clone3", 435, 0, 0)
	probe("clone_newuser", syscall.SYS_CLONE, syscall.CLONE_NEWUSER|uintptr(syscall.SIGCHLD))
	probe("io_uring_setup", 425, 1, uintptr(unsafe.Pointer(&params[0])))
	probe("socket_packet", syscall.SYS_SOCKET, syscall.AF_PACKET, syscall.SOCK_RAW, 0)
	probe("socket_inet", syscall.SYS_SOCKET, syscall.AF_INET, syscall.SOCK_STREAM, 0)
	probe("bpf", 321, 0, 0, 0)
	probe("keyctl", 250, 0, 0, 0)
	probe("userfaultfd", 323, 0)
	probe("memfd_secret", 447, 0)
	probe("fanotify_init", 300, 0, 0)
	probe("personality_rie", 135, 0x0400000)
	probe("ptrace_peek", syscall.SYS_PTRACE, syscall.PTRACE_PEEKDATA, 1, 0)
	probe("perf_event_open", 298, 0, 0, 0, 0, 0)
	probe("sethostname", syscall.SYS_SETHOSTNAME, cstr("x"), 1)
	// setgroups is what sudo, su and login call (initgroups); a user namespace created
	// with setgroups "deny" refuses it.
	probe("setgroups", syscall.SYS_SETGROUPS, 0, 0)
	if b, err := os.ReadFile("/proc/self/setgroups"); err == nil {
		fmt.Printf("setgroups_file=%s\n", strings.TrimSpace(string(b)))
	}
	// Ordinary glibc programs: fork/exec through a shell, and threads (glibc >= 2.34
	// tries clone3 first and falls back to clone only on ENOSYS).
	run := func(name string, argv ...string) {
		if _, err := os.Stat(argv[0]); err != nil {
			fmt.Printf("exec %s missing\n", name)
			return
		}
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		res := strings.Join(strings.Fields(string(out)), "_")
		if err != nil {
			res = "error:" + err.Error() + ":" + res
		}
		fmt.Printf("exec %s %s\n", name, res)
	}
	run("sh", "/bin/sh", "-c", "echo shell-ok")
	run("python_thread", "/usr/bin/python3", "-c",
		"import threading; t = threading.Thread(target=print, args=('thread-ok',)); t.start(); t.join()")
	// setuid (what sudo needs): the test put a setuid-root copy of this program at
	// /suid-whoami; run it as uid 1000.
	if _, err := os.Stat("/suid-whoami"); err == nil {
		cmd := exec.Command("/suid-whoami", "whoami")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, NoSetGroups: true}}
		out, err := cmd.CombinedOutput()
		res := strings.TrimSpace(string(out))
		if err != nil {
			res = "error:" + err.Error() + ":" + res
		}
		fmt.Printf("exec suid %s\n", res)
	}
	fmt.Println("READY")
	for {
		time.Sleep(time.Hour)
	}
}

func cstr(s string) uintptr {
	b := append([]byte(s), 0)
	return uintptr(unsafe.Pointer(&b[0]))
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EPERM:
		return "EPERM"
	case syscall.ENOSYS:
		return "ENOSYS"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EFAULT:
		return "EFAULT"
	case syscall.ESRCH:
		return "ESRCH"
	case syscall.EAFNOSUPPORT:
		return "EAFNOSUPPORT"
	case syscall.EOPNOTSUPP:
		return "EOPNOTSUPP"
	}
	return fmt.Sprintf("errno%d", int(e))
}
