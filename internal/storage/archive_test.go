package storage

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
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

// TestRoomWriter: the room check runs each time the written bytes cross a multiple of
// roomCheckEvery, and its error stops the write before anything more is written.
func TestRoomWriter(t *testing.T) {
	var buf bytes.Buffer
	checks, full := 0, false
	rw := &roomWriter{w: &buf, room: func() error {
		checks++
		if full {
			return errdefs.ErrResourceExhausted
		}
		return nil
	}}
	chunk := make([]byte, roomCheckEvery/4)
	for range 8 { // two whole multiples
		if _, err := rw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if checks != 2 || buf.Len() != 2*roomCheckEvery {
		t.Fatalf("after %d bytes: %d checks, %d written; want 2 checks", 2*roomCheckEvery, checks, buf.Len())
	}
	full = true
	for i := range 4 {
		n, err := rw.Write(chunk)
		if i < 3 && err != nil {
			t.Fatalf("write %d inside the same multiple: %v", i, err)
		}
		if i == 3 && (n != 0 || !errors.Is(err, errdefs.ErrResourceExhausted)) {
			t.Fatalf("write crossing a multiple with no room: n=%d err=%v", n, err)
		}
	}
	if buf.Len() != 2*roomCheckEvery+3*len(chunk) {
		t.Fatalf("written %d after the refusal", buf.Len())
	}
}

// TestArchiveDeleteExpire: DeleteArchive removes one archive (and says when there is
// none); ExpireArchives removes those older than the cutoff and keeps the rest.
func TestArchiveDeleteExpire(t *testing.T) {
	s := &Store{dir: t.TempDir()}
	dir := filepath.Join(s.dir, ArchiveDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, id := range []string{"sb-000000000001", "sb-000000000002", "sb-000000000003"} {
		p := s.ArchivePath(id)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-time.Duration(i*10) * 24 * time.Hour) // 0, 10 and 20 days old
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteArchive("sb-000000000009"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleting a missing archive: %v", err)
	}
	if err := s.DeleteArchive("../x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("deleting a bad id: %v", err)
	}
	gone, err := s.ExpireArchives(now.Add(-5 * 24 * time.Hour))
	if err != nil || len(gone) != 2 {
		t.Fatalf("expire older than 5 days: %+v %v", gone, err)
	}
	if err := s.DeleteArchive("sb-000000000001"); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.Archives(); len(list) != 0 {
		t.Fatalf("left: %+v", list)
	}
}

// TestArchiveStopsAtReserve: an archive that would take the data filesystem's reserve stops
// with a resource-exhausted error, leaving no partial file; once there is room it is made.
func TestArchiveStopsAtReserve(t *testing.T) {
	const reserve = 48 << 20
	s := smallStore(t, 448<<20, DiskPolicy{Reserve: reserve})
	ctx := ctxT(t)
	const id, other = "sb-000000000001", "sb-000000000002"
	if err := s.CreateDrive(ctx, id, 128<<20); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	if err := s.loops.MountImage(s.drivePath(id), mnt, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 96<<20) // random: zstd cannot make it smaller
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mnt, "root/upper"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "root/upper/blob"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	// Another drive takes all but the reserve and 40 MiB: the archive may start but not end.
	_, free, err := linux.FSSpace(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, other, (free-reserve-40<<20)&^(1<<20-1)); err != nil {
		t.Fatal(err)
	}
	_, err = s.ArchiveDrive(ctx, id)
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("archive with 40 MiB above the reserve: %v, want resource exhausted", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.dir, ArchiveDir)); len(entries) != 0 {
		t.Fatalf("the refused archive left %v", entries)
	}
	if _, free2, _ := linux.FSSpace(s.dir); free2 < reserve {
		t.Fatalf("the archive took the reserve: %d free", free2)
	}
	if err := s.DeleteDrive(ctx, other); err != nil {
		t.Fatal(err)
	}
	p, err := s.ArchiveDrive(ctx, id)
	if err != nil {
		t.Fatalf("archive once there is room: %v", err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Size() < 96<<20 {
		t.Fatalf("archive: %v %v", fi, err)
	}
}
