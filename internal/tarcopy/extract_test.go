package tarcopy

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

type tarEntry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func makeTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// snapshotTree lists every path under dir with its type, size and mode: what a test
// compares to prove nothing outside the destination changed.
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		content := ""
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			content = string(b)
		}
		out[p] = fi.Mode().String() + " " + content
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExtractHostile: streams that try to write outside the destination — "..", absolute
// names, a symlink then a write through it, a symlink already in the destination that
// points out — fail, and nothing outside the destination exists or changed afterwards.
func TestExtractHostile(t *testing.T) {
	reg, sym, dir := byte(tar.TypeReg), byte(tar.TypeSymlink), byte(tar.TypeDir)
	for _, tc := range []struct {
		name    string
		entries []tarEntry
		setup   func(t *testing.T, dst, outside string) // before extracting
		errHas  string
	}{
		{"dotdot", []tarEntry{{name: "../escaped", typ: reg, body: "x"}}, nil, `".."`},
		{"deep dotdot", []tarEntry{{name: "a/", typ: dir}, {name: "a/../../escaped", typ: reg, body: "x"}}, nil, `".."`},
		{"absolute", []tarEntry{{name: "OUTSIDE/escaped", typ: reg, body: "x"}}, nil, "absolute"},
		{"symlink then write", []tarEntry{{name: "l", typ: sym, link: "OUTSIDE"}, {name: "l/escaped", typ: reg, body: "x"}}, nil, "symlink made earlier"},
		{"symlink then mkdir", []tarEntry{{name: "l", typ: sym, link: "OUTSIDE"}, {name: "l/escaped/", typ: dir}}, nil, "symlink made earlier"},
		{"relative symlink then write", []tarEntry{{name: "d/", typ: dir}, {name: "d/l", typ: sym, link: "../.."}, {name: "d/l/escaped", typ: reg, body: "x"}}, nil, "symlink made earlier"},
		{"symlink then overwrite the link's target by name", []tarEntry{{name: "l", typ: sym, link: "OUTSIDE/victim"}, {name: "l", typ: reg, body: "pwned"}}, nil, "twice"},
		{"existing symlink in the destination", []tarEntry{{name: "pre/escaped", typ: reg, body: "x"}},
			func(t *testing.T, dst, outside string) {
				if err := os.Symlink(outside, filepath.Join(dst, "pre")); err != nil {
					t.Fatal(err)
				}
			}, "escapes"},
		{"existing symlink to a file outside", []tarEntry{{name: "victim/", typ: dir}, {name: "victim/x", typ: reg, body: "x"}},
			func(t *testing.T, dst, outside string) {
				if err := os.Symlink(filepath.Join(outside, "victim"), filepath.Join(dst, "victim")); err != nil {
					t.Fatal(err)
				}
			}, "escapes"},
		{"hard link to outside", []tarEntry{{name: "h", typ: tar.TypeLink, link: "OUTSIDE/victim"}}, nil, "hard link"},
		{"device", []tarEntry{{name: "null", typ: tar.TypeChar}}, nil, "type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dst, outside := filepath.Join(base, "dst"), filepath.Join(base, "outside")
			for _, d := range []string{dst, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("intact"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, dst, outside)
			}
			for i := range tc.entries {
				e := &tc.entries[i]
				e.name = strings.ReplaceAll(e.name, "OUTSIDE", outside)
				e.link = strings.ReplaceAll(e.link, "OUTSIDE", outside)
			}
			before := snapshotTree(t, base)
			root, err := os.OpenRoot(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			_, err = Extract(context.Background(), root, bytes.NewReader(makeTar(t, tc.entries...)), ExtractOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Extract: %v; want an error with %q", err, tc.errHas)
			}
			after := snapshotTree(t, base)
			for p, v := range after {
				if strings.HasPrefix(p, dst+"/") {
					continue
				}
				if before[p] != v {
					t.Errorf("outside the destination, %s is now %q (was %q)", p, v, before[p])
				}
			}
			for p := range before {
				if _, ok := after[p]; !ok {
					t.Errorf("%s disappeared", p)
				}
			}
			if _, err := os.Lstat(filepath.Join(base, "escaped")); err == nil {
				t.Errorf("%s/escaped was written", base)
			}
		})
	}
}

