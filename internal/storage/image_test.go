package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/moatdev/moat/internal/errdefs"
)

// testImage has two layers: the upper one whites out a file, makes a directory opaque and
// adds a file; the lower one has a symlink, a set-uid file, a file owned by 1000 and a
// device node.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	lower := tarLayer(t, []tarEntry{
		{name: "etc/", typ: tar.TypeDir},
		{name: "etc/a", body: "one"},
		{name: "etc/gone", body: "whited out"},
		{name: "d/", typ: tar.TypeDir},
		{name: "d/x", body: "hidden by opaque"},
		{name: "usr/bin/", typ: tar.TypeDir},
		{name: "usr/bin/suid", body: "#!", mode: 0o4755},
		{name: "usr/bin/hard", typ: tar.TypeLink, link: "usr/bin/suid"},
		{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		{name: "abs", typ: tar.TypeSymlink, link: "/etc/a"},
		{name: "home/user/", typ: tar.TypeDir, uid: 1000, gid: 1000, mode: 0o750},
		{name: "home/user/f", body: "mine", uid: 1000, gid: 1000, xattrs: map[string]string{"user.moat": "yes"}},
		{name: "dev/null", typ: tar.TypeChar},
	})
	upper := tarLayer(t, []tarEntry{
		{name: "etc/.wh.gone"},
		{name: "d/.wh..wh..opq"},
		{name: "d/y", body: "upper"},
		{name: "etc/a", body: "two"},
	})
	img, err := mutate.AppendLayers(empty.Image, lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Config.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	cfg.Config.User = "user"
	cfg.Config.WorkingDir = "/home/user"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// checkImageLayer verifies the flattened testImage in the template's layer.
func checkImageLayer(t *testing.T, s *Store, tmplName string) {
	t.Helper()
	tmpl, err := s.Template(context.Background(), tmplName)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tmpl.Env, []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}) || tmpl.User != "user" || tmpl.Workdir != "/home/user" {
		t.Errorf("config not kept: %+v", tmpl)
	}
	if len(tmpl.Parts) != 1 || len(tmpl.Parts[0].Layers) != 1 {
		t.Fatalf("parts %+v", tmpl.Parts)
	}
	layer := tmpl.Parts[0].Layers[0]
	got := listTree(t, layer)
	want := []string{
		". d---------", "abs L---------", "bin L---------", "d d---------", "d/y ----------",
		"etc d---------", "etc/a ----------", "home d---------", "home/user d---------",
		"home/user/f ----------", "usr d---------", "usr/bin d---------",
		"usr/bin/hard ----------", "usr/bin/suid ----------",
	}
	if !slices.Equal(got, want) {
		t.Errorf("layer tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if data, _ := os.ReadFile(filepath.Join(layer, "etc/a")); string(data) != "two" {
		t.Errorf("etc/a = %q, want the upper layer's", data)
	}
	if l, _ := os.Readlink(filepath.Join(layer, "abs")); l != "/etc/a" {
		t.Errorf("abs -> %q", l)
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(layer, "usr/bin/suid"), &st)
	if st.Mode&0o7777 != 0o4755 || st.Nlink != 2 {
		t.Errorf("suid: mode %o nlink %d", st.Mode&0o7777, st.Nlink)
	}
	syscall.Stat(filepath.Join(layer, "home/user"), &st)
	if st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o7777 != 0o750 {
		t.Errorf("home/user: %d:%d %o", st.Uid, st.Gid, st.Mode&0o7777)
	}
	buf := make([]byte, 16)
	if n, err := syscall.Getxattr(filepath.Join(layer, "home/user/f"), "user.moat", buf); err != nil || string(buf[:n]) != "yes" {
		t.Errorf("xattr user.moat: %q, %v", buf[:n], err)
	}
	fi, _ := os.Stat(layer)
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("layer root mode %v", fi.Mode())
	}
}

