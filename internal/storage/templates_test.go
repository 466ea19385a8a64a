package storage

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apiv1 "github.com/moatdev/moat/api/v1"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

// TestHostTemplate checks the built-in template on the real host: ready at once, accounts
// synthesized, no host secrets.
func TestHostTemplate(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	start := time.Now()
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	start = time.Now()
	again, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host template: first use %v, then %v", first, time.Since(start))
	if first > 5*time.Second {
		t.Errorf("host template took %v", first)
	}
	if again.Parts[0].Layers[0] != tmpl.Parts[0].Layers[0] {
		t.Error("host layer rebuilt under another name")
	}
	if len(tmpl.Parts) < 2 || tmpl.Parts[0].Target != "/" || tmpl.Parts[1].Target != "/usr" ||
		len(tmpl.Parts[1].Layers) != 2 || tmpl.Parts[1].Layers[0] != tmpl.Parts[0].Layers[0]+"/usr" || tmpl.Parts[1].Layers[1] != "/usr" {
		t.Fatalf("parts: %+v", tmpl.Parts)
	}
	layer := tmpl.Parts[0].Layers[0]
	if !strings.HasPrefix(filepath.Base(layer), "host-etc-") {
		t.Errorf("layer %s", layer)
	}
	read := func(p string) string {
		data, err := os.ReadFile(filepath.Join(layer, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		return string(data)
	}
	if got := read("etc/passwd"); got != synthPasswd {
		t.Errorf("passwd not synthesized:\n%s", got)
	}
	if got := read("etc/shadow"); got != synthShadow {
		t.Errorf("shadow not synthesized:\n%s", got)
	}
	if hostShadow, err := os.ReadFile("/etc/shadow"); err == nil && bytes.Equal(hostShadow, []byte(read("etc/shadow"))) {
		t.Error("the host's shadow was copied")
	}
	if read("etc/hostname") != "sandbox\n" || !strings.Contains(read("etc/sudoers"), "user\tALL=(ALL) NOPASSWD:ALL") {
		t.Error("hostname or sudoers wrong")
	}
	for _, p := range []string{"etc/ssh", "etc/ssl/private", "etc/apt", "etc/gitconfig", "etc/security/opasswd", "etc/ld.so.preload"} {
		if _, err := os.Lstat(filepath.Join(layer, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists in the host layer", p)
		}
	}
	for _, c := range []struct {
		path     string
		mode     fs.FileMode
		uid, gid uint32
	}{
		{"etc/shadow", 0o640, 0, shadowGID},
		{"etc/sudoers", 0o440, 0, 0},
		{"etc/sudoers.d/user", 0o440, 0, 0},
		{"tmp", 0o777 | fs.ModeSticky | fs.ModeDir, 0, 0},
		{"var/tmp", 0o777 | fs.ModeSticky | fs.ModeDir, 0, 0},
		{"root", 0o700 | fs.ModeDir, 0, 0},
		{"home/user", 0o755 | fs.ModeDir, 1000, 1000},
		{"usr", 0o755 | fs.ModeDir, 0, 0},
	} {
		fi, err := os.Lstat(filepath.Join(layer, c.path))
		if err != nil {
			t.Errorf("%s: %v", c.path, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != c.mode || st.Uid != c.uid || st.Gid != c.gid {
			t.Errorf("%s: %v %d:%d, want %v %d:%d", c.path, fi.Mode(), st.Uid, st.Gid, c.mode, c.uid, c.gid)
		}
	}
	if l, err := os.Readlink(filepath.Join(layer, "lib")); err != nil || l != "usr/lib" {
		t.Errorf("lib -> %q, %v", l, err)
	}
	if _, err := os.Stat("/etc/skel/.bashrc"); err == nil {
		fi, err := os.Lstat(filepath.Join(layer, "home/user/.bashrc"))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
			t.Errorf("home/user/.bashrc from skel: %v", err)
		}
	}
	// Nothing in the layer is a copy of a host file that is not world-readable.
	filepath.WalkDir(filepath.Join(layer, "etc"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(layer, p)
		if hfi, err := os.Stat("/" + rel); err == nil && hfi.Mode().Perm()&0o004 == 0 {
			switch rel {
			case "etc/shadow", "etc/gshadow", "etc/sudoers", "etc/sudoers.d/user":
			default:
				t.Errorf("%s is private on the host but in the layer", rel)
			}
		}
		return nil
	})
}

// TestHostTemplateFakeHost builds the host layer from a fake host full of canaries: none
// may reach the layer; the allowlisted files do. The fake host has no usr-merge, so its
// /bin becomes a part of its own.
func TestHostTemplateFakeHost(t *testing.T) {
	s, _ := newTestStore(t)
	host := t.TempDir()
	const canary = "MOAT-CANARY-SECRET"
	files := map[string]string{
		"etc/passwd":                     "root:x:0:0:" + canary + ":/root:/bin/bash\n",
		"etc/shadow":                     "root:$6$" + canary + ":1::::::\n",
		"etc/gshadow":                    canary,
		"etc/ssh/ssh_host_ed25519_key":   canary,
		"etc/ssl/private/server.key":     canary,
		"etc/ssl/certs/ca.pem":           "PUBLIC CERT",
		"etc/ssl/certs/server.key":       canary,
		"etc/apt/auth.conf.d/x.conf":     canary,
		"etc/gitconfig":                  canary,
		"etc/environment":                "TOKEN=" + canary,
		"etc/profile.d/ok.sh":            "export OK=1\n",
		"etc/profile.d/private-token.sh": canary,
		"etc/security/opasswd":           canary,
		"etc/security/limits.conf":       "# limits\n",
		"etc/skel/.bashrc":               "# skel bashrc\n",
		"etc/pam.d/other":                "auth required pam_deny.so\n",
		"etc/ld.so.preload":              canary,
		"etc/resolv.conf":                "nameserver 10.0.0.1 # " + canary,
		"etc/hosts":                      "10.0.0.1 " + canary,
		"etc/nsswitch.conf":              "passwd: ldap # " + canary,
		"etc/wgetrc":                     canary,
		"root/.ssh/id_ed25519":           canary,
		"home/bob/.aws/credentials":      canary,
		"var/lib/moat/templates/x.json":  canary,
		"bin/sh":                         "#!fake",
		"usr/bin/env":                    "#!fake",
	}
	for p, data := range files {
		full := filepath.Join(host, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// World-unreadable files inside allowlisted directories stay out.
	os.WriteFile(filepath.Join(host, "etc/profile.d/mode600.sh"), []byte(canary), 0o600)
	os.Chmod(filepath.Join(host, "etc/profile.d/mode600.sh"), 0o600)
	os.MkdirAll(filepath.Join(host, "etc/pam.d/secretdir"), 0o700)
	os.WriteFile(filepath.Join(host, "etc/pam.d/secretdir/x"), []byte(canary), 0o644)
	os.Chmod(filepath.Join(host, "etc/pam.d/secretdir"), 0o700)
	// A symlink in an allowlisted directory is copied as a symlink, not followed.
	os.Symlink("/etc/shadow", filepath.Join(host, "etc/profile.d/link.sh"))
	os.Symlink("usr/lib", filepath.Join(host, "lib"))

	s.hostRoot = host
	tmpl, err := s.Template(ctxT(t), HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	layer := tmpl.Parts[0].Layers[0]
	filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			if bytes.Contains(data, []byte(canary)) {
				t.Errorf("canary in %s", p)
			}
		}
		return nil
	})
	for _, p := range []string{"etc/ssl/certs/ca.pem", "etc/profile.d/ok.sh", "etc/security/limits.conf",
		"etc/skel/.bashrc", "home/user/.bashrc", "root/.bashrc", "etc/pam.d/other"} {
		if _, err := os.Stat(filepath.Join(layer, p)); err != nil {
			t.Errorf("%s missing: %v", p, err)
		}
	}
	if l, err := os.Readlink(filepath.Join(layer, "etc/profile.d/link.sh")); err != nil || l != "/etc/shadow" {
		t.Errorf("symlink copied as %q, %v", l, err)
	}
	var parts []string
	for _, p := range tmpl.Parts {
		parts = append(parts, p.Target+"="+strings.Join(p.Layers, ","))
	}
	want := []string{"/=" + layer, "/usr=" + layer + "/usr," + host + "/usr", "/bin=" + host + "/bin"}
	if strings.Join(parts, " ") != strings.Join(want, " ") {
		t.Errorf("parts %v, want %v", parts, want)
	}
	if l, err := os.Readlink(filepath.Join(layer, "lib")); err != nil || l != "usr/lib" {
		t.Errorf("lib -> %q, %v", l, err)
	}
	if fi, err := os.Lstat(filepath.Join(layer, "bin")); err != nil || !fi.IsDir() {
		t.Errorf("bin mount point: %v", err)
	}
}

func TestTemplateNotFoundAndList(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	if _, err := s.writeManifest(&manifest{Name: "mine", Parts: []manifestPart{{Target: "/", Layers: []string{"img-abc"}}}, Source: "test"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nope", "../etc/passwd", "", "Host", strings.Repeat("a", 64)} {
		_, err := s.Template(ctx, name)
		if !errdefs.IsNotFound(err) {
			t.Errorf("Template(%q): %v, want not found", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "host, mine") {
			t.Errorf("error does not name the templates: %v", err)
		}
	}
	// The manifest's layer does not exist.
	if _, err := s.Template(ctx, "mine"); !errdefs.IsUnavailable(err) {
		t.Errorf("Template(mine) with its layer missing: %v", err)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != HostTemplate || !list[0].Builtin || list[1].Name != "mine" || list[1].Source != "test" {
		t.Errorf("List: %+v", list)
	}
	if err := s.DeleteTemplate(ctx, HostTemplate); !errdefs.IsInvalidArgument(err) {
		t.Errorf("deleting host: %v", err)
	}
	if err := s.DeleteTemplate(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("deleting nope: %v", err)
	}
	for _, bad := range []string{"-x", "a/b", "A", "a b", "..", strings.Repeat("x", 64)} {
		if err := apiv1.ValidTemplateName(bad); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	for _, good := range []string{"a", "debian", "my-img_1.2", strings.Repeat("x", 63)} {
		if err := apiv1.ValidTemplateName(good); err != nil {
			t.Errorf("name %q refused: %v", good, err)
		}
	}
	// Manifests on disk are checked too.
	os.WriteFile(filepath.Join(s.dir, "templates", "evil.json"),
		[]byte(`{"name":"evil","parts":[{"target":"/","layers":["../../etc"]}]}`), 0o600)
	if _, err := s.Template(ctx, "evil"); err == nil || errdefs.IsNotFound(err) {
		t.Errorf("manifest with a bad layer id: %v", err)
	}
}

// TestCleanup removes half-built leftovers and unreferenced image layers, and keeps the
// rest.
func TestCleanup(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	mk := func(p string) {
		full := filepath.Join(s.dir, p)
		os.MkdirAll(filepath.Dir(full), 0o700)
		if err := os.WriteFile(full, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mk("layers/.tmp-debian-1234/etc/passwd")
	mk("layers/.tmp-img-1/x")
	mk("templates/.tmp-foo-1.json")
	mk("drives/.tmp-sb-1-ab.img")
	mk("layers/img-used/x")
	mk("layers/img-orphan/x")
	mk("layers/repo-abc-def/workspace/x")
	mk("layers/host-etc-old/etc/passwd")
	mk("layers/img-mounted/etc/passwd")
	// A layer that a sandbox has mounted stays.
	lower := filepath.Join(t.TempDir(), "lower")
	if err := linux.IDMapMount(filepath.Join(s.dir, "layers/img-mounted"), lower, ""); err != nil {
		t.Fatal(err)
	}
	defer linux.UnmountAll(lower)
	mk("drives/sb-000000000001.img")
	// A half-built layer with something mounted inside (a crashed debootstrap's /proc).
	if err := os.MkdirAll(filepath.Join(s.dir, "layers/.tmp-debian-1234/proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", filepath.Join(s.dir, "layers/.tmp-debian-1234/proc"), "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	mk("layers/.tmp-debian-1234/proc/in-tmpfs")
	if _, err := s.writeManifest(&manifest{Name: "used", Parts: []manifestPart{{Target: "/", Layers: []string{"img-used"}}}}); err != nil {
		t.Fatal(err)
	}
	// Something being built right now is left alone.
	_, inflight, done, err := s.newTemp("img")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"layers/.tmp-debian-1234":               false,
		"layers/.tmp-img-1":                     false,
		"templates/.tmp-foo-1.json":             false,
		"drives/.tmp-sb-1-ab.img":               false,
		"layers/img-orphan":                     false,
		"layers/img-used":                       true,
		"layers/repo-abc-def":                   true,
		"drives/sb-000000000001.img":            true,
		"templates/used.json":                   true,
		strings.TrimPrefix(inflight, s.dir+"/"): true,
	} {
		_, err := os.Lstat(filepath.Join(s.dir, p))
		if (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", p, err == nil, want)
		}
	}
	done()
	if _, err := os.Lstat(inflight); err == nil {
		t.Error("temporary left after done")
	}
	// Deleting the template takes its layer.
	if err := s.DeleteTemplate(ctx, "used"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(s.dir, "layers/img-used")); err == nil {
		t.Error("layer of a deleted template kept")
	}
}

// TestHostTemplateHidesUsrConfig mounts the host template of a fake host whose /usr holds
// tool configuration with tokens: the sandbox's root filesystem shows the tools under
// /usr/local but none of the configuration, not even what the host adds after the mount.
func TestHostTemplateHidesUsrConfig(t *testing.T) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	host := t.TempDir()
	const canary = "MOAT-CANARY-USR-TOKEN"
	hidden := map[string]string{
		"usr/local/etc/npmrc":                    "//registry.npmjs.org/:_authToken=" + canary,
		"usr/local/etc/gitconfig":                "[http]\n\textraheader = AUTHORIZATION: " + canary,
		"usr/etc/npmrc":                          "_authToken=" + canary,
		"usr/pip.conf":                           "[global]\nindex-url = https://u:" + canary + "@pypi.example.test/simple",
		"usr/local/pip.conf":                     "[global]\nindex-url = https://u:" + canary + "@pypi.example.test/simple",
		"usr/local/cargo/credentials.toml":       "[registry]\ntoken = \"" + canary + "\"",
		"usr/local/cargo/credentials":            "[registry]\ntoken = \"" + canary + "\"",
		"usr/local/bundle/config":                "BUNDLE_GEMS__EXAMPLE__TEST: \"u:" + canary + "\"",
		"usr/local/etc/deeper/dir/config.json":   canary,
		"usr/local/etc/.hidden-token":            canary,
		"usr/etc/ssh/ssh_config.d/private-notes": canary,
	}
	kept := map[string]string{
		"usr/bin/env":                       "#!fake env",
		"usr/local/bin/tool":                "#!fake tool",
		"usr/local/go/bin/go":               "#!fake go",
		"usr/local/cargo/bin/cargo":         "#!fake cargo",
		"usr/local/lib/node_modules/x/a.js": "module.exports = 1",
		"usr/local/bundle/gems/x/x.rb":      "# a gem",
		"usr/share/doc/etc/README":          "not the etc you are looking for",
	}
	for p, data := range mapsJoin(hidden, kept) {
		full := filepath.Join(host, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// /usr/local as some distributions have it: setgid, group staff.
	if err := os.Chown(filepath.Join(host, "usr/local"), 0, 50); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(host, "usr/local"), fs.ModeSetgid|0o775); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bin", "lib"} {
		if err := os.Symlink("usr/"+d, filepath.Join(host, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(host, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.hostRoot = host
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing of the hidden files is in the layer itself.
	layer := tmpl.Parts[0].Layers[0]
	filepath.WalkDir(layer, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if d.Type().IsRegular() {
			if data, _ := os.ReadFile(p); bytes.Contains(data, []byte(canary)) {
				t.Errorf("canary in %s", p)
			}
		}
		return nil
	})

	const id = "sb-000000000021"
	_, rootfs := sandboxDirs(t, run, id)
	if err := s.CreateDrive(ctx, id, 64<<20); err != nil {
		t.Fatal(err)
	}
	if err := s.Mount(ctx, sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs}); err != nil {
		t.Fatal(err)
	}
	defer s.Unmount(ctx, id, rootfs)
	// Added on the host after the sandbox started.
	late := filepath.Join(host, "usr/local/etc/late-npmrc")
	if err := os.WriteFile(late, []byte(canary), 0o644); err != nil {
		t.Fatal(err)
	}
	hidden["usr/local/etc/late-npmrc"] = canary
	for p := range hidden {
		if _, err := os.Lstat(filepath.Join(rootfs, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/%s visible in the sandbox: %v", p, err)
		}
	}
	for _, dir := range []string{"usr/etc", "usr/local/etc"} {
		if _, err := os.Lstat(filepath.Join(rootfs, dir)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/%s visible in the sandbox: %v", dir, err)
		}
	}
	filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if data, _ := os.ReadFile(p); bytes.Contains(data, []byte(canary)) {
				t.Errorf("canary readable at %s", p)
			}
		}
		return nil
	})
	for p, want := range kept {
		if data, err := os.ReadFile(filepath.Join(rootfs, p)); err != nil || string(data) != want {
			t.Errorf("/%s: %q, %v (want the host's)", p, data, err)
		}
	}
	// The merged /usr/local keeps the host's mode and owner.
	fi, err := os.Stat(filepath.Join(rootfs, "usr/local"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode()&(fs.ModePerm|fs.ModeSetgid) != 0o775|fs.ModeSetgid || st.Uid != 0 || st.Gid != 50 {
		t.Errorf("/usr/local: %v %d:%d, want the host's drwxrwsr-x 0:50", fi.Mode(), st.Uid, st.Gid)
	}
	// The sandbox may make its own /usr/local/etc (in its upper).
	if err := os.MkdirAll(filepath.Join(rootfs, "usr/local/etc"), 0o755); err != nil {
		t.Errorf("creating /usr/local/etc inside: %v", err)
	}
	if entries, err := os.ReadDir(filepath.Join(rootfs, "usr/local/etc")); err != nil || len(entries) != 0 {
		t.Errorf("a new /usr/local/etc shows %v, %v", entries, err)
	}
}

func mapsJoin(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
