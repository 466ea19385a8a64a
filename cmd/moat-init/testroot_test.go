package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// moat-init refuses to run anywhere but as PID 1 of a sandbox (checkPlacement), and no
// test may change the host it runs on. So the tests run it in a small sandbox of their
// own: a temporary root with the host's /usr read-only, its own /etc (passwd and group
// with root and a test user), /tmp, /root and a home directory, a fresh /proc and
// devpts, and moat-init bind-mounted read-only at /.moat/moat-init, entered as PID 1 of
// a new PID and mount namespace. The test binary itself is that PID 1 until it has built
// the mounts (enterTestRoot), then it execs moat-init.
//
// The test user's home is mounted inside at the same path it has on the host, so a test
// can name a file by one path on both sides.

// Environment variables of the test binary re-executed as a launcher.
const (
	// launchRootEnv names the prepared root directory to enter (testRoot.dir).
	launchRootEnv = "MOAT_INIT_TEST_ROOT"
	// launchHomeEnv is the home directory to mount at its own path inside.
	launchHomeEnv = "MOAT_INIT_TEST_HOME"
	// launchEtcEnv names a directory to mount over the host's /etc, then exec moat-init
	// on the host's root (TestRefusesOutsideSandbox).
	launchEtcEnv = "MOAT_INIT_TEST_SHADOW_ETC"
)

// testRoot is the host side of the tests' sandbox root.
type testRoot struct {
	base string // the temporary directory holding everything
	dir  string // the root directory
	init string // the moat-init binary mounted at /.moat/moat-init
}

// newTestRoot prepares, under base, a root for moat-init and a home directory for u
// (u.home is set to it). Nothing outside base is changed.
func newTestRoot(base, initBin string, u *osUser) (*testRoot, error) {
	r := &testRoot{base: base, dir: filepath.Join(base, "root"), init: initBin}
	u.home = filepath.Join(base, "home", u.name)
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{r.dir, 0o755}, {r.dir + "/usr", 0o755}, {r.dir + "/etc", 0o755}, {r.dir + "/tmp", 0o1777},
		{r.dir + "/root", 0o700}, {r.dir + "/proc", 0o555}, {r.dir + "/dev", 0o755},
		{r.dir + "/.moat", 0o755}, {r.dir + "/.oldroot", 0o700},
		{filepath.Join(r.dir, u.home), 0o755}, {u.home, 0o755},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return nil, err
		}
	}
	if err := os.Chown(u.home, u.uid, u.gid); err != nil {
		return nil, err
	}
	// Merged-/usr hosts have /bin, /lib… as symlinks into /usr; others get binds.
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		fi, err := os.Lstat("/" + name)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink("/" + name)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(target, filepath.Join(r.dir, name)); err != nil {
				return nil, err
			}
		} else if err := os.Mkdir(filepath.Join(r.dir, name), 0o755); err != nil {
			return nil, err
		}
	}
	files := map[string]string{
		"etc/passwd": fmt.Sprintf("root:x:0:0:root:/root:/bin/bash\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"+
			"%s:x:%d:%d::%s:/bin/bash\n", u.name, u.uid, u.gid, u.home),
		"etc/group":       fmt.Sprintf("root:x:0:\nnogroup:x:65534:\n%s:x:%d:\n", u.name, u.gid),
		"etc/hostname":    "moat-init-test\n",
		".moat/moat-init": "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// command returns a command that starts moat-init with args and env (and nothing else)
// in r, as PID 1 of new PID and mount namespaces.
func (r *testRoot) command(home string, args, env []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{launchRootEnv + "=" + r.dir, launchHomeEnv + "=" + home, "MOAT_INIT_TEST_BIN=" + r.init}, env...)
	// Pdeathsig: a test binary killed mid-run takes its moat-init (and the namespace) along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// launcherMain is the test binary re-executed by testRoot.command or shadowEtcCommand: it
// builds the mounts, then execs moat-init with its own arguments. It returns only on
// failure. ok reports whether the environment asked for a launcher at all.
func launcherMain() (ok bool, err error) {
	root, home, etc := os.Getenv(launchRootEnv), os.Getenv(launchHomeEnv), os.Getenv(launchEtcEnv)
	if root == "" && etc == "" {
		return false, nil
	}
	env := slicesDeleteEnv(os.Environ(), launchRootEnv, launchHomeEnv, launchEtcEnv)
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return true, fmt.Errorf("making / private: %w", err)
	}
	exe := os.Getenv("MOAT_INIT_TEST_BIN")
	env = slicesDeleteEnv(env, "MOAT_INIT_TEST_BIN")
	if etc != "" {
		if err := unix.Mount(etc, "/etc", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return true, fmt.Errorf("mounting %s over /etc: %w", etc, err)
		}
		return true, unix.Exec(exe, append([]string{exe}, os.Args[1:]...), env)
	}
	if err := enterTestRoot(root, home, exe); err != nil {
		return true, err
	}
	return true, unix.Exec(initPath, append([]string{initPath}, os.Args[1:]...), env)
}

