package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/moatdev/moat/internal/linux"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts, loop devices, chown)")
	}
}

// newTestStore makes a store in fresh temporary data and run directories.
func newTestStore(t testing.TB) (*Store, string) {
	t.Helper()
	requireRoot(t)
	data, run := t.TempDir(), t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s, err := New(data, run, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, run
}

// sandboxDirs returns the run directory and rootfs target of sandbox id, and registers an
// unmount of everything below the run directory at test end.
func sandboxDirs(t testing.TB, run, id string) (string, string) {
	t.Helper()
	dir := filepath.Join(run, "sandboxes", id)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := linux.UnmountAll(dir); err != nil {
			t.Errorf("cleanup unmount: %v", err)
		}
	})
	return dir, filepath.Join(dir, "rootfs")
}

// newUserNS pins a user namespace mapping 0..65535 to host..host+65535 in dir/userns.
func newUserNS(t testing.TB, dir string, host uint32) string {
	t.Helper()
	files := linux.NamespaceFiles{User: filepath.Join(dir, "userns"), Net: filepath.Join(dir, "netns")}
	if err := linux.CreateUserAndNetNS(files, linux.IDRange{Host: host, Size: 65536}, linux.OwnerRange); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = linux.UnmountFile(files.User)
		_ = linux.UnmountFile(files.Net)
	})
	return files.User
}

// mountsBelow lists the mount points at or below dir.
func mountsBelow(t testing.TB, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// tarEntry describes one entry of a test tar.
type tarEntry struct {
	name     string
	typ      byte
	body     string
	link     string
	mode     int64
	uid, gid int
	xattrs   map[string]string
}

func makeTar(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode,
			Uid: e.uid, Gid: e.gid, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tarLayer(t testing.TB, entries []tarEntry) v1.Layer {
	t.Helper()
	data := makeTar(t, entries)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// listTree returns "path type" lines for everything under dir, sorted.
func listTree(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel+" "+fi.Mode().Type().String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
