package storage

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCleanupArchives: an interrupted archive's mount point and partial file go; complete
// archives and anything else stay.
func TestCleanupArchives(t *testing.T) {
	s := &Store{dir: t.TempDir()}
	dir := filepath.Join(s.dir, ArchiveDir)
	if err := s.CleanupArchives(); err != nil {
		t.Fatalf("without an archives directory: %v", err)
	}
	for _, d := range []string{".mnt-sb-1"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{".tmp-sb-1-abcd", "sb-2.tar.zst"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CleanupArchives(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "sb-2.tar.zst" {
		t.Fatalf("left: %v", entries)
	}
	list, err := s.Archives()
	if err != nil || len(list) != 1 || list[0].ID != "sb-2" || list[0].Bytes != 1 {
		t.Fatalf("Archives: %+v %v", list, err)
	}
}
