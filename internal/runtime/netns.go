package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// startInNetNS starts cmd so that it, and everything it forks, lives in the network
// namespace at nsPath. The network namespace is a per-thread attribute and fork/exec
// copies it from the calling thread, so the command is started from a dedicated goroutine
// locked to its OS thread: join nsPath, start, then rejoin the thread's original namespace.
// The thread is unlocked (returned to the Go scheduler) only once it is verifiably back in
// its original namespace; if that fails it stays locked and the Go runtime destroys it when
// the goroutine exits, so no other goroutine ever runs in the sandbox's namespace.
//
// The caller waits for cmd as usual.
func startInNetNS(nsPath string, cmd *exec.Cmd) error {
	target, err := os.Open(nsPath)
	if err != nil {
		return fmt.Errorf("opening network namespace: %w", err)
	}
	defer target.Close()

	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		// No deferred UnlockOSThread: see below.
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		orig, err := os.Open(self)
		if err != nil {
			goruntime.UnlockOSThread() // nothing changed yet
			errc <- fmt.Errorf("opening current network namespace: %w", err)
			return
		}
		defer orig.Close()
		var origSt unix.Stat_t
		if err := unix.Fstat(int(orig.Fd()), &origSt); err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread() // setns failed: the thread did not move
			errc <- fmt.Errorf("joining network namespace %s: %w", nsPath, err)
			return
		}
		startErr := cmd.Start()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread dies with this goroutine.
			errc <- errors.Join(startErr, fmt.Errorf("leaving network namespace %s: %w", nsPath, err))
			return
		}
		var now unix.Stat_t
		if err := unix.Stat(self, &now); err != nil || now.Ino != origSt.Ino || now.Dev != origSt.Dev {
			errc <- errors.Join(startErr, fmt.Errorf("thread did not return to its network namespace: %v", err))
			return
		}
		goruntime.UnlockOSThread()
		errc <- startErr
	}()
	err = <-errc
	if err != nil && cmd.Process != nil {
		// Started but the namespace dance failed afterwards: do not leave it running.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return err
}
