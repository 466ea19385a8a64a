package linux

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TrimResident lowers this process's resident memory while it idles: it
// returns free heap to the kernel and drops the page mappings of its own
// executable's read-only segments (code and constant data). Those pages are
// clean and stay in the page cache, shared with every other moat-init, so
// the next access maps them back with a minor fault. Writable mappings are
// never touched. It returns the bytes unmapped.
func TrimResident() (int64, error) {
	// Two collections: the first moves sync.Pool contents (compressors,
	// buffers) to the victim cache, the one in FreeOSMemory drops them.
	runtime.GC()
	debug.FreeOSMemory()

	var exe syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &exe); err != nil {
		return 0, fmt.Errorf("stat /proc/self/exe: %w", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("reading mappings: %w", err)
	}
	defer f.Close()
	var trimmed int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset major:minor inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		perms := fields[1]
		if len(perms) < 4 || perms[1] == 'w' || perms[3] != 'p' {
			continue // writable or shared: leave alone
		}
		if ino, err := strconv.ParseUint(fields[4], 10, 64); err != nil || ino != exe.Ino {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		// The raw call: the range is not Go memory, so no slice stands for it.
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED); e != 0 {
			return trimmed, fmt.Errorf("madvise %s: %w", fields[0], e)
		}
		trimmed += int64(end - start)
	}
	if err := sc.Err(); err != nil {
		return trimmed, fmt.Errorf("reading mappings: %w", err)
	}
	return trimmed, nil
}
