package storage

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

// The built-in "host" template runs sandboxes on the host's own installed programs: part
// "/usr" is the host's /usr itself, mounted read-only (idmapped) as the only lower of its
// overlay, so everything installed there (compilers, interpreters, tools) is available at
// once, without a download. It exposes the host's programs, not its data: part "/" is a
// small synthesized layer with the usr-merge symlinks, empty system directories, a home for
// `user`, and an /etc assembled from an allowlist of host configuration that carries no
// secrets (certificates, loader and shell configuration, time zone, PAM) plus synthesized
// account, host-name and sudo files. Never copied: passwd/shadow/group, SSH keys, TLS
// private keys, apt credentials, sudoers, anything not world-readable, and nothing from
// /root, /home, /var or moat's own data.
//
// Through the idmapping, host root's files in /usr belong to the sandbox's root: a file there
// that only root may read becomes readable by the sandbox's root (a Debian /usr has none but
// a polkit rules directory), and set-uid programs (sudo) are set-uid to the sandbox's root.
// Filesystems mounted below the host's /usr are not included.
//
// Configuration under /usr is hidden like the host's /etc (see hostUsrHidden): the
// synthesized layer's usr/ directory is the topmost lower of part "/usr" and holds
// overlayfs whiteouts for those paths, so the sandbox does not see them, nor anything the
// host adds there later. Programs and libraries under /usr/local (/usr/local/bin,
// /usr/local/go, /usr/local/lib/node_modules, ...) stay visible: they are the tools agents
// are run with.
//
// The layer is named after a hash of its content (layers/host-etc-<hash>), built once per
// content on first use by a process and reused afterwards.

// hostEtcFiles are the host files copied into the synthesized /etc (if present).
func hostEtcFiles() []string {
	return []string{
		"adduser.conf", "bash.bashrc", "bindresvport.blacklist", "ca-certificates.conf",
		"debian_version", "deluser.conf", "ethertypes", "gai.conf", "host.conf", "inputrc",
		"issue", "issue.net", "ld.so.cache", "ld.so.conf", "locale.alias", "locale.conf",
		"locale.gen", "localtime", "login.defs", "lsb-release", "magic", "magic.mime",
		"manpath.config", "mime.types", "networks", "os-release", "pam.conf", "profile",
		"protocols", "rpc", "services", "shells", "sudo.conf", "timezone", "xattr.conf",
		"ssl/openssl.cnf",
		"default/locale", "default/useradd", "default/nss", "default/keyboard",
		"security/access.conf", "security/capability.conf", "security/faillock.conf",
		"security/group.conf", "security/limits.conf", "security/namespace.conf",
		"security/pam_env.conf", "security/pwquality.conf", "security/sepermit.conf",
		"security/time.conf",
	}
}

// hostEtcDirs are host directories copied recursively (without following symlinks).
func hostEtcDirs() []string {
	return []string{
		"alternatives", "bash_completion.d", "ld.so.conf.d", "pam.d", "profile.d",
		"security/limits.d", "skel", "ssl/certs", "terminfo",
	}
}

// hostEtcNever may not be copied even if an allowlisted directory contains them.
func hostEtcNever() []string {
	return []string{
		"passwd", "shadow", "group", "gshadow", "sudoers", "sudoers.d", "ssh", "ssl/private",
		"apt", "security/opasswd", "subuid", "subgid", "machine-id", "hostname", "hosts",
		"resolv.conf", "nsswitch.conf", "environment", "ld.so.preload", "gitconfig",
	}
}

// hostUsrHidden are paths below the host's /usr that sandboxes never see: the configuration
// trees of tools installed with prefix /usr or /usr/local (npm's global npmrc, git's system
// gitconfig, gemrc, yarnrc and the like live in <prefix>/etc and often carry registry
// tokens), pip's site-wide configuration (<sys.prefix>/pip.conf, index URLs with
// credentials), cargo's credentials in the CARGO_HOME that Rust images put under /usr/local,
// and bundler's configuration (gem server credentials) in the BUNDLE_APP_CONFIG that Ruby
// images put there. npm's builtin npmrc (in npm's own directory) is left: installers put
// the prefix there, and hiding it would move npm's global configuration. A path is hidden
// whenever its parent directory exists on the host when the layer is built (the daemon
// builds it at its first use of the template); a path whose parent is a symbolic link is
// left alone (it resolves outside the host's /usr, where the sandbox sees only the
// synthesized layer, or to another place in /usr).
func hostUsrHidden() []string {
	return []string{
		"etc", "local/etc",
		"pip.conf", "local/pip.conf",
		"local/cargo/credentials", "local/cargo/credentials.toml",
		"local/bundle/config",
	}
}

