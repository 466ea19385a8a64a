package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
)

// initPath is where the daemon bind-mounts moat-init, read-only, into every sandbox
// (internal/runtime.InitPath).
const initPath = "/.moat/moat-init"

// errNotInSandbox is checkPlacement's error class.
var errNotInSandbox = errors.New("moat-init runs only as PID 1 of a moat sandbox, started by the moat daemon")

// checkPlacement decides whether moat-init may set up and serve a sandbox: only as PID 1
// of its own PID namespace, run from initPath on a read-only mount. moat-init rewrites
// /etc/resolv.conf, installs a CA and runs processes and file operations as any user of
// the root it finds; started on a host by mistake (a test, a developer trying the binary),
// it would do all that to the host. A host's PID 1 is its own init, and no host has
// moat-init at /.moat on a read-only mount: both come from a container runtime (or from
// a deliberately built root, as moat-init's tests build one). Environment variables and
// flags prove nothing here: anything that starts the binary can set them.
func checkPlacement(p linux.Placement) error {
	var why []string
	if p.PID != 1 {
		why = append(why, fmt.Sprintf("it is pid %d, not PID 1 of its own PID namespace", p.PID))
	}
	switch {
	case p.ExeStatErr != nil:
		why = append(why, p.ExeStatErr.Error())
	case p.Exe != initPath:
		why = append(why, fmt.Sprintf("it runs from %s, not %s", p.Exe, initPath))
	case !p.ExeRDOnly:
		why = append(why, initPath+" is not on a read-only mount")
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w; refusing to start, because %s", errNotInSandbox, strings.Join(why, " and "))
}
