package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
	"golang.org/x/sys/unix"
)

// TestAdmitDrive is the admission decision: with reservations, a drive fits only if the
// free space, less what is promised to other drives, holds it, its sandbox's share and the
// reserve; with overcommit, only the reserve counts.
func TestAdmitDrive(t *testing.T) {
	const M = int64(1 << 20)
	reserved := func(reserve, perDrive int64) DiskPolicy {
		return DiskPolicy{Reserve: reserve, PerDrive: perDrive}
	}
	over := func(reserve int64) DiskPolicy { return DiskPolicy{Overcommit: true, Reserve: reserve} }
	for _, c := range []struct {
		name     string
		ask      driveAsk
		ok       bool
		mentions []string // in the refusal
	}{
		{"fits exactly", driveAsk{Size: 600 * M, Free: 1000 * M, Policy: reserved(392*M, 8*M)}, true, nil},
		{"one byte into the reserve", driveAsk{Size: 600 * M, Free: 1000 * M, Policy: reserved(392*M+1, 8*M)}, false,
			[]string{"1000 MiB free", "a 600 MiB drive needs 608 MiB", "392 MiB stays reserved"}},
		{"the sandbox's share counts", driveAsk{Size: 600 * M, Free: 1000 * M, Policy: reserved(392*M, 8*M+1)}, false, nil},
		{"promises to other drives count", driveAsk{Size: 400 * M, Free: 1000 * M, Promised: 500 * M, Policy: reserved(100*M, 8*M)}, false,
			[]string{"500 MiB of it promised to other sandboxes"}},
		{"promised beyond free", driveAsk{Size: 64 * M, Free: 100 * M, Promised: 1 << 40, Policy: reserved(0, 0)}, false, nil},
		{"no space at all", driveAsk{Size: 64 * M, Free: 0, Policy: reserved(256*M, 8*M)}, false, []string{"has 0 bytes free"}},
		{"largest drive on a small disk", driveAsk{Size: MaxDriveBytes, Free: 1 << 40, Policy: reserved(256*M, 8*M)}, false, nil},
		{"largest drive on a large disk", driveAsk{Size: MaxDriveBytes, Free: 17 << 40, Promised: 1 << 30, Policy: reserved(4<<30, 8*M)}, true, nil},
		{"overcommit ignores the size", driveAsk{Size: 10 << 30, Free: 300 * M, Promised: 1 << 40, Policy: over(256 * M)}, true, nil},
		{"overcommit keeps the reserve", driveAsk{Size: 64 * M, Free: 200 * M, Policy: over(256 * M)}, false,
			[]string{"200 MiB free", "less than the 256 MiB kept", "overcommitted"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.ask.FS = "/var/lib/moat"
			err := admitDrive(c.ask)
			if c.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Fatalf("got %v, want ErrResourceExhausted", err)
			}
			for _, m := range append([]string{"data filesystem /var/lib/moat"}, c.mentions...) {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("refusal %q does not say %q", err, m)
				}
			}
		})
	}
}

// TestAdmitLayer: a layer build starts only while the space beyond the drives' promises
// is above the reserve; under overcommit, while the free space is.
func TestAdmitLayer(t *testing.T) {
	const M = int64(1 << 20)
	for _, c := range []struct {
		name string
		ask  driveAsk
		ok   bool
	}{
		{"room", driveAsk{Free: 1000 * M, Promised: 500 * M, Policy: DiskPolicy{Reserve: 256 * M}}, true},
		{"promises leave only the reserve", driveAsk{Free: 1000 * M, Promised: 744 * M, Policy: DiskPolicy{Reserve: 256 * M}}, false},
		{"inside the reserve", driveAsk{Free: 100 * M, Policy: DiskPolicy{Reserve: 256 * M}}, false},
		{"promised beyond free", driveAsk{Free: 100 * M, Promised: 1 << 40, Policy: DiskPolicy{}}, false},
		{"overcommit ignores promises", driveAsk{Free: 1000 * M, Promised: 1 << 40, Policy: DiskPolicy{Overcommit: true, Reserve: 256 * M}}, true},
		{"overcommit keeps the reserve", driveAsk{Free: 200 * M, Policy: DiskPolicy{Overcommit: true, Reserve: 256 * M}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.ask.FS = "/var/lib/moat"
			err := admitLayer("template t", c.ask)
			if c.ok != (err == nil) {
				t.Fatalf("admitLayer = %v, want ok %v", err, c.ok)
			}
			if err != nil && (!errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "no room to build template t") ||
				!strings.Contains(err.Error(), "data filesystem /var/lib/moat")) {
				t.Errorf("refusal %q", err)
			}
		})
	}
}

