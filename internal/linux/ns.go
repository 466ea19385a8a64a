// Package linux is the only home of raw Linux system calls in moat: namespace files,
// idmapped mounts, loop devices and bind mounts. Every function here is safe to call as
// root only and documents what it leaves behind on failure.
package linux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// IDRange is a contiguous mapping of container ids [0, Size) to host ids [Host, Host+Size).
type IDRange struct {
	Host uint32
	Size uint32
}

// NamespaceFiles are the bind-mounted namespace files of one sandbox.
type NamespaceFiles struct {
	User string // user namespace mapping container ids onto the sandbox's host range
	Net  string // network namespace owned by User
}

// Owner says which host uid owns the user namespaces CreateUserAndNetNS makes. The kernel
// charges its per-user counters (inotify instances and watches, POSIX message-queue bytes,
// user and other namespaces, processes) of everything inside a user namespace, at the top
// level, to the namespace's owner, and checks them there against the host's per-user maxima
// (fs.inotify.max_user_instances, RLIMIT_MSGQUEUE, ...).
type Owner int

const (
	// OwnerRange: the namespace belongs to the range's host base uid, so a sandbox's use
	// counts against a budget of its own and never against host root's or a peer's.
	OwnerRange Owner = iota
	// OwnerRoot: the namespace belongs to host root (the daemon), so every sandbox and every
	// root process on the host share one budget. Only for hosts where ProbeOwnerRange fails.
	OwnerRoot
)

// String is "range" or "root".
func (o Owner) String() string {
	if o == OwnerRoot {
		return "root"
	}
	return "range"
}

// CreateUserAndNetNS creates a user namespace with ids mapped as r (uid and gid alike) and a
// network namespace owned by it, and pins both by bind-mounting their nsfs files at
// files.User and files.Net (created if missing). owner says who owns the user namespace
// (see Owner). A short-lived holder process (`cat` reading a pipe) is in the namespaces
// until they are pinned; it is killed and reaped on every path. On error nothing stays
// mounted.
func CreateUserAndNetNS(files NamespaceFiles, r IDRange, owner Owner) error {
	var h *holder
	var err error
	if owner == OwnerRoot {
		h, err = startRootOwnedHolder(r)
	} else {
		h, err = startRangeOwnedHolder(r)
	}
	if err != nil {
		return err
	}
	defer h.stop()
	if err := BindNamespace(fmt.Sprintf("/proc/%d/ns/user", h.pid()), files.User); err != nil {
		return err
	}
	if err := BindNamespace(fmt.Sprintf("/proc/%d/ns/net", h.pid()), files.Net); err != nil {
		_ = UnmountFile(files.User)
		return err
	}
	return nil
}

// holder is a process (cat reading a pipe) that sits in new namespaces until they are pinned.
type holder struct {
	cmd   *exec.Cmd
	stdin *os.File // the holder exits at its EOF
}

func (h *holder) pid() int { return h.cmd.Process.Pid }

// stop ends the holder and reaps it. It may be called more than once.
func (h *holder) stop() {
	h.stdin.Close()
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// start starts cmd as a holder reading a new pipe, dying with the daemon.
func startHolder(cmd *exec.Cmd) (*holder, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	defer pr.Close()
	cmd.Stdin = pr
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("starting namespace holder: %w", err)
	}
	return &holder{cmd: cmd, stdin: pw}, nil
}

// startRootOwnedHolder clones the holder by root straight into a new user and network
// namespace, the maps written by os/exec before it runs.
func startRootOwnedHolder(r IDRange) (*holder, error) {
	cat, err := findProgram("cat", "coreutils")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cat)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Host), Size: int(r.Size)}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Host), Size: int(r.Size)}},
		// setgroups must stay allowed inside: sudo, su and login call it. The mapping
		// covers only the sandbox's own range, so dropping groups gains nothing.
		GidMappingsEnableSetgroups: true,
	}
	return startHolder(cmd)
}

