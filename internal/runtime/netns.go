package runtime

import (
	"fmt"
	"os/exec"

	"github.com/moatdev/moat/internal/linux"
)

// startInNetNS starts cmd so that it, and everything it forks, lives in the network
// namespace at nsPath. The network namespace is a per-thread attribute that fork/exec
// copies from the calling thread, so cmd is started by linux.RunInNetNS on a dedicated
// locked OS thread that joins nsPath and then goes back (or is destroyed if it cannot):
// no other goroutine ever runs in the sandbox's namespace. The caller waits for cmd.
//
// A missing namespace is an error wrapping os.ErrNotExist, and cmd is not started.
func startInNetNS(nsPath string, cmd *exec.Cmd) error {
	ns, err := linux.OpenNetNS(nsPath)
	if err != nil {
		return fmt.Errorf("opening network namespace: %w", err)
	}
	defer ns.Close()
	err = linux.RunInNetNS(ns, cmd.Start)
	if err != nil && cmd.Process != nil {
		// Started, but the thread could not return home: do not leave it running.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return err
}