// usrMergeDirs become symlinks into usr (as on the host) or, on a host without usr-merge,
// extra parts bind-mounted from the host.
func usrMergeDirs() []string {
	return []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}
}

const (
	hostLayerFormat = "moat host layer v2"
	maxHostFile     = 8 << 20
	userUID         = 1000
)

// hostEntry is one file of the synthesized layer.
type hostEntry struct {
	path     string      // relative, slash-separated
	mode     fs.FileMode // type and permission bits
	uid, gid int
	data     []byte // regular files
	link     string // symlinks
}

// hostTemplate returns the built-in host template, building its layer on first use.
func (s *Store) hostTemplate() (sandbox.Template, error) {
	s.hostMu.Lock()
	defer s.hostMu.Unlock()
	s.mu.Lock()
	cached := s.hostTmpl
	s.mu.Unlock()
	if cached != nil {
		if _, err := s.layers.Lstat(filepath.Base(cached.Parts[0].Layers[0])); err == nil {
			return *cached, nil
		}
	}
	entries, extraParts, err := s.hostEntries()
	if err != nil {
		return sandbox.Template{}, fmt.Errorf("synthesizing host template: %w", err)
	}
	id := "host-etc-" + hashEntries(entries)[:20]
	if _, err := s.layers.Lstat(id); err != nil {
		if err := s.writeHostLayer(id, entries); err != nil {
			return sandbox.Template{}, fmt.Errorf("writing host template layer: %w", err)
		}
		s.log.Info("built host template layer", "layer", id, "files", len(entries))
	}
	t := sandbox.Template{
		Name: HostTemplate,
		Parts: append([]sandbox.Part{
			{Target: "/", Layers: []string{s.layerPath(id)}},
			// The layer's usr/ hides configuration of the host's /usr (hostUsrHidden).
			{Target: "/usr", Layers: []string{filepath.Join(s.layerPath(id), "usr"), filepath.Join(s.hostRoot, "usr")}},
		}, extraParts...),
	}
	s.mu.Lock()
	s.hostTmpl = &t
	s.mu.Unlock()
	return t, nil
}

