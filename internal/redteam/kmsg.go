package redteam

import (
	"errors"
	"os"
	"strings"
	"syscall"
)

// kmsg watches the host kernel log from now on (/dev/kmsg, root), the receiver of a
// sysrq request.
type kmsg struct{ f *os.File }

func watchKmsg() (*kmsg, error) {
	fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if _, err := syscall.Seek(fd, 0, 2); err != nil { // SEEK_END: only what comes next
		syscall.Close(fd)
		return nil, err
	}
	return &kmsg{f: os.NewFile(uintptr(fd), "/dev/kmsg")}, nil
}

// sysrq reads what the log got since and says whether a line names sysrq; it closes k.
func (k *kmsg) sysrq() bool {
	defer k.f.Close()
	buf := make([]byte, 8192)
	for {
		n, err := syscall.Read(int(k.f.Fd()), buf)
		if errors.Is(err, syscall.EPIPE) { // records overwritten: read on
			continue
		}
		if err != nil || n <= 0 {
			return false
		}
		if strings.Contains(strings.ToLower(string(buf[:n])), "sysrq") {
			return true
		}
	}
}
