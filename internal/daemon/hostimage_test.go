package daemon_test

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostImage builds, in memory, the one layer of a small test image from host files: host
// programs with their libraries, and files and directories the test names.
type hostImage struct {
	t    *testing.T
	buf  bytes.Buffer
	tw   *tar.Writer
	seen map[string]bool
}

func newHostImage(t *testing.T) *hostImage {
	im := &hostImage{t: t, seen: map[string]bool{}}
	im.tw = tar.NewWriter(&im.buf)
	return im
}

// write adds one entry; a name already written is skipped.
func (im *hostImage) write(h *tar.Header, data []byte) {
	if im.seen[h.Name] {
		return
	}
	im.seen[h.Name] = true
	if err := im.tw.WriteHeader(h); err != nil {
		im.t.Fatal(err)
	}
	if data != nil {
		if _, err := im.tw.Write(data); err != nil {
			im.t.Fatal(err)
		}
	}
}

// path adds host path p (absolute) with its parent directories and every symlink on the
// way, as the host has them.
func (im *hostImage) path(p string) {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := ""
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat("/" + cur)
		if err != nil {
			im.t.Fatal(err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink("/" + cur)
			im.write(&tar.Header{Name: cur, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, nil)
			if !filepath.IsAbs(target) {
				target = filepath.Join("/", filepath.Dir(cur), target)
			}
			im.path(filepath.Join(append([]string{target}, parts[i+1:]...)...))
			return
		case fi.IsDir():
			im.write(&tar.Header{Name: cur + "/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
		default:
			data, err := os.ReadFile("/" + cur)
			if err != nil {
				im.t.Fatal(err)
			}
			im.write(&tar.Header{Name: cur, Typeflag: tar.TypeReg, Mode: int64(fi.Mode().Perm()), Size: int64(len(data))}, data)
		}
	}
}

// program adds host program p (a path) and the libraries ldd names for it.
func (im *hostImage) program(p string) {
	im.path(p)
	out, err := exec.Command("ldd", p).Output()
	if err != nil {
		im.t.Fatalf("ldd %s: %v", p, err)
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			im.path(f)
		}
	}
}

func (im *hostImage) file(name, data string, mode int64) {
	im.write(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))}, []byte(data))
}

func (im *hostImage) dir(name string, mode int64, uid int) {
	im.write(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, Uid: uid, Gid: uid}, nil)
}

// homes adds /etc, /tmp, /root, /home/user and a passwd and group of root and user, whose
// shell is shell.
func (im *hostImage) homes(shell string) {
	im.dir("etc", 0o755, 0)
	im.dir("tmp", 0o1777, 0)
	im.dir("home", 0o755, 0)
	im.dir("home/user", 0o755, 1000)
	im.dir("root", 0o700, 0)
	im.file("etc/passwd", "root:x:0:0:root:/root:"+shell+"\nuser:x:1000:1000:user:/home/user:"+shell+"\n", 0o644)
	im.file("etc/group", "root:x:0:\nuser:x:1000:\n", 0o644)
}

// layer ends the tar and returns it.
func (im *hostImage) layer() []byte {
	if err := im.tw.Close(); err != nil {
		im.t.Fatal(err)
	}
	return im.buf.Bytes()
}