func TestImportDockerArchive(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	img := testImage(t)
	p := filepath.Join(t.TempDir(), "img.tar")
	tag, _ := name.NewTag("example.test/img:1")
	if err := tarball.WriteToFile(p, tag, img); err != nil {
		t.Fatal(err)
	}
	var lines []string
	info, err := s.Import(ctx, "imported", p, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "imported" || info.Layers != 1 || !strings.HasPrefix(info.Source, "import ") {
		t.Errorf("info %+v", info)
	}
	if len(lines) == 0 {
		t.Error("no progress")
	}
	checkImageLayer(t, s, "imported")
	// The same image again reuses the layer.
	if _, err := s.Import(ctx, "again", p, nil); err != nil {
		t.Fatal(err)
	}
	a, _ := s.Template(ctx, "imported")
	b, _ := s.Template(ctx, "again")
	if a.Parts[0].Layers[0] != b.Parts[0].Layers[0] {
		t.Error("same image unpacked twice")
	}
	// Replacing "imported" keeps the layer "again" still uses; deleting both drops it.
	if err := s.DeleteTemplate(ctx, "imported"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Parts[0].Layers[0]); err != nil {
		t.Fatal("shared layer removed")
	}
	if err := s.DeleteTemplate(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(b.Parts[0].Layers[0]); err == nil {
		t.Fatal("unused layer kept")
	}

	for _, c := range []struct{ name, path string }{
		{"host", p}, {"Bad/Name", p}, {"x", filepath.Join(t.TempDir(), "missing.tar")}, {"x", "/etc/hostname"},
	} {
		if _, err := s.Import(ctx, c.name, c.path, nil); err == nil {
			t.Errorf("Import(%q, %q) succeeded", c.name, c.path)
		}
	}
}

// tarDir packs dir into a tar file.
func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, _ := d.Info()
		h, _ := tar.FileInfoHeader(fi, "")
		h.Name = rel
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			_, err = tw.Write(data)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestImportOCILayout(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	// An arm64 decoy first: the amd64 image must be picked.
	decoy, _ := mutate.AppendLayers(empty.Image, tarLayer(t, []tarEntry{{name: "decoy", body: "arm"}}))
	if err := lp.AppendImage(decoy, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"})); err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(testImage(t), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "oci.tar")
	tarDir(t, dir, p)
	if _, err := s.Import(ctx, "oci", p, nil); err != nil {
		t.Fatal(err)
	}
	checkImageLayer(t, s, "oci")

	// A layout whose blob is a symlink to a host file is refused.
	evil := t.TempDir()
	os.WriteFile(filepath.Join(evil, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	os.WriteFile(filepath.Join(evil, "index.json"), []byte(`{"schemaVersion":2,"manifests":[]}`), 0o644)
	os.MkdirAll(filepath.Join(evil, "blobs/sha256"), 0o755)
	os.Symlink("/etc/hostname", filepath.Join(evil, "blobs/sha256/0000"))
	ep := filepath.Join(t.TempDir(), "evil.tar")
	tarDir(t, evil, ep)
	if _, err := s.Import(ctx, "evil", ep, nil); !errdefs.IsInvalidArgument(err) {
		t.Errorf("layout with a symlink: %v, want invalid argument", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.dir, "layers")); len(entries) != 1 {
		t.Errorf("layers/ after a refused import: %v", entries)
	}
}

// TestPull pulls from a registry on 127.0.0.1 (nothing leaves the machine).
func TestPull(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := ctxT(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("registry not on loopback: %s", host)
	}
	ref, err := name.ParseReference(host + "/team/img:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, testImage(t)); err != nil {
		t.Fatal(err)
	}
	info, err := s.Pull(ctx, "pulled", host+"/team/img:v1", nil, PullOptions{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info.Source, host+"/team/img@sha256:") {
		t.Errorf("source %q", info.Source)
	}
	checkImageLayer(t, s, "pulled")

	if _, err := s.Pull(ctx, "x", host+"/team/missing:v1", nil, PullOptions{}); !errdefs.IsNotFound(err) {
		t.Errorf("missing image: %v, want not found", err)
	}
	if _, err := s.Pull(ctx, "x", "UPPER CASE!", nil, PullOptions{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("bad reference: %v, want invalid argument", err)
	}
	srv.Close()
	if _, err := s.Pull(ctx, "x", host+"/team/img:v1", nil, PullOptions{}); !errdefs.IsUnavailable(err) {
		t.Errorf("registry down: %v, want unavailable", err)
	}
}

// TestExtractRefusesEscapes feeds hostile tars to the extractor: each is refused and nothing
// appears outside the root.
func TestExtractRefusesEscapes(t *testing.T) {
	requireRoot(t)
	for _, c := range []struct {
		name    string
		entries []tarEntry
	}{
		{"dotdot", []tarEntry{{name: "../x", body: "escaped"}}},
		{"dotdot inside", []tarEntry{{name: "a/../../x", body: "escaped"}}},
		{"absolute", []tarEntry{{name: "/x", body: "escaped"}}},
		{"symlink then file", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "../outside"}, {name: "l/x", body: "escaped"}}},
		{"absolute symlink then file", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "/"}, {name: "l/x", body: "escaped"}}},
		{"symlink to dot then file", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "."}, {name: "l/x", body: "through"}}},
		{"symlink dir then dir", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "../outside"}, {name: "l/d/", typ: tar.TypeDir}}},
		{"hardlink out", []tarEntry{{name: "h", typ: tar.TypeLink, link: "../outside/canary"}}},
		{"hardlink absolute", []tarEntry{{name: "h", typ: tar.TypeLink, link: "/etc/shadow"}}},
		{"hardlink through symlink", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "../outside"}, {name: "h", typ: tar.TypeLink, link: "l/canary"}}},
		{"hardlink to dir", []tarEntry{{name: "d/", typ: tar.TypeDir}, {name: "h", typ: tar.TypeLink, link: "d"}}},
		{"file as parent", []tarEntry{{name: "f", body: "x"}, {name: "f/x", body: "y"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			os.MkdirAll(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "canary"), []byte("canary"), 0o644)
			os.MkdirAll(filepath.Join(base, "root"), 0o755)
			root, err := os.OpenRoot(filepath.Join(base, "root"))
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			_, err = extractTar(context.Background(), bytes.NewReader(makeTar(t, c.entries)), root, extractOptions{})
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("extract: %v, want invalid argument", err)
			}
			if got := listTree(t, outside); !slices.Equal(got, []string{". d---------", "canary ----------"}) {
				t.Errorf("outside changed: %v", got)
			}
			if got := listTree(t, base); len(got) > 0 {
				for _, e := range got {
					if !strings.HasPrefix(e, "root") && !strings.HasPrefix(e, "outside") && !strings.HasPrefix(e, ". ") {
						t.Errorf("written next to the root: %s", e)
					}
				}
			}
			var st syscall.Stat_t
			syscall.Stat(filepath.Join(outside, "canary"), &st)
			if st.Nlink != 1 {
				t.Error("canary got a hard link")
			}
		})
	}
}