// TestExtractTree: a stream made by WriteTree extracts to the same tree: contents, modes
// (0o777 bits only: set-user-ID is dropped), symlinks as links (also dangling and
// absolute ones), empty and read-only directories, modification times; devices and FIFOs
// are left out and reported.
func TestExtractTree(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "sub/empty"), 0o755))
	must(os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(src, "sub/secret"), []byte("s"), 0o600))
	must(os.WriteFile(filepath.Join(src, "suid"), []byte("x"), 0o644))
	must(os.Chmod(filepath.Join(src, "suid"), 0o4755))
	must(os.Symlink("sub/secret", filepath.Join(src, "rel-link")))
	must(os.Symlink("/etc/passwd", filepath.Join(src, "abs-link")))
	must(os.Symlink("nowhere", filepath.Join(src, "dangling")))
	must(os.Symlink("sub", filepath.Join(src, "dir-link")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))
	must(os.Mkdir(filepath.Join(src, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(src, "ro/f"), []byte("ro"), 0o444))
	must(os.Chmod(filepath.Join(src, "ro"), 0o555))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(os.Chtimes(filepath.Join(src, "run.sh"), old, old))
	t.Cleanup(func() { os.Chmod(filepath.Join(src, "ro"), 0o755) })

	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	var skipped []string
	must(WriteTree(context.Background(), tw, src, "src", func(rel, what string) { skipped = append(skipped, rel+": "+what) }))
	must(tw.Close())
	if len(skipped) != 1 || skipped[0] != "src/fifo: a FIFO" {
		t.Errorf("skipped %q, want the FIFO", skipped)
	}

	out := t.TempDir()
	root, err := os.OpenRoot(out)
	must(err)
	defer root.Close()
	st, err := Extract(context.Background(), root, &b, ExtractOptions{Top: "dst"})
	must(err)
	dst := filepath.Join(out, "dst")
	t.Cleanup(func() { os.Chmod(filepath.Join(dst, "ro"), 0o755) })
	if st.Entries != 12 {
		t.Errorf("%d entries, want 12", st.Entries)
	}
	for rel, want := range map[string]string{
		".": "drwxr-xr-x", "run.sh": "-rwxr-xr-x", "sub/secret": "-rw-------", "suid": "-rwxr-xr-x",
		"sub/empty": "drwxr-xr-x", "ro": "dr-xr-xr-x", "ro/f": "-r--r--r--",
		"rel-link": "Lrwxrwxrwx", "abs-link": "Lrwxrwxrwx", "dangling": "Lrwxrwxrwx", "dir-link": "Lrwxrwxrwx",
	} {
		fi, err := os.Lstat(filepath.Join(dst, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if fi.Mode().String() != want {
			t.Errorf("%s: mode %s, want %s", rel, fi.Mode(), want)
		}
	}
	for rel, want := range map[string]string{"rel-link": "sub/secret", "abs-link": "/etc/passwd", "dangling": "nowhere", "dir-link": "sub"} {
		if got, err := os.Readlink(filepath.Join(dst, rel)); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want %q", rel, got, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "run.sh")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("run.sh: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("run.sh mtime %v, want %v", fi.ModTime(), old)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); err == nil {
		t.Error("the FIFO was copied")
	}
}

// TestExtractMaxBytes: an entry that would bring the copy over MaxBytes is refused before
// any of it is written.
func TestExtractMaxBytes(t *testing.T) {
	data := makeTar(t, tarEntry{name: "a", typ: tar.TypeReg, body: strings.Repeat("a", 1000)},
		tarEntry{name: "b", typ: tar.TypeReg, body: strings.Repeat("b", 1000)})
	out := t.TempDir()
	root, err := os.OpenRoot(out)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = Extract(context.Background(), root, bytes.NewReader(data), ExtractOptions{MaxBytes: 2000})
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("Extract: %v, want ErrTooLarge", err)
	}
	if _, err := os.Lstat(filepath.Join(out, "b")); err == nil {
		t.Error("b was written")
	}
	if _, err := Extract(context.Background(), root, bytes.NewReader(data), ExtractOptions{MaxBytes: 3024}); err != nil {
		t.Errorf("within the limit: %v", err)
	}
}

// TestExtractReplaces: a file replaces a file or a symlink at its path (the symlink's
// target is untouched); a file over a directory is a conflict.
func TestExtractReplaces(t *testing.T) {
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "target"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", filepath.Join(out, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(out, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(out)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := Extract(context.Background(), root, bytes.NewReader(makeTar(t, tarEntry{name: "link", typ: tar.TypeReg, body: "new"})), ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "target")); string(b) != "keep" {
		t.Errorf("the old link's target became %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(out, "link")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("link was not replaced by a file: %v", err)
	}
	_, err = Extract(context.Background(), root, bytes.NewReader(makeTar(t, tarEntry{name: "d", typ: tar.TypeReg, body: "x"})), ExtractOptions{})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("file over a directory: %v, want a conflict", err)
	}
}

