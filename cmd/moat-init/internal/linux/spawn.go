package linux

import (
	"fmt"
	"os"
	"syscall"
)

// Cred is a user identity to run as.
type Cred struct {
	UID, GID uint32
	// Groups are the supplementary group ids.
	Groups []uint32
}

// ExecAttr describes a child to start with ForkExec.
type ExecAttr struct {
	// Path is the executable; Args[0] is what the child sees as its name.
	Path string
	Args []string
	Env  []string
	Dir  string
	// Cred, when non-nil, is the identity the child runs as. Only a
	// privileged caller can set it to anything but its own.
	Cred *Cred
	// Files become the child's descriptors 0, 1, 2, ...
	Files []*os.File
	// Setctty makes Files[0], which must be a terminal, the controlling
	// terminal of the child's new session.
	Setctty bool
}

// ForkExec starts a child in a new session (and so a new process group
// whose id is the child's pid) and returns its pid. It does not wait for
// the child: its exit status goes to the Reaper, so call ForkExec from
// within Reaper.Spawn.
func ForkExec(a ExecAttr) (int, error) {
	fds := make([]uintptr, len(a.Files))
	for i, f := range a.Files {
		// Fd puts the descriptor in blocking mode, which is what the child
		// wants; these are the child's ends, closed by the caller after.
		fds[i] = f.Fd()
	}
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: a.Setctty, Ctty: 0}
	if a.Cred != nil {
		sys.Credential = &syscall.Credential{
			Uid:         a.Cred.UID,
			Gid:         a.Cred.GID,
			Groups:      a.Cred.Groups,
			NoSetGroups: os.Geteuid() != 0,
		}
	}
	pid, err := syscall.ForkExec(a.Path, a.Args, &syscall.ProcAttr{
		Dir:   a.Dir,
		Env:   a.Env,
		Files: fds,
		Sys:   sys,
	})
	if err != nil {
		return 0, fmt.Errorf("starting %s: %w", a.Path, err)
	}
	return pid, nil
}
