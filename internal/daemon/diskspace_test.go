package daemon_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/sdk"
	"golang.org/x/sys/unix"
)

// smallDataFS makes an ext4 filesystem of size bytes (a sparse image under t.TempDir(),
// loop-mounted) for a daemon's data directory and returns its mount point. It is
// unmounted (and its loop device detached) when the test ends, also on failure; register
// it before the daemon, so the daemon is gone first.
func smallDataFS(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "data")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if err := linux.NewLoops().MountImage(img, mnt, "ext4", unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting the small data filesystem: %v (detaching it lazily)", err)
			_ = unix.Unmount(mnt, unix.MNT_DETACH) // the loop device autoclears after
		}
	})
	return mnt
}

// addBallast takes 32 MiB of the filesystem at mnt and gives them back first when the
// test ends (register it after the daemon, so it runs before the daemon's teardown): if
// the filesystem did fill up, the daemon's database gets room again and the teardown
// leaves nothing behind.
func addBallast(t *testing.T, mnt string) {
	t.Helper()
	ballast := filepath.Join(mnt, "ballast")
	f, err := os.Create(ballast)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, 32<<20)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(ballast) })
}

// freeBytes is what an unprivileged writer can still allocate on the filesystem of path.
func freeBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// assertRefusedForSpace checks that err is the API's answer for a drive that does not fit:
// 429 resource_exhausted, with a message that says what is free and what is needed.
func assertRefusedForSpace(t *testing.T, err error) {
	t.Helper()
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || !errors.Is(err, sdk.ErrResourceExhausted) || apiErr.Status != http.StatusTooManyRequests {
		t.Fatalf("create beyond the data filesystem's capacity: %v (%T), want 429 resource_exhausted", err, err)
	}
	for _, want := range []string{"data filesystem", "free", "needs", "reserved"} {
		if !strings.Contains(apiErr.Message, want) {
			t.Errorf("refusal %q does not say %q", apiErr.Message, want)
		}
	}
}

// TestDiskSpaceIsReserved runs a daemon on a small data filesystem (issue 20 item 1):
// drives that do not fit are refused with a clear 429 and leave nothing behind, concurrent
// creates never share the same free space, and a sandbox that fills its own drive gets
// ENOSPC inside while a peer's synced file survives the peer's stop and start, the peer
// can still write, the daemon's reserve stays free, and create, stop and delete still work.
// Every runtime's drives go through the same admission (runsc's root filesystem is the
// same overlay on a drive).
func TestDiskSpaceIsReserved(t *testing.T) {
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) { diskSpaceIsReserved(t, rt) })
	}
}