// TestExtractReplaces checks the tar semantics the extractor keeps: a later entry replaces
// an earlier one, a repeated directory keeps its first header, special files are skipped.
func TestExtractReplaces(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	st, err := extractTar(context.Background(), bytes.NewReader(makeTar(t, []tarEntry{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "a/b/c", body: "deep"}, // parents made implicitly
		{name: "a/", typ: tar.TypeDir, mode: 0o700},
		{name: "a/", typ: tar.TypeDir, mode: 0o777}, // a lower layer's copy: ignored
		{name: "x", body: "first"},
		{name: "x", body: "second"},
		{name: "y/", typ: tar.TypeDir},
		{name: "y/z", body: "z"},
		{name: "y", typ: tar.TypeSymlink, link: "x"}, // replaces the directory
		{name: "fifo", typ: tar.TypeFifo},
		{name: "blk", typ: tar.TypeBlock},
	})), root, extractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Skipped != 2 {
		t.Errorf("skipped %d, want 2", st.Skipped)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "x")); string(data) != "second" {
		t.Errorf("x = %q", data)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a")); fi.Mode().Perm() != 0o700 {
		t.Errorf("a mode %v", fi.Mode())
	}
	if l, _ := os.Readlink(filepath.Join(dir, "y")); l != "x" {
		t.Errorf("y -> %q", l)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "a/b/c")); string(data) != "deep" {
		t.Errorf("a/b/c = %q", data)
	}
}

func TestEntryPath(t *testing.T) {
	for in, want := range map[string]string{
		"a": "a", "./a": "a", "a/": "a", "a//b": "a/b", "./": ".", ".": ".", "a/./b": "a/b",
	} {
		if got, err := entryPath(in); err != nil || got != want {
			t.Errorf("entryPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/", "/a", "..", "../a", "a/..", "a/../b", "a\x00b"} {
		if got, err := entryPath(in); err == nil {
			t.Errorf("entryPath(%q) = %q, want an error", in, got)
		}
	}
	_ = io.EOF
}

// TestExtractSparseBomb: a 10 KiB tar holding a 2 GiB sparse file becomes a sparse file
// (holes, not 2 GiB of zeroes on disk), and content beyond the size limit is refused.
func TestExtractSparseBomb(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("GNU tar needed to write a sparse archive")
	}
	src := t.TempDir()
	f, _ := os.Create(filepath.Join(src, "big"))
	f.Truncate(2 << 30)
	f.WriteAt([]byte("data"), 1<<30)
	f.Close()
	archive := filepath.Join(t.TempDir(), "sparse.tar")
	if out, err := exec.Command("tar", "--format=pax", "-S", "-C", src, "-cf", archive, "big").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	extract := func(limit int64) (string, error) {
		dir := t.TempDir()
		root, _ := os.OpenRoot(dir)
		defer root.Close()
		in, _ := os.Open(archive)
		defer in.Close()
		_, err := extractTar(context.Background(), in, root, extractOptions{MaxBytes: limit})
		return dir, err
	}
	dir, err := extract(0)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "big"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 2<<30 || st.Blocks*512 > 1<<20 {
		t.Errorf("size %d, %d bytes allocated", st.Size, st.Blocks*512)
	}
	data := make([]byte, 4)
	g, _ := os.Open(filepath.Join(dir, "big"))
	g.ReadAt(data, 1<<30)
	g.Close()
	if string(data) != "data" {
		t.Errorf("content %q", data)
	}
	if _, err := extract(1 << 30); !errdefs.IsInvalidArgument(err) {
		t.Errorf("beyond the limit: %v, want invalid argument", err)
	}
}

func TestImageTemplateName(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5000/library/alpine:3.20": "alpine-3.20",
		"debian":                             "debian",
		"reg/x/busybox@sha256:abc":           "busybox",
	} {
		if got := ImageTemplateName(in); got != want {
			t.Errorf("ImageTemplateName(%q) = %q, want %q", in, got, want)
		}
	}
}
