package users

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files is the sandbox's root as Apply and Remove see it (normally "/").
type Files struct{ Root string }

func (fsys Files) path(rel string) string { return filepath.Join(fsys.Root, rel) }

// Apply makes the sandbox match st: passwd, group, shadow and gshadow (when present)
// entries, each file replaced atomically with its mode and owner kept and only when it
// changes; home directories /home/NAME (0700, the user's; made from /etc/skel when new);
// /shared/GROUP (root:GROUP, 2770) of each shared group; /etc/sudoers.d/moat-NAME (0440)
// of each sudo user and of no other. Marked accounts st does not hold are removed (their
// processes killed, their homes kept). Apply is idempotent.
func (fsys Files) Apply(st State) error {
	if err := st.Check(); err != nil {
		return err
	}
	passwd, err := fsys.read("etc/passwd")
	if err != nil {
		return err
	}
	stale := Stale(passwd, st)
	if err := fsys.killAll(stale, passwd); err != nil {
		return err
	}
	if err := fsys.editDB(st, stale); err != nil {
		return err
	}
	for _, name := range stale {
		if err := fsys.removeSudoers(name); err != nil {
			return err
		}
	}
	if err := fsys.mkdir("home", 0o755, 0, 0, false); err != nil {
		return err
	}
	for _, a := range st.Users {
		if err := fsys.home(a); err != nil {
			return err
		}
		if a.Sudo {
			if err := fsys.writeFile("etc/sudoers.d/moat-"+a.Name, []byte(SudoersLine(a.Name)), 0o440); err != nil {
				return err
			}
		} else if err := fsys.removeSudoers(a.Name); err != nil {
			return err
		}
	}
	if len(st.Groups) > 0 {
		if err := fsys.mkdir("shared", 0o755, 0, 0, false); err != nil {
			return err
		}
	}
	for _, g := range st.Groups {
		if err := fsys.mkdir("shared/"+g.Name, 0o2770, 0, g.GID, true); err != nil {
			return err
		}
	}
	return nil
}

// Remove removes the marked account name (uid), which st (the record without it) no
// longer holds: its processes are killed, its entries and sudoers file removed, and its
// home too unless keepHome. A missing account is no error (a retried removal).
func (fsys Files) Remove(st State, name string, uid uint32, keepHome bool) error {
	if err := st.Check(); err != nil {
		return err
	}
	if !nameRE.MatchString(name) || name == "root" || uid == 0 {
		return fmt.Errorf("user %q (%d) is not valid", name, uid)
	}
	if err := fsys.killUID(uid); err != nil {
		return err
	}
	if err := fsys.editDB(st, []string{name}); err != nil {
		return err
	}
	if err := fsys.removeSudoers(name); err != nil {
		return err
	}
	if keepHome {
		return nil
	}
	home := fsys.path("home/" + name)
	if fi, err := os.Lstat(home); err == nil && fi.IsDir() {
		return os.RemoveAll(home)
	}
	return nil
}

// editDB writes the four database files with st applied and drop removed.
func (fsys Files) editDB(st State, drop []string) error {
	shell := "/bin/sh"
	if _, err := os.Stat(fsys.path("bin/bash")); err == nil {
		shell = "/bin/bash"
	}
	edits := []struct {
		rel      string
		edit     func([]byte) []byte
		optional bool
		mode     os.FileMode
	}{
		{"etc/passwd", func(b []byte) []byte { return EditPasswd(b, st, drop, shell) }, false, 0o644},
		{"etc/group", func(b []byte) []byte { return EditGroup(b, st, drop) }, false, 0o644},
		{"etc/shadow", func(b []byte) []byte { return EditShadow(b, st, drop) }, false, 0o640},
		{"etc/gshadow", func(b []byte) []byte { return EditGshadow(b, st, drop) }, true, 0o640},
	}
	for _, e := range edits {
		old, err := fsys.read(e.rel)
		if err != nil {
			return err
		}
		if old == nil && e.optional {
			continue
		}
		if next := e.edit(old); !bytes.Equal(next, old) {
			if err := fsys.writeFile(e.rel, next, e.mode); err != nil {
				return err
			}
		}
	}
	return nil
}

