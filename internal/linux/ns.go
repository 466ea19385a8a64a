// Package linux is the only home of raw Linux system calls in moat: namespace files,
// idmapped mounts, loop devices and bind mounts. Every function here is safe to call as
// root only and documents what it leaves behind on failure.
package linux

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

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

// CreateUserAndNetNS creates a user namespace with ids mapped as r (uid and gid alike) and a
// network namespace owned by it, and pins both by bind-mounting their nsfs files at
// files.User and files.Net (created if missing). It spawns a short-lived holder process
// (`cat` reading a pipe) to own the namespaces while they are pinned. On error nothing stays
// mounted.
func CreateUserAndNetNS(files NamespaceFiles, r IDRange) (err error) {
	holder, err := holderPath()
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	defer pw.Close()
	cmd := exec.Command(holder)
	cmd.Stdin = pr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Host), Size: int(r.Size)}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Host), Size: int(r.Size)}},
		// setgroups must stay allowed inside: sudo, su and login call it. The mapping
		// covers only the sandbox's own range, so dropping groups gains nothing.
		GidMappingsEnableSetgroups: true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		pr.Close()
		return fmt.Errorf("starting namespace holder: %w", err)
	}
	pr.Close()
	defer func() {
		pw.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	pid := cmd.Process.Pid
	if err := BindNamespace(fmt.Sprintf("/proc/%d/ns/user", pid), files.User); err != nil {
		return err
	}
	if err := BindNamespace(fmt.Sprintf("/proc/%d/ns/net", pid), files.Net); err != nil {
		_ = UnmountFile(files.User)
		return err
	}
	return nil
}

// holderPath finds a program that blocks reading stdin and exits at EOF.
func holderPath() (string, error) {
	for _, p := range []string{"/usr/bin/cat", "/bin/cat"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no cat(1) found to hold new namespaces")
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
