package linux

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Placement is what moat-init can see of where it runs.
type Placement struct {
	PID        int    // its own process id
	Exe        string // the path it was started from (/proc/self/exe)
	ExeRDOnly  bool   // Exe is itself a mount point, mounted read-only
	ExeStatErr error  // why Exe could not be examined, if it could not
}

// ReadPlacement reads the running process' Placement. It never fails: what cannot be read
// is left zero (and ExeStatErr set), which the caller's check refuses.
func ReadPlacement() Placement {
	p := Placement{PID: os.Getpid()}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		p.ExeStatErr = fmt.Errorf("reading /proc/self/exe: %w", err)
		return p
	}
	p.Exe = exe
	// statfs would be simpler, but gVisor reports no ST_RDONLY for read-only binds.
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		p.ExeStatErr = fmt.Errorf("reading /proc/self/mountinfo: %w", err)
		return p
	}
	p.ExeRDOnly = MountedReadOnly(info, exe)
	return p
}

// MountedReadOnly reports whether mountinfo (the text of /proc/self/mountinfo) shows a
// mount at exactly path whose own options include "ro". Of several mounts at path, the
// last (topmost) counts. Anything unparsable counts as not read-only.
func MountedReadOnly(mountinfo []byte, path string) bool {
	ro := false
	for _, line := range strings.Split(string(mountinfo), "\n") {
		// id parent major:minor root mountpoint options [optional…] - fstype source super
		f := strings.Fields(line)
		if len(f) < 6 || unescapeMountPath(f[4]) != path {
			continue
		}
		ro = slices.Contains(strings.Split(f[5], ","), "ro")
	}
	return ro
}

// unescapeMountPath undoes the kernel's octal escapes (\040 for a space, …) of a path in
// mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// RedirectStdinToNull points file descriptor 0 at /dev/null, so that nothing of what came
// on stdin (the access token's pipe) stays reachable through /proc/1/fd/0.
func RedirectStdinToNull() error {
	null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/null: %w", err)
	}
	defer unix.Close(null)
	if err := unix.Dup3(null, 0, 0); err != nil {
		return fmt.Errorf("redirecting stdin: %w", err)
	}
	return nil
}
