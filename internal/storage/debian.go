package storage

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
)

// BuildOptions tune Build.
type BuildOptions struct {
	// Mirror is the Debian mirror URL; default: the host's apt source for bookworm, else
	// http://deb.debian.org/debian.
	Mirror string
}

// DebianTemplate is the name of the recipe (and template) Build knows.
const DebianTemplate = "debian"

const (
	debianSuite    = "bookworm"
	debianPackages = "bash,sudo,git,curl,ca-certificates,python3,procps,iproute2"
	fallbackMirror = "http://deb.debian.org/debian"
)

// Build makes a template from a recipe; the only recipe is "debian": a clean Debian
// bookworm (debootstrap minbase plus bash, sudo, git, curl, ca-certificates, python3, procps,
// iproute2) with user `user` (uid 1000, home /home/user, passwordless sudo), no apt caches,
// an empty machine-id and host name "sandbox". debootstrap's output goes to progress line by
// line. It takes minutes and needs the mirror. The layer is built under layers/.tmp-* and
// renamed when complete, so an interrupted build leaves nothing usable (Cleanup removes
// it); the template is replaced only at the end. Unknown recipes give ErrNotFound; a
// missing debootstrap ErrUnavailable.
func (s *Store) Build(ctx context.Context, name string, progress func(string), opts BuildOptions) (TemplateInfo, error) {
	progress = orNop(progress)
	if name != DebianTemplate {
		return TemplateInfo{}, fmt.Errorf("no build recipe %q (available: %s): %w", name, DebianTemplate, errdefs.ErrNotFound)
	}
	if err := s.roomForLayer("template " + name); err != nil {
		return TemplateInfo{}, err
	}
	mirror := opts.Mirror
	if mirror == "" {
		mirror = hostMirror("/etc/apt", debianSuite)
	}
	if u, err := url.Parse(mirror); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return TemplateInfo{}, fmt.Errorf("mirror %q must be an http(s) URL: %w", mirror, errdefs.ErrInvalidArgument)
	}
	debootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		for _, p := range []string{"/usr/sbin/debootstrap", "/sbin/debootstrap"} {
			if _, serr := os.Stat(p); serr == nil {
				debootstrap, err = p, nil
			}
		}
	}
	if err != nil {
		return TemplateInfo{}, fmt.Errorf("debootstrap not found (apt-get install debootstrap): %w", errdefs.ErrUnavailable)
	}

	tmp, dir, done, err := s.newTemp("debian")
	if err != nil {
		return TemplateInfo{}, err
	}
	defer done()
	start := time.Now()
	progress(fmt.Sprintf("debootstrap %s from %s", debianSuite, mirror))
	err = s.runStreaming(ctx, progress, debootstrap, "--variant=minbase", "--include="+debianPackages,
		debianSuite, dir, mirror)
	if err != nil {
		return TemplateInfo{}, fmt.Errorf("debootstrap: %w", err)
	}
	progress("configuring the image")
	if err := s.runStreaming(ctx, progress, "chroot", dir, "useradd", "--create-home", "--uid", "1000",
		"--user-group", "--groups", "sudo", "--shell", "/bin/bash", "user"); err != nil {
		return TemplateInfo{}, fmt.Errorf("adding user: %w", err)
	}
	if err := finishDebian(s.layers, tmp); err != nil {
		return TemplateInfo{}, fmt.Errorf("configuring the image: %w", err)
	}
	// debootstrap ran in its own mount namespace; make sure nothing of it is left here.
	if err := unmountAllIn(dir); err != nil {
		return TemplateInfo{}, err
	}
	id := "deb-" + debianSuite + "-" + time.Now().UTC().Format("20060102t150405") + "-" + randHex(3)
	s.mark(id)
	defer s.unmark(id)
	if err := s.commitLayer(tmp, id); err != nil {
		return TemplateInfo{}, err
	}
	info, err := s.writeManifest(&manifest{
		Name:    name,
		Parts:   []manifestPart{{Target: "/", Layers: []string{id}}},
		Source:  "debootstrap " + debianSuite + " " + mirror,
		Created: time.Now().UTC(),
	})
	if err != nil {
		return TemplateInfo{}, err
	}
	progress(fmt.Sprintf("template %s is ready (built in %s)", name, time.Since(start).Round(time.Second)))
	return info, nil
}