func TestDrivesThatFit(t *testing.T) {
	const M = int64(1 << 20)
	for _, c := range []struct {
		sp   Space
		want int64
	}{
		{Space{Free: 1000 * M, Reserve: 200 * M}, 7},                    // (1000-200)/(100+8)
		{Space{Free: 1000 * M, Promised: 500 * M, Reserve: 200 * M}, 2}, // (300)/(108)
		{Space{Free: 100 * M, Reserve: 200 * M}, 0},                     // inside the reserve
		{Space{Free: 1000 * M, Promised: 1 << 40, Reserve: 200 * M}, 0}, // promised beyond free
		{Space{Free: 1000 * M, Reserve: 200 * M, Overcommit: true}, -1}, // any number
		{Space{Free: 100 * M, Reserve: 200 * M, Overcommit: true}, 0},   // not even overcommitting
	} {
		if got := c.sp.DrivesThatFit(100*M, 8*M); got != c.want {
			t.Errorf("%+v: %d drives fit, want %d", c.sp, got, c.want)
		}
	}
}

func TestDefaultReserve(t *testing.T) {
	for _, c := range []struct{ fs, want int64 }{
		{600 << 20, 256 << 20}, // small: the floor
		{100 << 30, 2 << 30},   // 2 %
		{1 << 40, 4 << 30},     // large: the ceiling
		{0, 256 << 20},
	} {
		if got := DefaultReserve(c.fs); got != c.want {
			t.Errorf("DefaultReserve(%d) = %d, want %d", c.fs, got, c.want)
		}
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 bytes", 1023: "1023 bytes", 1024: "1 KiB", 1536: "1.5 KiB", 64 << 20: "64 MiB",
		10 << 30: "10 GiB", 1<<30 + 1<<29: "1.5 GiB", MaxDriveBytes: "16 TiB", 5 << 50: "5 PiB", -2048: "-2 KiB",
	} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
}

