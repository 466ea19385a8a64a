package storage

import (
	"bytes"
	"context"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// FuzzEntryPath: whatever the name, an accepted path is relative, clean and free of "..",
// so joining it to a root stays below the root. Seeds: testdata/fuzz/FuzzEntryPath.
func FuzzEntryPath(f *testing.F) {
	for _, s := range []string{"a", "./a/b", "../x", "/abs", "a/../../b", "a/./b/", ".", "..", "a\x00b", "...", "a/..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := entryPath(name)
		if err != nil {
			return
		}
		if p != "." && !filepath.IsLocal(p) {
			t.Fatalf("entryPath(%q) = %q: not local", name, p)
		}
		if path.Clean(p) != p || strings.HasPrefix(p, "/") {
			t.Fatalf("entryPath(%q) = %q: not clean and relative", name, p)
		}
		for _, c := range strings.Split(p, "/") {
			if c == ".." {
				t.Fatalf("entryPath(%q) = %q contains ..", name, p)
			}
		}
		if j := filepath.Join("/root", p); j != "/root" && !strings.HasPrefix(j, "/root/") {
			t.Fatalf("entryPath(%q) = %q escapes to %q", name, p, j)
		}
	})
}

// FuzzExtractTar extracts arbitrary bytes as a tar: it may fail, but nothing may appear or
// change outside the extraction root. Seeds: testdata/fuzz/FuzzExtractTar (escape attempts).
// The seeds are tars of several KiB, so keep minimizing short:
//
//	go test -run '^$' -fuzz FuzzExtractTar -fuzzminimizetime 2s ./internal/storage/
func FuzzExtractTar(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root (chown)")
	}
	for _, entries := range [][]tarEntry{
		{{name: "a/b", body: "x"}, {name: "l", typ: '2', link: "a"}, {name: "h", typ: '1', link: "a/b"}},
		{{name: "l", typ: '2', link: "../outside"}, {name: "l/x", body: "escaped"}},
		{{name: "../x", body: "escaped"}},
	} {
		f.Add(makeTar(f, entries))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		outside := filepath.Join(base, "outside")
		if err := os.MkdirAll(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outside, "canary"), []byte("canary"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(base, "root"), 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(filepath.Join(base, "root"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = extractTar(context.Background(), bytes.NewReader(data), root, extractOptions{MaxBytes: 1 << 20})
		root.Close()
		entries, _ := os.ReadDir(base)
		if len(entries) != 2 {
			t.Fatalf("entries next to the root: %v", entries)
		}
		out, _ := os.ReadDir(outside)
		got, _ := os.ReadFile(filepath.Join(outside, "canary"))
		fi, _ := os.Stat(filepath.Join(outside, "canary"))
		if len(out) != 1 || string(got) != "canary" || fi.Mode().Perm() != 0o644 {
			t.Fatalf("outside changed: %v %q %v", out, got, fi.Mode())
		}
		if fi.Sys().(*syscall.Stat_t).Nlink != 1 {
			t.Fatal("canary got a hard link")
		}
	})
}