// hostEntries lists the synthesized layer's content, sorted so parents come first.
func (s *Store) hostEntries() ([]hostEntry, []sandbox.Part, error) {
	var es []hostEntry
	dir := func(p string, mode fs.FileMode, uid int) {
		es = append(es, hostEntry{path: p, mode: fs.ModeDir | mode, uid: uid, gid: uid})
	}
	file := func(p string, mode fs.FileMode, uid, gid int, data string) {
		es = append(es, hostEntry{path: p, mode: mode, uid: uid, gid: gid, data: []byte(data)})
	}
	for _, d := range []string{"dev", "etc", "home", "media", "mnt", "opt", "run", "srv", "usr",
		"var", "var/cache", "var/lib", "var/log", "var/mail", "var/spool", "etc/default",
		"etc/security", "etc/ssl", "etc/sudoers.d"} {
		dir(d, 0o755, 0)
	}
	dir("proc", 0o555, 0)
	dir("sys", 0o555, 0)
	dir("tmp", 0o777|fs.ModeSticky, 0)
	dir("var/tmp", 0o777|fs.ModeSticky, 0)
	dir("root", 0o700, 0)
	dir("home/user", 0o755, userUID)
	es = append(es, hostEntry{path: "etc/mtab", mode: fs.ModeSymlink | 0o777, link: "../proc/self/mounts"})
	es = append(es, hostEntry{path: "var/run", mode: fs.ModeSymlink | 0o777, link: "../run"})

	var extra []sandbox.Part
	for _, d := range usrMergeDirs() {
		fi, err := os.Lstat(filepath.Join(s.hostRoot, d))
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(s.hostRoot, d))
			if err != nil {
				return nil, nil, err
			}
			es = append(es, hostEntry{path: d, mode: fs.ModeSymlink | 0o777, link: target})
		case fi.IsDir():
			// A host without usr-merge: mount its directory like /usr.
			dir(d, 0o755, 0)
			extra = append(extra, sandbox.Part{Target: "/" + d, Layers: []string{filepath.Join(s.hostRoot, d)}})
		}
	}

	// Synthesized accounts and system files.
	file("etc/passwd", 0o644, 0, 0, synthPasswd)
	file("etc/group", 0o644, 0, 0, synthGroup)
	file("etc/shadow", 0o640, 0, shadowGID, synthShadow)
	file("etc/gshadow", 0o640, 0, shadowGID, synthGshadow)
	file("etc/hostname", 0o644, 0, 0, "sandbox\n")
	file("etc/hosts", 0o644, 0, 0, synthHosts)
	file("etc/resolv.conf", 0o644, 0, 0, synthResolv)
	file("etc/nsswitch.conf", 0o644, 0, 0, synthNsswitch)
	file("etc/environment", 0o644, 0, 0, "")
	file("etc/sudoers", 0o440, 0, 0, synthSudoers)
	file("etc/sudoers.d/user", 0o440, 0, 0, "user ALL=(ALL) NOPASSWD:ALL\n")

	// Allowlisted host configuration.
	etc := filepath.Join(s.hostRoot, "etc")
	have := map[string]bool{}
	for _, e := range es {
		have[e.path] = true
	}
	add := func(rel string) error {
		e, ok, err := readHostEntry(etc, rel)
		if err != nil || !ok {
			return err
		}
		e.path = "etc/" + rel
		if have[e.path] {
			return nil
		}
		if e.mode.IsDir() {
			e.mode = fs.ModeDir | 0o755
		}
		have[e.path] = true
		es = append(es, e)
		return nil
	}
	for _, rel := range hostEtcFiles() {
		if err := add(rel); err != nil {
			return nil, nil, err
		}
	}
	for _, top := range hostEtcDirs() {
		root := filepath.Join(etc, top)
		fi, err := os.Lstat(root)
		if err != nil || !fi.IsDir() || neverCopy(top) {
			continue
		}
		// Parents of nested allowlisted directories (etc/security, etc/ssl) exist already.
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable: leave it out
			}
			rel, _ := filepath.Rel(etc, p)
			rel = filepath.ToSlash(rel)
			if neverCopy(rel) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				info, err := d.Info()
				if err != nil || info.Mode().Perm()&0o005 != 0o005 {
					return filepath.SkipDir // not world-readable: private
				}
			}
			return add(rel)
		})
		if err != nil {
			return nil, nil, err
		}
	}
	// Configuration under the host's /usr is whited out in the layer's usr/.
	for _, rel := range hostUsrHidden() {
		parents, ok, err := hostUsrParents(filepath.Join(s.hostRoot, "usr"), rel)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		for _, p := range parents {
			if !have[p.path] {
				have[p.path] = true
				es = append(es, p)
			}
		}
		if p := "usr/" + rel; !have[p] {
			have[p] = true
			es = append(es, hostEntry{path: p, mode: fs.ModeDevice | fs.ModeCharDevice})
		}
	}
	// The users' homes start from the skeleton.
	for _, e := range slicesClone(es) {
		rest, ok := strings.CutPrefix(e.path, "etc/skel/")
		if !ok {
			continue
		}
		for _, home := range []struct {
			dir string
			uid int
		}{{"home/user", userUID}, {"root", 0}} {
			c := e
			c.path = home.dir + "/" + rest
			c.uid, c.gid = home.uid, home.uid
			es = append(es, c)
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].path < es[j].path })
	return es, extra, nil
}

func slicesClone(es []hostEntry) []hostEntry { return append([]hostEntry(nil), es...) }

// neverCopy reports whether rel (relative to /etc) is or lies below a denied name.
func neverCopy(rel string) bool {
	for _, n := range hostEtcNever() {
		if rel == n || strings.HasPrefix(rel, n+"/") {
			return true
		}
	}
	base := path.Base(rel)
	return strings.Contains(base, "secret") || strings.Contains(base, "private") ||
		strings.HasSuffix(base, ".key") || strings.Contains(base, "credential") ||
		strings.HasPrefix(base, "auth.conf")
}

// hostUsrParents returns the directories of the layer that lead to usr/<rel>, mirroring the
// mode and owner of the host's (usr/ itself is the synthesized one). ok is false when a
// parent is missing on the host or is not a real directory: then there is nothing to hide.
func hostUsrParents(usr, rel string) (parents []hostEntry, ok bool, err error) {
	dir := path.Dir(rel)
	if dir == "." {
		return nil, true, nil
	}
	cur := ""
	for _, c := range strings.Split(dir, "/") {
		cur = path.Join(cur, c)
		fi, err := os.Lstat(filepath.Join(usr, filepath.FromSlash(cur)))
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		st, isStat := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || !isStat {
			return nil, false, nil
		}
		parents = append(parents, hostEntry{path: "usr/" + cur,
			mode: fs.ModeDir | fi.Mode()&(fs.ModePerm|fs.ModeSetgid|fs.ModeSticky),
			uid:  int(st.Uid), gid: int(st.Gid)})
	}
	return parents, true, nil
}