// startRangeOwnedHolder runs util-linux unshare(1) as uid and gid r.Host (no supplementary
// groups) to unshare a user and a network namespace and exec the holder: the kernel makes a
// new user namespace's owner the euid of the process that creates it, and os/exec clones
// and unshares before it changes credentials. The holder echoes a byte written to its
// stdin, which proves the namespaces exist (unshare execs it only after unshare(2)
// succeeded). Then root writes the maps from outside, so setgroups stays allowed inside
// (sudo, su and login call it; the maps cover only the sandbox's own range).
func startRangeOwnedHolder(r IDRange) (*holder, error) {
	cat, err := findProgram("cat", "coreutils")
	if err != nil {
		return nil, err
	}
	unshare, err := findProgram("unshare", "util-linux")
	if err != nil {
		return nil, err
	}
	out, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	defer out.Close()
	stderr := &limitedBuffer{max: 512}
	cmd := exec.Command(unshare, "--user", "--net", "--", cat)
	cmd.Dir = "/"
	cmd.Env = []string{}
	cmd.Stdout = outW
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: r.Host, Gid: r.Host, Groups: []uint32{}},
		// With CAP_SYS_ADMIN the unshare passes where unprivileged user namespaces are
		// restricted (kernel.unprivileged_userns_clone=0, AppArmor): the daemon, not an
		// unprivileged user, asks for it. The capability is the host namespace's and is
		// gone once the holder is in its own namespace.
		AmbientCaps: []uintptr{unix.CAP_SYS_ADMIN},
	}
	h, err := startHolder(cmd)
	outW.Close() // the holder has its own copy: EOF comes when it exits
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*holder, error) {
		h.stop()
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w (%s)", err, msg)
		}
		return nil, fmt.Errorf("creating a user namespace owned by uid %d: %w", r.Host, err)
	}
	if _, err := h.stdin.Write([]byte{'\n'}); err != nil {
		return fail(err)
	}
	_ = out.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(out, b[:]); err != nil {
		return fail(err)
	}
	if err := mustDifferFromOurs(h.pid()); err != nil {
		return fail(err)
	}
	idmap := fmt.Sprintf("0 %d %d\n", r.Host, r.Size)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", h.pid(), f), []byte(idmap), 0); err != nil {
			return fail(fmt.Errorf("writing %s: %w", f, err))
		}
	}
	return h, nil
}

// mustDifferFromOurs checks that process pid is in a user and a network namespace other than
// the caller's, before anything is written into them.
func mustDifferFromOurs(pid int) error {
	for _, ns := range []string{"user", "net"} {
		var theirs, ours unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, ns), &theirs); err != nil {
			return fmt.Errorf("namespace holder: %w", err)
		}
		if err := unix.Stat("/proc/self/ns/"+ns, &ours); err != nil {
			return err
		}
		if theirs.Ino == ours.Ino && theirs.Dev == ours.Dev {
			return fmt.Errorf("namespace holder: still in the daemon's %s namespace", ns)
		}
	}
	return nil
}

// UserNSOwner returns the host uid that owns the user namespace whose nsfs file is path.
func UserNSOwner(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	uid, err := unix.IoctlGetUint32(int(f.Fd()), nsGetOwnerUID)
	if err != nil {
		return 0, fmt.Errorf("NS_GET_OWNER_UID on %s: %w", path, err)
	}
	return uid, nil
}

// nsGetOwnerUID is NS_GET_OWNER_UID, _IO(0xb7, 0x4) in linux/nsfs.h.
const nsGetOwnerUID = 0xb704

// ProbeOwnerRange reports whether CreateUserAndNetNS with OwnerRange works on this host and
// gives the namespace its range's owner: it creates one pair of namespaces for a uid no
// sandbox uses, pinned under dir, checks the owner, and removes them.
func ProbeOwnerRange(dir string) error {
	d, err := os.MkdirTemp(dir, "probe-userns-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(d)
	files := NamespaceFiles{User: filepath.Join(d, "userns"), Net: filepath.Join(d, "netns")}
	const probeUID = 0x7ffe0000
	if err := CreateUserAndNetNS(files, IDRange{Host: probeUID, Size: 65536}, OwnerRange); err != nil {
		return err
	}
	defer UnmountFile(files.Net)
	defer UnmountFile(files.User)
	owner, err := UserNSOwner(files.User)
	if err != nil {
		return err
	}
	if owner != probeUID {
		return fmt.Errorf("the new user namespace belongs to uid %d, not %d", owner, probeUID)
	}
	return nil
}

// limitedBuffer keeps the first max bytes written to it; it is safe for one writer and
// concurrent readers.
type limitedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

// findProgram finds name in /usr/bin or /bin (never through PATH: the daemon runs it as
// root or with a capability).
func findProgram(name, pkg string) (string, error) {
	for _, dir := range []string{"/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s(1) in /usr/bin or /bin (Debian package %s)", name, pkg)
}

// BindNamespace pins the namespace file src (e.g. /proc/PID/ns/net) at dst, creating dst.
func BindNamespace(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", dst, err)
	}
	f.Close()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind-mounting %s at %s: %w", src, dst, err)
	}
	return nil
}

// UnmountFile detaches whatever is mounted at path (lazily) and removes the file. It is
// idempotent: a path that is not mounted or does not exist is not an error.
func UnmountFile(path string) error {
	for {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if err == nil {
			continue // stacked mounts: unmount them all
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break
		}
		return fmt.Errorf("unmounting %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// IsMountPoint reports whether path is the root of a mount.
func IsMountPoint(path string) bool {
	var st, pst unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return false
	}
	if unix.Lstat(filepath.Dir(path), &pst) != nil {
		return false
	}
	if st.Dev != pst.Dev {
		return true
	}
	// Bind mounts of a directory on the same filesystem: fall back to mountinfo.
	return mountinfoHas(path)
}
