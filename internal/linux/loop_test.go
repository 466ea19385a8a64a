package linux_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/testutil"
)

// TestMountImageSkipsHeldLoopDevice: another process holds the free loop device that
// LOOP_CTL_GET_FREE names open exclusively, so binding it fails with EBUSY however often
// it is tried. MountImage binds another device instead of failing. Concurrent attaches of
// this process: storage.TestDriveMountConcurrent.
func TestMountImageSkipsHeldLoopDevice(t *testing.T) {
	testutil.RequiresRoot(t)
	mkfs := testutil.RequiresBinary(t, "mkfs.ext4")
	dir := t.TempDir()
	image, target := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	if err := os.WriteFile(image, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(image, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", image).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}

	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ctl)
	n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
	if err != nil {
		t.Fatal(err)
	}
	held := "/dev/loop" + strconv.Itoa(n)
	// An exclusive open claims the unbound device as another process's would: LOOP_CONFIGURE
	// through any other open file fails with EBUSY, and GET_FREE keeps naming it.
	fd, err := unix.Open(held, unix.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("holding %s: %v", held, err)
	}
	defer unix.Close(fd)

	if err := linux.MountImage(image, target, "ext4", syscall.MS_NODEV|syscall.MS_NOSUID, ""); err != nil {
		t.Fatalf("MountImage with %s held: %v", held, err)
	}
	defer linux.UnmountAll(target)
	dev, err := linux.LoopDeviceOf(image)
	if err != nil || dev == "" || dev == held {
		t.Fatalf("image on %q (%v), want a device other than the held %s", dev, err, held)
	}
	if err := linux.UnmountAll(target); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the loop device to detach", func() bool {
		d, err := linux.LoopDeviceOf(image)
		return err == nil && d == ""
	})
}
