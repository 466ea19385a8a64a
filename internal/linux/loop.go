package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Loops attaches image files to loop devices and mounts them (MountImage). One process
// should share one: concurrent MountImage calls of one Loops bind different devices, where
// the kernel's LOOP_CTL_GET_FREE names the same free device to every caller until one of
// them has bound it. Devices other processes bind first, or hold open exclusively, are
// skipped. It is safe for concurrent use.
type Loops struct {
	mu      sync.Mutex
	pending map[int]int // device number → attaches binding it now

	// Tests only. freeDevice replaces LOOP_CTL_GET_FREE; found runs once MountImage holds
	// the device that already serves the image, before it mounts it.
	freeDevice func(ctl int) (int, error)
	found      func(dev string)
}

// NewLoops returns a Loops for this process.
func NewLoops() *Loops { return &Loops{pending: map[int]int{}} }

// MountImage mounts the filesystem image file image (of type fstype, e.g. "ext4") at target
// (created if missing) through a loop device, with the given mount flags and data.
//
// If a loop device already serves image (same device and inode) it is reused: one image is
// never attached to two loop devices at once, because two kernels' views of one ext4 would
// corrupt it. It is held open from the moment it is found until the mount holds it, so it
// cannot detach (or serve another file) in between; a device still detaching from image is
// waited for. A newly attached device has LO_FLAGS_AUTOCLEAR, so it detaches itself once
// the last mount of it is gone (asynchronously, after a lazy unmount); nothing has to
// remember it. On error nothing new stays attached or mounted.
//
// Callers must serialize MountImage calls for the same image (the search for an existing
// device and the attach are not atomic together). Calls for different images may run at
// any concurrency.
func (l *Loops) MountImage(image, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o700); err != nil {
		return err
	}
	var lastErr error
	for range 5 {
		held, dev, err := findHeld(image)
		if err != nil {
			return err
		}
		if held == nil {
			held, dev, err = l.attach(image)
			if err != nil {
				return err
			}
		} else if l.found != nil {
			l.found(dev)
		}
		err = unix.Mount(dev, target, fstype, flags, data)
		held.Close() // the mount holds the device now; autoclear fires when it goes
		if err == nil {
			return nil
		}
		lastErr = fmt.Errorf("mounting %s (%s on %s) at %s: %w", image, fstype, dev, target, err)
		if !errors.Is(err, unix.ENXIO) && !errors.Is(err, unix.ENODEV) {
			return lastErr
		}
	}
	return lastErr
}

// LoopDeviceOf returns the path of the loop device that serves the image file image, or ""
// if none does.
func LoopDeviceOf(image string) (string, error) {
	f, dev, err := findHeld(image)
	if f != nil {
		f.Close()
	}
	return dev, err
}

// detachWait bounds the wait for a device that is detaching from the image to be mounted.
const detachWait = 10 * time.Second