// smallStore makes a store whose data directory is a fresh ext4 filesystem of size bytes
// (a loop-mounted sparse image), unmounted when the test ends.
func smallStore(t *testing.T, size int64, p DiskPolicy) *Store {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "data")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if err := linux.NewLoops().MountImage(img, mnt, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A drive's loop device lets go of its image (inside mnt) asynchronously after its
		// own unmount (autoclear), so mnt can be busy for a moment (CI, once).
		var err error
		for range 50 {
			if err = syscall.Unmount(mnt, 0); !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("unmounting the test filesystem: %v", err)
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	s, err := New(mnt, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.SetDiskPolicy(p)
	return s
}

// TestCreateDriveReserves runs CreateDrive on a small filesystem: drives are allocated in
// full, concurrent creates (also of two stores, as of two processes) never share free space, a refused drive leaves no file, and the
// holes of a sparse drive (an older or overcommitting daemon's) count as promised.
func TestCreateDriveReserves(t *testing.T) {
	const reserve, perDrive = 64 << 20, 8 << 20
	s := smallStore(t, 512<<20, DiskPolicy{Reserve: reserve, PerDrive: perDrive})
	ctx := ctxT(t)
	_, free, err := linux.FSSpace(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	const size = 96 << 20
	room := int((free - reserve) / (size + perDrive))
	n := room + 3
	// Two stores on one data directory: two moat processes (e.g. two `moat run`s).
	other, err := New(s.dir, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetDiskPolicy(s.policy)
	stores := []*Store{s, other}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = stores[i%2].CreateDrive(ctx, fmt.Sprintf("sb-%012d", i), size)
		}()
	}
	wg.Wait()
	made := 0
	for i, err := range errs {
		switch {
		case err == nil:
			made++
			fi, err := os.Stat(s.drivePath(fmt.Sprintf("sb-%012d", i)))
			if err != nil {
				t.Fatal(err)
			}
			if alloc := linux.AllocatedBytes(fi); alloc < size {
				t.Errorf("drive %d: %d of %d bytes allocated", i, alloc, size)
			}
		case errors.Is(err, errdefs.ErrResourceExhausted):
			if _, serr := os.Stat(s.drivePath(fmt.Sprintf("sb-%012d", i))); serr == nil {
				t.Errorf("refused drive %d left its file", i)
			}
		default:
			t.Errorf("drive %d: %v", i, err)
		}
	}
	t.Logf("%d concurrent drives of 96 MiB, room for %d: %d made", n, room, made)
	if made > room || made < room-1 {
		t.Errorf("%d of %d concurrent drives made with room for %d", made, n, room)
	}
	if _, after, _ := linux.FSSpace(s.dir); after < reserve {
		t.Errorf("%d MiB left free, under the %d MiB reserve", after>>20, reserve>>20)
	}
	if tmps, _ := filepath.Glob(filepath.Join(s.dir, "drives", tmpPrefix+"*")); len(tmps) > 0 {
		t.Errorf("half-made drives left: %v", tmps)
	}

	// Free everything, then put a sparse 256 MiB drive there: its holes are promised.
	for i := range n {
		if err := s.DeleteDrive(ctx, fmt.Sprintf("sb-%012d", i)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(s.drivePath("sb-sparse"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(256 << 20)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, free, _ = linux.FSSpace(s.dir)
	// Fits in the free space, but not next to the sparse drive's promise.
	big := (free-reserve-perDrive)&^(1<<20-1) - 64<<20
	if err := s.CreateDrive(ctx, "sb-big", big); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a %d MiB drive next to a sparse 256 MiB drive with %d MiB free: %v, want ErrResourceExhausted", big>>20, free>>20, err)
	}
	if err := s.DeleteDrive(ctx, "sb-sparse"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, "sb-big", big); err != nil {
		t.Errorf("a %d MiB drive with %d MiB free once the sparse drive is gone: %v", big>>20, free>>20, err)
	}
}

// TestCreateDriveOvercommit: an overcommitting store makes sparse drives of any size while
// the reserve is free, and mounts them with discard.
func TestCreateDriveOvercommit(t *testing.T) {
	s := smallStore(t, 256<<20, DiskPolicy{Overcommit: true, Reserve: 32 << 20})
	ctx := ctxT(t)
	for i := range 3 {
		if err := s.CreateDrive(ctx, fmt.Sprintf("sb-%012d", i), 1<<30); err != nil {
			t.Fatalf("overcommitted drive %d: %v", i, err)
		}
	}
	fi, err := os.Stat(s.drivePath("sb-000000000000"))
	if err != nil {
		t.Fatal(err)
	}
	if alloc := linux.AllocatedBytes(fi); alloc > 64<<20 {
		t.Errorf("an overcommitted 1 GiB drive takes %d MiB", alloc>>20)
	}
	if got := s.driveMountData(); !strings.Contains(got, "discard") {
		t.Errorf("overcommitted drives mounted with %q, want discard", got)
	}
	s.SetDiskPolicy(DiskPolicy{Overcommit: true, Reserve: 1 << 40})
	if err := s.CreateDrive(ctx, "sb-over", 64<<20); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("overcommitted drive with less free than the reserve: %v, want ErrResourceExhausted", err)
	}
	s.SetDiskPolicy(DiskPolicy{})
	if got := s.driveMountData(); strings.Contains(got, "discard") {
		t.Errorf("reserved drives mounted with %q: discard would punch holes into them", got)
	}
}

// BenchmarkCreateDrive measures CreateDrive (and DeleteDrive, as delete-ns/op) with drives
// allocated in full against overcommitted sparse drives, in the same run: the cost of the
// reservation is the ratio. The formatted image of each size is made before the timer.
func BenchmarkCreateDrive(b *testing.B) {
	for _, size := range []int64{256 << 20, 10 << 30} {
		for _, over := range []bool{false, true} {
			name := fmt.Sprintf("%s/reserved", sizeText(size))
			if over {
				name = fmt.Sprintf("%s/overcommit", sizeText(size))
			}
			b.Run(strings.ReplaceAll(name, " ", ""), func(b *testing.B) {
				s, _ := newTestStore(b)
				s.SetDiskPolicy(DiskPolicy{Overcommit: over})
				ctx := context.Background()
				if err := s.CreateDrive(ctx, "sb-warmup", size); err != nil {
					b.Fatal(err)
				}
				_ = s.DeleteDrive(ctx, "sb-warmup")
				var deleting time.Duration
				b.ResetTimer()
				for i := range b.N {
					id := fmt.Sprintf("sb-%012d", i)
					if err := s.CreateDrive(ctx, id, size); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					t0 := time.Now()
					if err := s.DeleteDrive(ctx, id); err != nil {
						b.Fatal(err)
					}
					deleting += time.Since(t0)
					b.StartTimer()
				}
				b.ReportMetric(float64(deleting.Nanoseconds())/float64(b.N), "delete-ns/op")
			})
		}
	}
}

// TestReservedDriveKeepsItsBlocks: what a sandbox can do to files on its drive (allocate,
// write into allocated space, zero and punch ranges, delete) never gives blocks of its
// image back to the data filesystem, which would turn its reservation into a promise. (It
// fails with the drive mounted with discard.)
func TestReservedDriveKeepsItsBlocks(t *testing.T) {
	s, run := newTestStore(t)
	ctx := ctxT(t)
	const id = "sb-000000000007"
	const size = 128 << 20
	_, rootfs := sandboxDirs(t, run, id)
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateDrive(ctx, id, size); err != nil {
		t.Fatal(err)
	}
	allocated := func() int64 {
		fi, err := os.Stat(s.drivePath(id))
		if err != nil {
			t.Fatal(err)
		}
		return linux.AllocatedBytes(fi)
	}
	before := allocated()
	if before < size {
		t.Fatalf("new drive: %d of %d bytes allocated", before, size)
	}
	if err := s.Mount(ctx, sandbox.MountRequest{ID: id, Template: tmpl, Target: rootfs}); err != nil {
		t.Fatal(err)
	}
	defer s.Unmount(ctx, id, rootfs)
	block := bytes.Repeat([]byte{0x5a}, 4096)
	for i := range 40 {
		f, err := os.Create(filepath.Join(rootfs, "tmp", fmt.Sprintf("f%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		// An unwritten extent, one block written into its middle (a split), then a zeroed
		// and a punched range: the ext4 operations that may send zero-outs or discards.
		steps := []func() error{
			func() error { return unix.Fallocate(int(f.Fd()), 0, 0, 1<<20) },
			func() error { _, err := f.WriteAt(block, 64<<10); return err },
			func() error { return f.Sync() },
			func() error { return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE, 128<<10, 256<<10) },
			func() error {
				return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 512<<10, 256<<10)
			},
			func() error { return f.Sync() },
		}
		for n, step := range steps {
			if err := step(); err != nil {
				t.Fatalf("file %d step %d: %v", i, n, err)
			}
		}
		f.Close()
		if i%2 == 0 {
			if err := os.Remove(f.Name()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := linux.SyncFS(filepath.Join(rootfs, "tmp")); err != nil {
		t.Fatal(err)
	}
	if after := allocated(); after < before {
		t.Errorf("the drive gave %d KiB back to the data filesystem: reservation lost", (before-after)>>10)
	}
}

// TestMountAllocatesSparseDrive: a sparse drive (an older moat's, or made while
// overcommitting) is allocated in full when a reserving store mounts it, unless that would
// eat into the reserve; then it stays sparse and mounts all the same.
func TestMountAllocatesSparseDrive(t *testing.T) {
	s := smallStore(t, 512<<20, DiskPolicy{Overcommit: true, Reserve: 64 << 20})
	ctx := ctxT(t)
	tmpl, err := s.Template(ctx, HostTemplate)
	if err != nil {
		t.Fatal(err)
	}
	allocated := func(id string) int64 {
		fi, err := os.Stat(s.drivePath(id))
		if err != nil {
			t.Fatal(err)
		}
		return linux.AllocatedBytes(fi)
	}
	for _, c := range []struct {
		id     string
		size   int64
		filled bool
	}{{"sb-000000000001", 128 << 20, true}, {"sb-000000000002", 2 << 30, false}} {
		s.SetDiskPolicy(DiskPolicy{Overcommit: true, Reserve: 64 << 20})
		if err := s.CreateDrive(ctx, c.id, c.size); err != nil {
			t.Fatal(err)
		}
		if a := allocated(c.id); a >= c.size {
			t.Fatalf("overcommitted drive allocated in full (%d bytes)", a)
		}
		s.SetDiskPolicy(DiskPolicy{Reserve: 64 << 20})
		_, rootfs := sandboxDirs(t, s.runDir, c.id)
		if err := s.Mount(ctx, sandbox.MountRequest{ID: c.id, Template: tmpl, Target: rootfs}); err != nil {
			t.Fatal(err)
		}
		if err := s.Unmount(ctx, c.id, rootfs); err != nil {
			t.Fatal(err)
		}
		if got := allocated(c.id) >= c.size; got != c.filled {
			t.Errorf("%d MiB drive on a 512 MiB filesystem: allocated in full %v, want %v", c.size>>20, got, c.filled)
		}
		if _, free, _ := linux.FSSpace(s.dir); free < 64<<20 {
			t.Errorf("%d MiB free after mounting, under the reserve", free>>20)
		}
	}
}

// TestImportRefusedInReserve: once the drives hold all but the reserve of a small data
// filesystem, a template import is refused (ErrResourceExhausted) before it writes a layer
// or a template; once a drive is deleted, the same import is made.
func TestImportRefusedInReserve(t *testing.T) {
	const reserve = 64 << 20
	s := smallStore(t, 256<<20, DiskPolicy{Reserve: reserve})
	ctx := ctxT(t)
	_, free, err := linux.FSSpace(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	size := (free - reserve) &^ (1<<20 - 1) // all but the reserve, whole MiB
	if err := s.CreateDrive(ctx, "sb-000000000001", size); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "img.tar")
	tag, _ := name.NewTag("example.test/img:1")
	if err := tarball.WriteToFile(p, tag, testImage(t)); err != nil {
		t.Fatal(err)
	}
	layersBefore, _ := os.ReadDir(filepath.Join(s.dir, "layers"))
	_, err = s.Import(ctx, "imported", p, nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "no room to build template imported") {
		t.Fatalf("import with the drives holding all but the reserve: %v, want a resource-exhausted refusal", err)
	}
	if _, err := s.Template(ctx, "imported"); err == nil {
		t.Error("the refused import left a template")
	}
	if layers, _ := os.ReadDir(filepath.Join(s.dir, "layers")); len(layers) != len(layersBefore) {
		t.Errorf("the refused import left layers: %d before, %d after", len(layersBefore), len(layers))
	}
	if err := s.DeleteDrive(ctx, "sb-000000000001"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, "imported", p, nil); err != nil {
		t.Fatalf("import once the drive is gone: %v", err)
	}
}