// finishDebian configures the bootstrapped tree layers/<tmp>.
func finishDebian(layers *os.Root, tmp string) error {
	r, err := layers.OpenRoot(tmp)
	if err != nil {
		return err
	}
	defer r.Close()
	write := func(name, data string, mode fs.FileMode) error {
		_ = r.Remove(name)
		if err := r.WriteFile(name, []byte(data), mode); err != nil {
			return err
		}
		return r.Chmod(name, mode)
	}
	for _, f := range []struct {
		name, data string
		mode       fs.FileMode
	}{
		{"etc/sudoers.d/user", "user ALL=(ALL) NOPASSWD:ALL\n", 0o440},
		{"etc/hostname", "sandbox\n", 0o644},
		{"etc/hosts", synthHosts, 0o644},
		{"etc/resolv.conf", synthResolv, 0o644}, // debootstrap copied the host's
		{"etc/machine-id", "", 0o444},
	} {
		if err := write(f.name, f.data, f.mode); err != nil {
			return err
		}
	}
	_ = r.Remove("var/lib/dbus/machine-id")
	// apt caches and lists: apt-get update fetches fresh ones when there is a network.
	for _, d := range []string{"var/cache/apt/archives", "var/lib/apt/lists", "var/cache/apt"} {
		entries, err := fs.ReadDir(r.FS(), d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.Type().IsRegular() && e.Name() != "lock" {
				if err := r.Remove(d + "/" + e.Name()); err != nil {
					return err
				}
			}
		}
	}
	for _, f := range []string{"var/log/bootstrap.log", "var/log/dpkg.log", "var/log/alternatives.log",
		"var/log/apt/history.log", "var/log/apt/term.log", "var/log/apt/eipp.log.xz"} {
		_ = r.Remove(f)
	}
	return nil
}

// runStreaming runs a command in a private mount namespace (mounts it makes, such as
// debootstrap's /proc in the target, vanish with it), its output lines going to progress.
// Cancelling ctx kills its whole process group.
func (s *Store) runStreaming(ctx context.Context, progress func(string), name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"DEBIAN_FRONTEND=noninteractive", "LC_ALL=C", "HOME=/root",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS, // Go makes the new namespace's mounts private
		Setpgid:      true,
		Pdeathsig:    syscall.SIGKILL,
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	lines := make(chan struct{})
	var tail []string
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			progress(line)
			s.log.Debug("build output", "cmd", filepath.Base(name), "line", line)
			if tail = append(tail, line); len(tail) > 5 {
				tail = tail[1:]
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-lines
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: %v (last output: %s)", filepath.Base(name), err, strings.Join(tail, " | "))
	}
	return nil
}

// hostMirror finds the host's apt mirror for suite in aptDir (sources.list and deb822
// sources.list.d/*.sources), falling back to deb.debian.org.
func hostMirror(aptDir, suite string) string {
	if data, err := os.ReadFile(filepath.Join(aptDir, "sources.list")); err == nil {
		if m := mirrorFromList(string(data), suite); m != "" {
			return m
		}
	}
	files, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*.sources"))
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			if m := mirrorFromDeb822(string(data), suite); m != "" {
				return m
			}
		}
	}
	lists, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", "*.list"))
	for _, f := range lists {
		if data, err := os.ReadFile(f); err == nil {
			if m := mirrorFromList(string(data), suite); m != "" {
				return m
			}
		}
	}
	return fallbackMirror
}

// mirrorFromList reads one-line-style sources: "deb [options] URI suite components...".
func mirrorFromList(data, suite string) string {
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(strings.TrimSpace(line))
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") {
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) == 0 {
				continue
			}
			f = f[1:]
		}
		if len(f) >= 2 && f[1] == suite && isHTTP(f[0]) {
			return strings.TrimSuffix(f[0], "/")
		}
	}
	return ""
}

// mirrorFromDeb822 reads deb822 sources: stanzas with Types, URIs, Suites and Enabled.
func mirrorFromDeb822(data, suite string) string {
	for _, stanza := range strings.Split(strings.ReplaceAll(data, "\r", ""), "\n\n") {
		fields := map[string]string{}
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(line, "#") || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if ok {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if strings.EqualFold(fields["enabled"], "no") || !hasWord(fields["types"], "deb") || !hasWord(fields["suites"], suite) {
			continue
		}
		for _, u := range strings.Fields(fields["uris"]) {
			if isHTTP(u) {
				return strings.TrimSuffix(u, "/")
			}
		}
	}
	return ""
}

func hasWord(list, w string) bool {
	for _, f := range strings.Fields(list) {
		if f == w {
			return true
		}
	}
	return false
}

func isHTTP(u string) bool {
	return strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")
}

// unmountAllIn fails if something is still mounted inside dir after trying to detach it.
func unmountAllIn(dir string) error {
	if err := linux.UnmountAll(dir); err != nil {
		return fmt.Errorf("unmounting inside %s: %w", dir, err)
	}
	return nil
}