// findHeld returns the loop device that serves image (by device and inode), open, or nil.
// While the caller holds it open the device can neither auto-clear nor be bound to another
// file (a mount of its path then mounts image). A device that is detaching from image (its
// last user gone: it refuses opens with ENXIO and fails I/O with EIO until it is unbound) is
// waited for, at most detachWait.
func findHeld(image string) (*os.File, string, error) {
	var st unix.Stat_t
	if err := unix.Stat(image, &st); err != nil {
		return nil, "", fmt.Errorf("stat %s: %w", image, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, "", fmt.Errorf("%s is not a regular file", image)
	}
	deadline := time.Now().Add(detachWait)
	for {
		f, dev, detaching, err := findLoop(image, &st)
		if err != nil || f != nil || detaching == "" {
			return f, dev, err
		}
		if time.Now().After(deadline) {
			return nil, "", fmt.Errorf("loop device %s is still detaching from %s after %s: %w", detaching, image, detachWait, unix.EBUSY)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// findLoop is one pass of findHeld: the open device serving image, or the name of a device
// that is detaching from it.
func findLoop(image string, st *unix.Stat_t) (held *os.File, dev, detaching string, err error) {
	// Bound loop devices (and those being cleared) have /sys/block/loopN/loop/.
	bound, err := filepath.Glob("/sys/block/loop*/loop")
	if err != nil {
		return nil, "", "", err
	}
	for _, b := range bound {
		dev := "/dev/" + filepath.Base(filepath.Dir(b))
		f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ENXIO) && backsOnto(b, image) {
				detaching = dev // in rundown: clearing
			}
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
		if err == nil && info.Device == st.Dev && info.Inode == st.Ino {
			return f, dev, "", nil
		}
		f.Close()
		if err != nil && backsOnto(b, image) {
			detaching = dev // not bound any more, not cleared yet
		}
	}
	return nil, "", detaching, nil
}

// backsOnto reports whether the loop device whose sysfs loop directory is sysLoop names
// image as its backing file (a path, so only a hint: the inode decides what is reused).
func backsOnto(sysLoop, image string) bool {
	data, err := os.ReadFile(filepath.Join(sysLoop, "backing_file"))
	if err != nil {
		return false
	}
	name := strings.TrimSuffix(strings.TrimSpace(string(data)), " (deleted)")
	return name == filepath.Clean(image)
}

// attach binds image to a free loop device with LO_FLAGS_AUTOCLEAR and returns the open
// device (the caller closes it once it is mounted: an unused autoclear device detaches at
// its last close) and its path.
func (l *Loops) attach(image string) (*os.File, string, error) {
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
	refused := map[int]bool{} // devices that answered EBUSY to this attach
	for try := range maxLoopTries {
		n, err := l.reserve(int(ctl.Fd()), refused)
		if err != nil {
			return nil, "", err
		}
		path := "/dev/loop" + strconv.Itoa(n)
		dev, err := openLoopNode(path)
		if err == nil {
			err = configureLoop(int(dev.Fd()), int(img.Fd()), image)
			if err != nil {
				dev.Close()
			}
		}
		l.release(n)
		if err == nil {
			return dev, path, nil
		}
		lastErr = fmt.Errorf("binding %s to %s: %w", image, path, err)
		if !errors.Is(err, unix.EBUSY) {
			return nil, "", lastErr
		}
		// Another process bound n between GET_FREE and the bind, or holds it open
		// exclusively: another device, after a pause that grows with the tries.
		refused[n] = true
		time.Sleep(time.Duration(try+1) * time.Millisecond)
	}
	return nil, "", fmt.Errorf("no free loop device after %d tries: %w", maxLoopTries, lastErr)
}

// maxLoopTries bounds the devices one attach tries. Only other processes (or other Loops)
// can make a try fail, and each failed device is avoided afterwards, so it is large.
const maxLoopTries = 64

// reserve returns a loop device number to bind: the kernel's first free device, or, when
// this Loops is binding that one already (or it is in avoid), another unbound device, or
// failing that a new one. release ends the reservation.
func (l *Loops) reserve(ctl int, avoid map[int]bool) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	getFree := l.freeDevice
	if getFree == nil {
		getFree = func(ctl int) (int, error) { return unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE) }
	}
	n, err := getFree(ctl)
	if err != nil {
		return 0, fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
	}
	if l.pending[n] > 0 || avoid[n] {
		if m, ok := l.otherUnbound(avoid); ok {
			n = m
		} else if m, err := addLoop(ctl); err == nil {
			n = m
		}
		// Otherwise n is tried anyway: a lost race costs one more try.
	}
	l.pending[n]++
	return n, nil
}

// release ends the reservation of device n taken by reserve.
func (l *Loops) release(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending[n]--; l.pending[n] <= 0 {
		delete(l.pending, n)
	}
}

// otherUnbound returns an existing loop device that is unbound (no /sys/block/loopN/loop),
// not being bound by this Loops and not in avoid. Adding a device instead would leave one
// more idle device behind after every burst of concurrent attaches.
func (l *Loops) otherUnbound(avoid map[int]bool) (int, bool) {
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return 0, false
	}
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), "loop")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(num)
		if err != nil || l.pending[n] > 0 || avoid[n] {
			continue
		}
		if _, err := os.Lstat("/sys/block/" + e.Name() + "/loop"); errors.Is(err, os.ErrNotExist) {
			return n, true
		}
	}
	return 0, false
}

// addLoop adds a loop device at the first unused number (LOOP_CTL_ADD of -1). Older kernels
// refuse it (EEXIST) while any device is free.
func addLoop(ctl int) (int, error) {
	n, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(ctl), unix.LOOP_CTL_ADD, ^uintptr(0))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
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