// FuzzExtract: whatever bytes arrive as a tar stream, nothing is made outside the
// destination.
func FuzzExtract(f *testing.F) {
	f.Add(makeTar(f, tarEntry{name: "l", typ: tar.TypeSymlink, link: ".."}, tarEntry{name: "l/x", typ: tar.TypeReg, body: "x"}))
	f.Add(makeTar(f, tarEntry{name: "../x", typ: tar.TypeReg, body: "x"}))
	f.Add(makeTar(f, tarEntry{name: "d/", typ: tar.TypeDir}, tarEntry{name: "d/f", typ: tar.TypeReg, body: "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		dst := filepath.Join(base, "dst")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dst)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		_, _ = Extract(context.Background(), root, bytes.NewReader(data), ExtractOptions{MaxBytes: 1 << 20})
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 {
			t.Fatalf("made %v beside the destination", ents)
		}
		filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755) // so that TempDir's cleanup can remove it
			}
			return nil
		})
	})
}

// TestExtractDropsSpecialBits: a stream's set-user-ID, set-group-ID and sticky bits are
// not made: a sandbox cannot plant a set-user-ID file on the host.
func TestExtractDropsSpecialBits(t *testing.T) {
	out := t.TempDir()
	root, err := os.OpenRoot(out)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	data := makeTar(t, tarEntry{name: "suid", typ: tar.TypeReg, mode: 0o4755, body: "x"},
		tarEntry{name: "sgid", typ: tar.TypeReg, mode: 0o2755, body: "x"},
		tarEntry{name: "sticky/", typ: tar.TypeDir, mode: 0o1777})
	if _, err := Extract(context.Background(), root, bytes.NewReader(data), ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{"suid": 0o755, "sgid": 0o755, "sticky": fs.ModeDir | 0o777} {
		fi, err := os.Lstat(filepath.Join(out, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: %v, %v; want %v", name, fi.Mode(), err, want)
		}
	}
}

// TestExtractEndlessHeaders: a stream of headers that make no entry (GNU long names, one
// after another) ends at the stream bound instead of being read forever.
func TestExtractEndlessHeaders(t *testing.T) {
	hdr := make([]byte, 1024) // a GNU long-name header and its one block of name
	copy(hdr, "././@LongLink")
	copy(hdr[100:], "0000644\x00")
	copy(hdr[124:], "00000000100\x00") // 64 bytes of name
	hdr[156] = 'L'
	copy(hdr[257:], "ustar  \x00")
	sum := 0
	for i := range 512 {
		if i >= 148 && i < 156 {
			sum += ' '
		} else {
			sum += int(hdr[i])
		}
	}
	copy(hdr[148:], fmt.Sprintf("%06o\x00 ", sum))
	for i := 512; i < 576; i++ {
		hdr[i] = 'a'
	}
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	endless := &repeatReader{b: hdr}
	_, err = Extract(context.Background(), root, endless, ExtractOptions{MaxBytes: 1 << 20})
	if !errors.Is(err, ErrTooLarge) && !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("Extract: %v, want the stream bound", err)
	}
	if endless.n > 4<<20 {
		t.Errorf("read %d bytes", endless.n)
	}
}

type repeatReader struct {
	b []byte
	i int
	n int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.i:])
		n += c
		r.i = (r.i + c) % len(r.b)
	}
	r.n += int64(n)
	return n, nil
}