func diskSpaceIsReserved(t *testing.T, rt string) {
	const reserve = 96 << 20
	mnt := smallDataFS(t, 640<<20)
	e := newEnvWith(t, func(c *daemon.Config) { c.DataDir, c.DiskReserve = mnt, reserve })
	e.dataDir = mnt
	ctx := context.Background()
	addBallast(t, mnt)
	drives := filepath.Join(mnt, "drives")

	// driveFiles lists the drive images (and any half-made one) on the data filesystem.
	driveFiles := func() []string {
		entries, err := os.ReadDir(drives)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, en := range entries {
			if n := en.Name(); strings.HasSuffix(n, ".img") && !strings.HasPrefix(n, ".format-") {
				out = append(out, n)
			}
		}
		return out
	}
	records := func() int {
		list, err := e.d.Store.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	peer := e.create(v1.CreateSandboxRequest{Runtime: rt, DiskBytes: 128 << 20})
	filler := e.create(v1.CreateSandboxRequest{Runtime: rt, DiskBytes: 128 << 20})

	// Creates at once: no more of them succeed than the space left holds.
	const each = 128<<20 + 8<<20 // the drive and its sandbox's init log
	room := (freeBytes(t, mnt) - reserve) / each
	n := int(room) + 2
	var (
		mu      sync.Mutex
		made    []string
		refused []error
		wg      sync.WaitGroup
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refused = append(refused, err)
			} else {
				made = append(made, sb.ID)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d concurrent creates with room for %d: %d made, %d refused", n, room, len(made), len(refused))
	if int64(len(made)) > room {
		t.Errorf("%d concurrent creates of 128 MiB succeeded with room for %d", len(made), room)
	}
	for _, err := range refused {
		assertRefusedForSpace(t, err)
	}
	if free := freeBytes(t, mnt); free < reserve {
		t.Errorf("after concurrent creates the data filesystem has %d MiB free, under the %d MiB reserve", free>>20, reserve>>20)
	}
	for _, id := range made {
		if err := e.c.Delete(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	e.d.Manager.Wait()

	// A drive larger than the space left (a drive larger than the whole filesystem is
	// refused before, 400, by the limits' ceilings): refused, nothing of it left.
	if got := driveFiles(); len(got) != 2 {
		t.Fatalf("drives before the big create: %v, want the two sandboxes'", got)
	}
	big, err := e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 256 << 20, DiskBytes: 512 << 20})
	if err == nil {
		t.Errorf("a 512 MiB drive was accepted with %d MiB free on the data filesystem", freeBytes(t, mnt)>>20)
		filler = big // today's main: it fills the data filesystem itself
	} else {
		assertRefusedForSpace(t, err)
		t.Logf("refused: %v", err)
		if got := driveFiles(); len(got) != 2 {
			t.Errorf("drives after a refused create: %v, want only the two sandboxes'", got)
		}
		if got := records(); got != 2 {
			t.Errorf("the store holds %d sandboxes after a refused create, want 2", got)
		}
	}

	// The peer's file, written and synced before the filler fills its drive.
	sum := e.mustSh(peer.ID, `head -c 16M /dev/urandom > /home/user/keep && sync /home/user/keep && sha256sum < /home/user/keep`)

	r := e.sh(filler.ID, "", `dd if=/dev/zero of=/home/user/fill bs=1M conv=fsync 2>&1; sync`)
	t.Logf("filler: %s", strings.TrimSpace(r.stdout))
	if !strings.Contains(r.stdout, "No space left on device") {
		t.Errorf("filling its own drive did not end with ENOSPC inside the sandbox:\n%s", r.stdout)
	}
	if free := freeBytes(t, mnt); free < reserve {
		t.Errorf("a sandbox filling its drive left %d MiB free on the data filesystem, under the %d MiB reserve", free>>20, reserve>>20)
	}
	// Every drive keeps all its space: nothing punched holes into it.
	for _, name := range driveFiles() {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(drives, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 < st.Size {
			t.Errorf("drive %s has %d of its %d MiB allocated", name, st.Blocks*512>>20, st.Size>>20)
		}
	}

	// The API still answers every call: a create that fits, stop, start, delete.
	toDelete := []string{filler.ID}
	if small, err := e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 256 << 20, DiskBytes: 64 << 20}); err != nil {
		t.Errorf("create of a drive that fits, after the fill: %v", err)
	} else {
		toDelete = append(toDelete, small.ID)
	}
	if _, err := e.c.Stop(ctx, peer.ID); err != nil {
		t.Fatalf("stopping the peer: %v", err)
	}
	if _, err := e.c.Start(context.Background(), peer.ID); err != nil {
		t.Fatalf("starting the peer: %v", err)
	}
	if got := e.sh(peer.ID, "", `sha256sum < /home/user/keep`); got.code != 0 || got.stdout != sum {
		t.Errorf("the peer's synced file after its restart: %q (exit %d, %s), want %q", got.stdout, got.code, got.stderr, sum)
	}
	if got := e.sh(peer.ID, "", `echo more > /home/user/after && sync /home/user/after && cat /home/user/after`); got.code != 0 || got.stdout != "more\n" {
		t.Errorf("the peer cannot write after the fill: exit %d: %s %s", got.code, got.stdout, got.stderr)
	}
	for _, id := range toDelete {
		if err := e.c.Delete(ctx, id); err != nil {
			t.Errorf("delete %s after the fill: %v", id, err)
		}
	}
	e.d.Manager.Wait()
	if got := driveFiles(); len(got) != 1 || got[0] != peer.ID+".img" {
		t.Errorf("drives after the deletes: %v, want only the peer's", got)
	}
}

// assertNotInternal fails if err is a 500: on a full data filesystem the API answers with
// a class (429 resource_exhausted), never "internal error: database or disk is full".
func assertNotInternal(t *testing.T, what string, err error) {
	t.Helper()
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusInternalServerError {
		t.Errorf("%s on a full data filesystem: 500 %s", what, apiErr.Message)
	}
}

// TestDiskOvercommitFull runs an overcommitting daemon (--disk-overcommit) on a small data
// filesystem until a sandbox fills it. What the daemon promises then: the API never
// answers 500 (a create or stop that cannot be recorded gets 429), delete always works
// and gives the space back, and creates work again afterwards. What happens to the
// sandboxes is logged (see docs/internals.md): overcommitted drives have no guarantee.
func TestDiskOvercommitFull(t *testing.T) {
	mnt := smallDataFS(t, 640<<20)
	e := newEnvWith(t, func(c *daemon.Config) { c.DataDir, c.DiskOvercommit, c.DiskReserve = mnt, true, 96<<20 })
	e.dataDir = mnt
	addBallast(t, mnt)
	ctx := context.Background()

	// Two drives of 600 MiB on a 640 MiB filesystem: overcommitted (a single drive larger
	// than the filesystem is refused by the limits' ceilings even so).
	peer := e.create(v1.CreateSandboxRequest{DiskBytes: 600 << 20})
	filler := e.create(v1.CreateSandboxRequest{DiskBytes: 600 << 20})
	sum := e.mustSh(peer.ID, `head -c 16M /dev/urandom > /home/user/keep && sync /home/user/keep && sha256sum < /home/user/keep`)

	r := e.sh(filler.ID, "", `dd if=/dev/zero of=/home/user/fill bs=1M conv=fsync 2>&1; sync`)
	t.Logf("filler: %s", strings.TrimSpace(r.stdout))
	free := freeBytes(t, mnt)
	t.Logf("data filesystem: %d MiB free after the fill", free>>20)

	// Whatever the fill did, the API answers with a class.
	if sb, err := e.c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 64 << 20}); err != nil {
		t.Logf("create after the fill: %v", err)
		assertNotInternal(t, "create", err)
	} else if err := e.c.Delete(ctx, sb.ID); err != nil {
		t.Errorf("delete of a new sandbox: %v", err)
	}
	w := e.sh(peer.ID, "", `echo more > /home/user/after && sync /home/user/after && cat /home/user/after`)
	t.Logf("peer writes after the fill: exit %d %s%s", w.code, w.stdout, w.stderr)
	if _, err := e.c.Stop(ctx, peer.ID); err != nil {
		t.Logf("stop of the peer after the fill: %v", err)
		assertNotInternal(t, "stop", err)
	}

	// Delete frees space, also when the database has none left to record it.
	if err := e.c.Delete(ctx, filler.ID); err != nil {
		t.Fatalf("delete of the filler on a full data filesystem: %v", err)
	}
	e.d.Manager.Wait()
	if _, err := os.Stat(filepath.Join(mnt, "drives", filler.ID+".img")); err == nil {
		t.Errorf("the filler's drive is still there after its delete")
	}
	if free := freeBytes(t, mnt); free < 96<<20 {
		t.Errorf("%d MiB free after deleting the filler", free>>20)
	}
	if _, err := e.c.Get(ctx, peer.ID); err != nil {
		t.Fatalf("the peer after the filler's delete: %v", err)
	}
	if _, err := e.c.Stop(ctx, peer.ID); err != nil {
		t.Errorf("stop of the peer once space is free: %v", err)
	}
	if _, err := e.c.Start(ctx, peer.ID); err != nil {
		t.Logf("start of the peer after the fill: %v", err)
		return
	}
	got := e.sh(peer.ID, "", `sha256sum < /home/user/keep`)
	t.Logf("peer's synced file after its restart: intact %v (exit %d %s)", got.stdout == sum, got.code, strings.TrimSpace(got.stderr))
	sb, err := e.c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 64 << 20})
	if err != nil {
		t.Fatalf("create once space is free: %v", err)
	}
	if err := e.c.Delete(ctx, sb.ID); err != nil {
		t.Errorf("delete: %v", err)
	}
}
