package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// MountImage mounts the filesystem image file image (of type fstype, e.g. "ext4") at target
// (created if missing) through a loop device, with the given mount flags and data.
//
// If a loop device already serves image (same device and inode) it is reused: one image is
// never attached to two loop devices at once, because two kernels' views of one ext4 would
// corrupt it. A newly attached device has LO_FLAGS_AUTOCLEAR, so it detaches itself once the
// last mount of it is gone; nothing has to remember it. On error nothing new stays attached
// or mounted.
//
// Callers must serialize MountImage calls for the same image (the search for an existing
// device and the attach are not atomic together).
func MountImage(image, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o700); err != nil {
		return err
	}
	var lastErr error
	for range 5 {
		dev, err := findLoop(image)
		if err != nil {
			return err
		}
		var held *os.File
		if dev == "" {
			held, dev, err = attachLoop(image)
			if err != nil {
				return err
			}
		}
		err = unix.Mount(dev, target, fstype, flags, data)
		if held != nil {
			held.Close() // the mount now holds the device; autoclear fires when it goes
		}
		if err == nil {
			return nil
		}
		lastErr = fmt.Errorf("mounting %s (%s on %s) at %s: %w", image, fstype, dev, target, err)
		// A reused device may have been auto-cleared between the search and the mount.
		if !errors.Is(err, unix.ENXIO) && !errors.Is(err, unix.ENODEV) {
			return lastErr
		}
	}
	return lastErr
}

// LoopDeviceOf returns the path of the loop device that serves the image file image, or ""
// if none does.
func LoopDeviceOf(image string) (string, error) { return findLoop(image) }

// findLoop returns the loop device whose backing file is image (by device and inode).
func findLoop(image string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(image, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", image, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fmt.Errorf("%s is not a regular file", image)
	}
	// Bound loop devices have /sys/block/loopN/loop/.
	bound, err := filepath.Glob("/sys/block/loop*/loop")
	if err != nil {
		return "", err
	}
	for _, b := range bound {
		name := filepath.Base(filepath.Dir(b))
		dev := "/dev/" + name
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(fd)
		unix.Close(fd)
		if err != nil {
			continue // unbound meanwhile (ENXIO)
		}
		if info.Device == st.Dev && info.Inode == st.Ino {
			return dev, nil
		}
	}
	return "", nil
}

// attachLoop binds image to a free loop device with LO_FLAGS_AUTOCLEAR and returns the open
// device (the caller closes it once it is mounted: an unused autoclear device detaches at
// its last close) and its path.
func attachLoop(image string) (*os.File, string, error) {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("opening image %s: %w", image, err)
	}
	defer img.Close() // the loop device keeps its own reference
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("opening /dev/loop-control: %w", err)
	}
	defer ctl.Close()

	var lastErr error
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, "", fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		path := "/dev/loop" + strconv.Itoa(n)
		dev, err := openLoopNode(path)
		if err != nil {
			return nil, "", err
		}
		err = configureLoop(int(dev.Fd()), int(img.Fd()), image)
		if err == nil {
			return dev, path, nil
		}
		dev.Close()
		lastErr = fmt.Errorf("binding %s to %s: %w", image, path, err)
		if !errors.Is(err, unix.EBUSY) {
			return nil, "", lastErr
		}
		// Another process took that device between GET_FREE and the bind: try again.
	}
	return nil, "", lastErr
}

// openLoopNode opens /dev/loopN, waiting briefly for devtmpfs to create a fresh node.
func openLoopNode(path string) (*os.File, error) {
	var err error
	for range 50 {
		var f *os.File
		f, err = os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil, fmt.Errorf("opening %s: %w", path, err)
}

// configureLoop binds the backing file imgFd to the loop device devFd: LOOP_CONFIGURE (Linux
// 5.8+) in one step, else LOOP_SET_FD + LOOP_SET_STATUS64.
func configureLoop(devFd, imgFd int, name string) error {
	cfg := unix.LoopConfig{Fd: uint32(imgFd)}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], name)
	err := unix.IoctlLoopConfigure(devFd, &cfg)
	if errors.Is(err, unix.EINVAL) {
		// The backing filesystem may not do direct I/O at the image's block size.
		cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
		err = unix.IoctlLoopConfigure(devFd, &cfg)
	}
	if err == nil || !(errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL)) {
		return err
	}
	// Old kernel: the two-step attach.
	if err := unix.IoctlSetInt(devFd, unix.LOOP_SET_FD, imgFd); err != nil {
		return err
	}
	info := unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}
	copy(info.File_name[:len(info.File_name)-1], name)
	if err := unix.IoctlLoopSetStatus64(devFd, &info); err != nil {
		_ = unix.IoctlSetInt(devFd, unix.LOOP_CLR_FD, 0)
		return err
	}
	return nil
}
