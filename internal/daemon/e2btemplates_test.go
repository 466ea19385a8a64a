package daemon

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

type tarEntry struct {
	name, body, link string
	typ              byte
}

func makeTar(t *testing.T, gz bool, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// TestE2BPutFiles: an upload (gzipped, as the SDK sends it, or plain) is unpacked under its
// scope and hash only; a hostile tar (.., absolute, a write through a symlink it made, a
// device) leaves nothing behind, nor anything outside; an upload over the limit is
// refused; scopes and hashes not of the API server's making are refused.
func TestE2BPutFiles(t *testing.T) {
	data := t.TempDir()
	e := newE2BTemplates(templates{}, data)
	ctx := context.Background()
	hash := strings.Repeat("a1", 32)
	scope := "key-" + strings.Repeat("0f", 10)
	good := makeTar(t, true, tarEntry{name: "app/", typ: tar.TypeDir}, tarEntry{name: "app/index.html", body: "hi\n"},
		tarEntry{name: "app/link", typ: tar.TypeSymlink, link: "index.html"})
	if err := e.PutFiles(ctx, scope, hash, bytes.NewReader(good), 1<<20); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "e2b-files", scope, hash, "app", "index.html")); err != nil || string(b) != "hi\n" {
		t.Fatalf("unpacked file: %q %v", b, err)
	}
	if !e.FilesPresent(scope, hash) || e.FilesPresent("operator", hash) || e.FilesPresent(scope, strings.Repeat("b2", 32)) {
		t.Error("FilesPresent: want present for the uploader's scope and hash only")
	}
	plain := makeTar(t, false, tarEntry{name: "f.txt", body: "plain\n"})
	if err := e.PutFiles(ctx, "operator", strings.Repeat("c3", 32), bytes.NewReader(plain), 1<<20); err != nil {
		t.Fatalf("plain tar: %v", err)
	}

	outside := filepath.Join(data, "escaped")
	for _, c := range []struct {
		name    string
		entries []tarEntry
	}{
		{"dot-dot", []tarEntry{{name: "../../escaped", body: "x"}}},
		{"absolute", []tarEntry{{name: outside, body: "x"}}},
		{"through its own symlink", []tarEntry{{name: "l", typ: tar.TypeSymlink, link: data}, {name: "l/escaped", body: "x"}}},
		{"device", []tarEntry{{name: "dev", typ: tar.TypeChar}}},
		{"hard link", []tarEntry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}},
	} {
		h := strings.Repeat("d4", 32)
		err := e.PutFiles(ctx, scope, h, bytes.NewReader(makeTar(t, true, c.entries...)), 1<<20)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
		}
		if e.FilesPresent(scope, h) {
			t.Errorf("%s: the upload is present after a refusal", c.name)
		}
		if _, err := os.Lstat(outside); err == nil {
			t.Fatalf("%s: wrote %s", c.name, outside)
		}
	}
	big := makeTar(t, true, tarEntry{name: "big", body: strings.Repeat("x", 4096)})
	if err := e.PutFiles(ctx, scope, strings.Repeat("e5", 32), bytes.NewReader(big), 1024); err == nil || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("over the limit: %v", err)
	}
	for _, s := range []string{"", "../x", "key-../../etc", "key-" + strings.Repeat("0f", 11), "operator/.."} {
		if err := e.PutFiles(ctx, s, hash, bytes.NewReader(good), 1<<20); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("scope %q: %v", s, err)
		}
	}
	if err := e.PutFiles(ctx, scope, "../"+hash[3:], bytes.NewReader(good), 1<<20); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad hash: %v", err)
	}
	// Nothing but the uploads and no leftover temporary directories.
	left, _ := filepath.Glob(filepath.Join(data, "e2b-files", "*", ".upload-*"))
	if len(left) > 0 {
		t.Errorf("temporary directories left: %v", left)
	}
}

// TestE2BCollectUploads: an upload nobody asked for within the keep time goes with the next
// upload to its scope, as does an interrupted upload's temporary directory; one asked for
// (FilesPresent) stays.
func TestE2BCollectUploads(t *testing.T) {
	data := t.TempDir()
	e := newE2BTemplates(templates{log: slog.New(slog.DiscardHandler)}, data)
	ctx := context.Background()
	dir := filepath.Join(data, "e2b-files", "operator")
	old, used, tmp := strings.Repeat("01", 32), strings.Repeat("02", 32), ".upload-123"
	for _, d := range []string{old, used, tmp} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
		past := time.Now().Add(-e2bUploadsKept - time.Hour)
		if err := os.Chtimes(filepath.Join(dir, d), past, past); err != nil {
			t.Fatal(err)
		}
	}
	if !e.FilesPresent("operator", used) {
		t.Fatal("used upload not present")
	}
	if err := e.PutFiles(ctx, "operator", strings.Repeat("03", 32), bytes.NewReader(makeTar(t, true, tarEntry{name: "f", body: "x"})), 1<<20); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]bool{old: false, used: true, tmp: false, strings.Repeat("03", 32): true} {
		if _, err := os.Lstat(filepath.Join(dir, d)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", d, err == nil, want)
		}
	}
}