// readHostEntry reads /etc/<rel> without following a final symlink. Files that are not
// world-readable, special files and oversized files are left out (ok = false).
func readHostEntry(etc, rel string) (hostEntry, bool, error) {
	p := filepath.Join(etc, filepath.FromSlash(rel))
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return hostEntry{}, false, nil
	}
	if err != nil {
		return hostEntry{}, false, err
	}
	e := hostEntry{mode: fi.Mode()}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if e.link, err = os.Readlink(p); err != nil {
			return hostEntry{}, false, err
		}
		e.mode = fs.ModeSymlink | 0o777
	case fi.IsDir():
		if fi.Mode().Perm()&0o005 != 0o005 {
			return hostEntry{}, false, nil
		}
	case fi.Mode().IsRegular():
		if fi.Mode().Perm()&0o004 == 0 || fi.Size() > maxHostFile {
			return hostEntry{}, false, nil
		}
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return hostEntry{}, false, nil
		}
		e.data, err = io.ReadAll(io.LimitReader(f, maxHostFile))
		f.Close()
		if err != nil {
			return hostEntry{}, false, err
		}
		e.mode = fi.Mode().Perm() &^ 0o022 // no set-id bits, not group/world-writable
	default:
		return hostEntry{}, false, nil
	}
	return e, true, nil
}

// hashEntries is the content hash naming the host layer.
func hashEntries(es []hostEntry) string {
	h := sha256.New()
	io.WriteString(h, hostLayerFormat+"\x00")
	var n [8]byte
	for _, e := range es {
		io.WriteString(h, e.path+"\x00"+e.link+"\x00")
		for _, v := range []uint64{uint64(e.mode), uint64(e.uid), uint64(e.gid), uint64(len(e.data))} {
			binary.LittleEndian.PutUint64(n[:], v)
			h.Write(n[:])
		}
		h.Write(e.data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeHostLayer writes entries to a temporary layer and renames it to id.
func (s *Store) writeHostLayer(id string, es []hostEntry) error {
	s.mark(id)
	defer s.unmark(id)
	tmp, _, done, err := s.newTemp("host")
	if err != nil {
		return err
	}
	defer done()
	r, err := s.layers.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, e := range es {
		if err := writeEntry(r, e); err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
	}
	return s.commitLayer(tmp, id)
}

func writeEntry(r *os.Root, e hostEntry) error {
	switch {
	case e.mode.IsDir():
		if err := r.Mkdir(e.path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case e.mode&fs.ModeSymlink != 0:
		return errors.Join(r.Symlink(e.link, e.path), r.Lchown(e.path, e.uid, e.gid))
	case e.mode&fs.ModeCharDevice != 0:
		// An overlayfs whiteout, the only device the layer has.
		dir, err := r.Open(path.Dir(e.path))
		if err != nil {
			return err
		}
		defer dir.Close()
		return linux.Whiteout(dir, path.Base(e.path))
	default:
		f, err := r.OpenFile(e.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = f.Write(e.data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if err := r.Lchown(e.path, e.uid, e.gid); err != nil {
		return err
	}
	return r.Chmod(e.path, e.mode&(fs.ModePerm|fs.ModeSticky|fs.ModeSetuid|fs.ModeSetgid))
}

const shadowGID = 42

const synthPasswd = `root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bin:x:2:2:bin:/bin:/usr/sbin/nologin
sys:x:3:3:sys:/dev:/usr/sbin/nologin
sync:x:4:65534:sync:/bin:/bin/sync
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
user:x:1000:1000:user:/home/user:/bin/bash
`

const synthGroup = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
sudo:x:27:user
shadow:x:42:
utmp:x:43:
staff:x:50:
users:x:100:user
nogroup:x:65534:
user:x:1000:
`

// Every account is locked: no password works; sudo is passwordless for user.
const synthShadow = `root:*:19000:0:99999:7:::
daemon:*:19000:0:99999:7:::
bin:*:19000:0:99999:7:::
sys:*:19000:0:99999:7:::
sync:*:19000:0:99999:7:::
nobody:*:19000:0:99999:7:::
user:*:19000:0:99999:7:::
`

const synthGshadow = `root:*::
daemon:*::
bin:*::
sys:*::
adm:*::
tty:*::
disk:*::
sudo:*::user
shadow:*::
utmp:*::
staff:*::
users:*::user
nogroup:*::
user:*::
`

const synthHosts = `127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
127.0.1.1	sandbox
`

const synthResolv = `# moat: the sandbox's DNS server (answers only names the egress policy allows)
nameserver 198.18.0.1
options timeout:2 attempts:2
`

const synthNsswitch = `passwd:         files
group:          files
shadow:         files
gshadow:        files
hosts:          files dns
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
netgroup:       files
`

const synthSudoers = `# Written by moat for the sandbox.
Defaults	env_reset
Defaults	mail_badpass
Defaults	secure_path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

root	ALL=(ALL:ALL) ALL
%sudo	ALL=(ALL:ALL) ALL
user	ALL=(ALL) NOPASSWD:ALL

@includedir /etc/sudoers.d
`