// read returns the file's content, nil when it does not exist.
func (fsys Files) read(rel string) ([]byte, error) {
	b, err := os.ReadFile(fsys.path(rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// writeFile replaces rel atomically (a temporary file beside it, renamed over it) with
// data, keeping an existing file's mode and owner (mode and root:root for a new one, and
// for sudoers files always).
func (fsys Files) writeFile(rel string, data []byte, mode os.FileMode) error {
	p := fsys.path(rel)
	uid, gid := 0, 0
	keep := !strings.HasPrefix(rel, "etc/sudoers.d/")
	if fi, err := os.Lstat(p); err == nil && keep && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
		st := fi.Sys().(*syscall.Stat_t)
		uid, gid = int(st.Uid), int(st.Gid)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".moat-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = func() error {
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Chown(uid, gid); err != nil {
			return err
		}
		if err := f.Chmod(mode); err != nil {
			return err
		}
		return f.Sync()
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing /%s: %w", rel, err)
	}
	return nil
}

func (fsys Files) removeSudoers(name string) error {
	err := os.Remove(fsys.path("etc/sudoers.d/moat-" + name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// mkdir makes rel a directory with mode and owner uid:gid; an existing one keeps its
// mode and owner unless force (a non-directory there is an error).
func (fsys Files) mkdir(rel string, mode os.FileMode, uid, gid uint32, force bool) error {
	p := fsys.path(rel)
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
		force = true
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("/%s is %s, not a directory", rel, fi.Mode().Type())
	}
	if !force {
		return nil
	}
	if err := os.Lchown(p, int(uid), int(gid)); err != nil {
		return err
	}
	// Chmod after chown: chown clears the setgid bit.
	return os.Chmod(p, mode.Perm()|setgidOf(mode))
}

// setgidOf maps the octal 02000 bit of a mode written as a number onto os.ModeSetgid.
func setgidOf(mode os.FileMode) os.FileMode {
	if mode&0o2000 != 0 {
		return os.ModeSetgid
	}
	return 0
}

// home makes /home/NAME the user's, 0700; a new one gets /etc/skel's regular files.
func (fsys Files) home(a Account) error {
	rel := "home/" + a.Name
	_, err := os.Lstat(fsys.path(rel))
	fresh := errors.Is(err, fs.ErrNotExist)
	if err := fsys.mkdir(rel, 0o700, a.UID, a.GID, true); err != nil {
		return err
	}
	if !fresh {
		return nil
	}
	skel, err := os.ReadDir(fsys.path("etc/skel"))
	if err != nil {
		return nil // no skeleton
	}
	for _, e := range skel {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyOwned(fsys.path("etc/skel/"+e.Name()), fsys.path(rel+"/"+e.Name()), a); err != nil {
			return err
		}
	}
	return nil
}

func copyOwned(src, dst string, a Account) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.LimitReader(in, 1<<20))
	if err == nil {
		err = out.Chown(int(a.UID), int(a.GID))
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// killAll kills the processes of the stale accounts (their uids from passwd).
func (fsys Files) killAll(names []string, passwd []byte) error {
	if len(names) == 0 {
		return nil
	}
	entries, err := ParsePasswd(bytes.NewReader(passwd))
	if err != nil {
		return err
	}
	for _, e := range entries {
		for _, n := range names {
			if e.Name == n {
				if err := fsys.killUID(e.UID); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// killUID kills every process with uid as its real, effective or saved uid, until none
// is left (a process may fork while the list is read), for up to two seconds.
func (fsys Files) killUID(uid uint32) error {
	if fsys.Root != "/" || uid == 0 {
		return nil // only the sandbox's own processes, never root's
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids := ProcessesOf(uid)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of uid %d still running after SIGKILL: %v", uid, pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ProcessesOf lists the pids in /proc whose real, effective or saved uid is uid
// (zombies included: they are reaped by moat-init).
func ProcessesOf(uid uint32) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		if statusUIDHas(b, uid) && !statusZombie(b) {
			out = append(out, pid)
		}
	}
	return out
}

func statusUIDHas(status []byte, uid uint32) bool {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			for i := 0; i < len(f) && i < 3; i++ {
				if f[i] == u32(uid) {
					return true
				}
			}
		}
	}
	return false
}

func statusZombie(status []byte) bool {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "State:"); ok {
			return strings.HasPrefix(strings.TrimSpace(rest), "Z")
		}
	}
	return false
}