// enterTestRoot mounts what newTestRoot prepared and makes it the root of this mount
// namespace.
func enterTestRoot(root, home, exe string) error {
	bind := func(src, dst string, flags uintptr) error {
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, dst, err)
		}
		if flags != 0 {
			if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|flags, ""); err != nil {
				return fmt.Errorf("remount %s: %w", dst, err)
			}
		}
		return nil
	}
	if err := bind(root, root, 0); err != nil {
		return err
	}
	if err := bind("/usr", root+"/usr", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return err
	}
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if fi, err := os.Lstat(filepath.Join(root, name)); err == nil && fi.IsDir() {
			if err := bind("/"+name, filepath.Join(root, name), unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV); err != nil {
				return err
			}
		}
	}
	if err := bind(exe, root+initPath, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV); err != nil {
		return err
	}
	if err := bind(home, filepath.Join(root, home), 0); err != nil {
		return err
	}
	if err := unix.Mount("proc", root+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting proc: %w", err)
	}
	if err := unix.Mount("tmpfs", root+"/dev", "tmpfs", unix.MS_NOSUID, "mode=755,size=1m"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := os.WriteFile(root+"/dev/"+n, nil, 0o666); err != nil {
			return err
		}
		if err := bind("/dev/"+n, root+"/dev/"+n, 0); err != nil {
			return err
		}
	}
	if err := os.Mkdir(root+"/dev/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", root+"/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mounting devpts: %w", err)
	}
	if err := os.Symlink("pts/ptmx", root+"/dev/ptmx"); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, root+"/.oldroot"); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the old root: %w", err)
	}
	return nil
}

// shadowEtcCommand runs the moat-init binary straight on the host's root, as these tests
// once did, but in a private mount namespace whose /etc is etc (a copy): if moat-init ever
// writes to "/etc", the copy shows it and the host's /etc is safe. pid1 also puts it in a
// PID namespace of its own, as `unshare -pf` would.
func shadowEtcCommand(etc string, pid1 bool, args, env []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{launchEtcEnv + "=" + etc, "MOAT_INIT_TEST_BIN=" + binPath}, env...)
	flags := uintptr(syscall.CLONE_NEWNS)
	if pid1 {
		flags |= syscall.CLONE_NEWPID
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func slicesDeleteEnv(env []string, keys ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, key := range keys {
			drop = drop || k == key
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// newOSUser makes up a user for the test root: a random name and a high uid that no host
// account has (the user exists only in the root's /etc/passwd).
func newOSUser() *osUser {
	var b [3]byte
	_, _ = rand.Read(b[:])
	n, _ := rand.Int(rand.Reader, big.NewInt(1_000_000))
	id := 1_500_000_000 + int(n.Int64())
	return &osUser{name: "moatt" + hex.EncodeToString(b[:]), uid: id, gid: id}
}

// hostFiles are host files no test may change; snapshotHost records them.
var hostFiles = []string{"/etc/passwd", "/etc/group", "/etc/shadow", "/etc/resolv.conf", "/etc/hosts"}

type fileState struct {
	data  []byte
	mtime time.Time
	err   error
}

func snapshotHost(paths []string) map[string]fileState {
	out := map[string]fileState{}
	for _, p := range paths {
		var s fileState
		s.data, s.err = os.ReadFile(p)
		if fi, err := os.Stat(p); err == nil {
			s.mtime = fi.ModTime()
		}
		out[p] = s
	}
	return out
}

// hostChanges lists what differs between two snapshots.
func hostChanges(before, after map[string]fileState) []string {
	var out []string
	for p, b := range before {
		a := after[p]
		switch {
		case (b.err == nil) != (a.err == nil):
			out = append(out, fmt.Sprintf("%s: existence changed (%v → %v)", p, b.err, a.err))
		case !bytes.Equal(b.data, a.data):
			out = append(out, p+": content changed")
		case !b.mtime.Equal(a.mtime):
			out = append(out, fmt.Sprintf("%s: mtime changed (%v → %v)", p, b.mtime, a.mtime))
		}
	}
	return out
}

// hostPID returns the host pid of the process that has pid nsPID in the PID namespace of
// host process ref, or 0.
func hostPID(ref, nsPID int) int {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", ref))
	if err != nil {
		return 0
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", n)); l != ns {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 && f[len(f)-1] == strconv.Itoa(nsPID) {
					return n
				}
			}
		}
	}
	return 0
}
