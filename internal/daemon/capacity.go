package daemon

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/moatdev/moat/internal/linux"
	"github.com/moatdev/moat/internal/sandbox"
)

// hostCapacity reads what this host has for sandboxes: CPUs this process may run on,
// MemTotal, min(pid_max, threads-max), fs.file-max, and the size of the filesystem holding
// dataDir (the drives). A fact it cannot read stays zero (no bound) and is returned in the
// error list for the log.
func hostCapacity(dataDir string) (sandbox.Capacity, []error) {
	var c sandbox.Capacity
	var errs []error
	c.CPUs = runtime.NumCPU()
	if c.MemoryBytes = sandbox.HostMemory(); c.MemoryBytes == 0 {
		errs = append(errs, errors.New("sysinfo: the host's memory is unknown"))
	}
	pidMax, err1 := linux.ReadCount("/proc/sys/kernel/pid_max")
	threads, err2 := linux.ReadCount("/proc/sys/kernel/threads-max")
	if err1 == nil && err2 == nil {
		c.Pids = min(pidMax, threads)
	} else {
		errs = append(errs, err1, err2)
	}
	if fm, err := linux.ReadCount("/proc/sys/fs/file-max"); err == nil {
		c.FileMax = fm
	} else {
		errs = append(errs, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dataDir, &st); err == nil {
		c.DiskBytes = int64(st.Blocks) * st.Bsize
	} else {
		errs = append(errs, fmt.Errorf("statfs %s: %w", dataDir, err))
	}
	return c, errs
}
