package linux

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/testutil"
)

// testImage makes a small ext4 image in a directory of the test's own.
func testImage(t *testing.T) string {
	t.Helper()
	testutil.RequiresRoot(t)
	mkfs := testutil.RequiresBinary(t, "mkfs.ext4")
	image := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(image, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(image, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", image).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	return image
}

// mountTestImage mounts image at a new directory with l and unmounts it when the test ends.
func mountTestImage(t *testing.T, l *Loops, image string) string {
	t.Helper()
	target := filepath.Join(t.TempDir(), "mnt")
	if err := l.MountImage(image, target, "ext4", syscall.MS_NODEV|syscall.MS_NOSUID, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = UnmountAll(target) })
	return target
}

// waitDetached waits until no loop device serves image.
func waitDetached(t *testing.T, image string) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "the loop device of "+image+" to detach", func() bool {
		d, err := LoopDeviceOf(image)
		return err == nil && d == ""
	})
}

// TestMountImageReusedDeviceDetaching: a sandbox's drive is mounted again (start after
// stop) while its loop device still serves it but is about to auto-clear, as it does when
// the last user of the previous (lazily unmounted) mount goes away. Here the test holds the
// only open of the device and closes it right after MountImage found the device: the
// device must still be bound when the mount reads it. (Without holding it, the mount read
// an unbound device and failed with EIO — or could have mounted another file bound to the
// same device meanwhile.) The devices involved are this test's own.
func TestMountImageReusedDeviceDetaching(t *testing.T) {
	image := testImage(t)
	l := NewLoops()
	first := filepath.Join(t.TempDir(), "first")
	if err := l.MountImage(image, first, "ext4", syscall.MS_NODEV|syscall.MS_NOSUID, ""); err != nil {
		t.Fatal(err)
	}
	dev, err := LoopDeviceOf(image)
	if err != nil || dev == "" {
		t.Fatalf("loop device of the mounted image: %q, %v", dev, err)
	}
	// The previous mount's last user: an open of the device that outlives the unmount.
	last, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer last.Close()
	if err := UnmountAll(first); err != nil {
		t.Fatal(err)
	}
	if d, _ := LoopDeviceOf(image); d != dev {
		t.Fatalf("after the unmount the image is on %q, want still %s", d, dev)
	}
	l.found = func(found string) {
		if found == dev {
			last.Close() // the device auto-clears now unless MountImage holds it
		}
	}
	second := mountTestImage(t, l, image)
	if d, err := LoopDeviceOf(image); err != nil || d != dev {
		t.Errorf("remounted on %q (%v), want the reused %s", d, err, dev)
	}
	if _, err := os.ReadDir(filepath.Join(second, "lost+found")); err != nil {
		t.Errorf("reading the remounted filesystem: %v", err)
	}
	if err := UnmountAll(second); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, image)
}

// TestMountImageSkipsBusyDevice: the device the kernel names free answers EBUSY (another
// process bound it first). MountImage binds another device instead of failing. The busy
// device is one the test bound to an image of its own and hands to MountImage as the free
// one, so no device anyone else could pick is held.
func TestMountImageSkipsBusyDevice(t *testing.T) {
	other, image := testImage(t), testImage(t)
	l := NewLoops()
	mountTestImage(t, l, other)
	busy, err := LoopDeviceOf(other)
	if err != nil || busy == "" {
		t.Fatalf("loop device of the other image: %q, %v", busy, err)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(busy, "/dev/loop"))
	if err != nil {
		t.Fatal(err)
	}
	offered := 0
	l.freeDevice = func(int) (int, error) { offered++; return n, nil }
	target := mountTestImage(t, l, image)
	dev, err := LoopDeviceOf(image)
	if err != nil || dev == "" || dev == busy {
		t.Fatalf("image on %q (%v), want a device other than the busy %s", dev, err, busy)
	}
	if offered < 2 {
		t.Errorf("the busy device was offered %d times: the EBUSY path did not run", offered)
	}
	if err := UnmountAll(target); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, image)
}

// TestLoopReservations: concurrent attaches of one Loops never get the same device to bind,
// whatever the kernel names free; devices in avoid are not handed out.
func TestLoopReservations(t *testing.T) {
	testutil.RequiresRoot(t)
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skip(err)
	}
	defer unix.Close(ctl)
	l := NewLoops()
	free, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
	if err != nil {
		t.Fatal(err)
	}
	l.freeDevice = func(int) (int, error) { return free, nil }
	a, err := l.reserve(ctl, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release(a)
	b, err := l.reserve(ctl, map[int]bool{free + 1000000: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.release(b)
	if a != free || b == a {
		t.Errorf("reserved %d and %d with %d free: want %d, then another", a, b, free, free)
	}
}
