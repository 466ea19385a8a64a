package storage

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

func TestHostMirror(t *testing.T) {
	dir := t.TempDir()
	if got := hostMirror(dir, "bookworm"); got != fallbackMirror {
		t.Errorf("no sources: %q", got)
	}
	os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)
	os.WriteFile(filepath.Join(dir, "sources.list.d", "debian.sources"), []byte(`Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
# a comment
URIs: https://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
`), 0o644)
	if got := hostMirror(dir, "bookworm"); got != "https://mirror.example/debian" {
		t.Errorf("deb822: %q", got)
	}
	os.WriteFile(filepath.Join(dir, "sources.list"), []byte(`# comment
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/x.gpg] http://list.example/debian bookworm main contrib
`), 0o644)
	if got := hostMirror(dir, "bookworm"); got != "http://list.example/debian" {
		t.Errorf("sources.list: %q", got)
	}
}

func TestBuildUnknownRecipe(t *testing.T) {
	s, _ := newTestStore(t)
	if _, err := s.Build(ctxT(t), "alpine", nil, BuildOptions{}); !errdefs.IsNotFound(err) {
		t.Errorf("Build(alpine): %v, want not found", err)
	}
	if _, err := s.Build(ctxT(t), DebianTemplate, nil, BuildOptions{Mirror: "file:///etc"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Build with a file: mirror: %v, want invalid argument", err)
	}
}

// TestBuildDebian runs the real debootstrap build (minutes, needs the Debian mirror):
// MOAT_TEST_DEBOOTSTRAP=1 go test -run TestBuildDebian -v ./internal/storage/
func TestBuildDebian(t *testing.T) {
	if os.Getenv("MOAT_TEST_DEBOOTSTRAP") != "1" {
		t.Skip("set MOAT_TEST_DEBOOTSTRAP=1 to run debootstrap (takes minutes)")
	}
	s, run := newTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	lines := 0
	info, err := s.Build(ctx, DebianTemplate, func(line string) {
		lines++
		if testing.Verbose() && (strings.HasPrefix(line, "I: Retrieving") || !strings.HasPrefix(line, "I: ")) {
			t.Log(line)
		}
	}, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %+v in %s (%d progress lines)", info, time.Since(start).Round(time.Second), lines)
	if err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	tmpl, err := s.Template(ctx, DebianTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if len(tmpl.Parts) != 1 || tmpl.Parts[0].Target != "/" || len(tmpl.Parts[0].Layers) != 1 {
		t.Fatalf("parts %+v", tmpl.Parts)
	}
	layer := tmpl.Parts[0].Layers[0]
	out, _ := exec.Command("du", "-sh", layer).CombinedOutput()
	t.Logf("layer: %s", bytes.TrimSpace(out))

	const id = "sb-00000000deb1"
	dir, rootfs := sandboxDirs(t, run, id)
	if err := s.CreateDrive(ctx, id, 1<<30); err != nil {
		t.Fatal(err)
	}
	// Plain mount: the host's root can run the image's programs with chroot.
	if err := s.Mount(ctx, sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs}); err != nil {
		t.Fatal(err)
	}
	passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	if !strings.Contains(string(passwd), "user:x:1000:1000::/home/user:/bin/bash") {
		t.Errorf("passwd:\n%s", passwd)
	}
	for _, c := range []struct {
		path string
		mode uint32
	}{{"etc/sudoers.d/user", 0o440}, {"usr/bin/sudo", 0o4755}, {"home/user", 0o755}} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(rootfs, c.path), &st); err != nil || st.Mode&0o7777 != c.mode {
			t.Errorf("%s: mode %o, %v; want %o", c.path, st.Mode&0o7777, err, c.mode)
		}
	}
	if mid, err := os.ReadFile(filepath.Join(rootfs, "etc/machine-id")); err != nil || len(mid) != 0 {
		t.Errorf("machine-id %q, %v", mid, err)
	}
	if debs, _ := filepath.Glob(filepath.Join(rootfs, "var/cache/apt/archives/*.deb")); len(debs) > 0 {
		t.Errorf("apt cache not cleaned: %d debs", len(debs))
	}
	if resolv, _ := os.ReadFile(filepath.Join(rootfs, "etc/resolv.conf")); string(resolv) != synthResolv {
		t.Errorf("resolv.conf is %q", resolv)
	}
	for _, args := range [][]string{
		{"/usr/bin/python3", "-c", "print('py ok')"},
		{"/usr/bin/git", "--version"},
		{"/usr/bin/curl", "--version"},
		{"/usr/bin/sudo", "-l", "-U", "user"},
		{"/usr/bin/id", "user"},
	} {
		out, err := exec.Command("chroot", append([]string{rootfs}, args...)...).CombinedOutput()
		if err != nil {
			t.Errorf("%v: %v\n%s", args, err, out)
			continue
		}
		t.Logf("%v: %s", args, strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0])
	}
	if err := s.Unmount(ctx, id, rootfs); err != nil {
		t.Fatal(err)
	}
	// Through the sandbox's user namespace its root owns the image.
	userns := newUserNS(t, dir, testHostUID)
	if err := s.Mount(ctx, sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs, UserNS: userns, RootUID: testHostUID}); err != nil {
		t.Fatal(err)
	}
	defer s.Unmount(ctx, id, rootfs)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(rootfs, "usr/bin/sudo"), &st); err != nil || st.Uid != testHostUID || st.Mode&0o4000 == 0 {
		t.Errorf("sudo: uid %d mode %o, %v", st.Uid, st.Mode, err)
	}
}
