package linux

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Reaper collects the exit status of every child of this process and hands
// the status of each child started through Spawn to its owner. It replaces
// exec.Cmd.Wait and os.Process.Wait, which would race it: nothing else in
// the process may wait for children.
type Reaper struct {
	log *slog.Logger

	mu     sync.Mutex
	owners map[int]func(syscall.WaitStatus)
	sigs   chan os.Signal
	stop   chan struct{}
	done   chan struct{}
}

// NewReaper returns a Reaper that is not yet running; call Start.
func NewReaper(log *slog.Logger) *Reaper {
	return &Reaper{
		log:    log,
		owners: make(map[int]func(syscall.WaitStatus)),
		sigs:   make(chan os.Signal, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// Start subscribes to SIGCHLD and reaps in the background until Stop. When
// this process is not PID 1 it makes itself a child subreaper, so that
// orphaned grandchildren are reparented to it (and reaped) as they would be
// to an init.
func (r *Reaper) Start() error {
	if os.Getpid() != 1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("becoming a child subreaper: %w", err)
		}
	}
	signal.Notify(r.sigs, syscall.SIGCHLD)
	go r.loop()
	return nil
}

// Stop ends reaping. Children that exit afterwards stay zombies until the
// process exits.
func (r *Reaper) Stop() {
	signal.Stop(r.sigs)
	close(r.stop)
	<-r.done
}

func (r *Reaper) loop() {
	defer close(r.done)
	// A slow sweep backs up SIGCHLD, which the kernel coalesces and which a
	// full signal channel would drop.
	sweep := time.NewTicker(5 * time.Second)
	defer sweep.Stop()
	r.reapAll()
	for {
		select {
		case <-r.stop:
			return
		case <-r.sigs:
		case <-sweep.C:
		}
		r.reapAll()
	}
}

// reapAll waits for every child that has exited, without blocking.
func (r *Reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			// ECHILD: no children at all; 0: none has exited yet.
			return
		}
		if ws.Stopped() || ws.Continued() {
			continue
		}
		// Spawn holds mu from fork until the owner is registered, so an owner
		// whose child exits at once is found here.
		r.mu.Lock()
		owner := r.owners[pid]
		delete(r.owners, pid)
		r.mu.Unlock()
		if owner == nil {
			r.log.Debug("reaped orphan", "pid", pid, "status", int(ws))
			continue
		}
		owner(ws)
	}
}

// Spawn calls start, which must create exactly one child and return its
// pid, and registers onExit to receive that child's wait status. onExit is
// called once, from the reaper goroutine, and must not block for long.
func (r *Reaper) Spawn(start func() (int, error), onExit func(syscall.WaitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := start()
	if err != nil {
		return 0, err
	}
	r.owners[pid] = onExit
	return pid, nil
}

// Owned returns the pids of running children started through Spawn.
func (r *Reaper) Owned() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	pids := make([]int, 0, len(r.owners))
	for pid := range r.owners {
		pids = append(pids, pid)
	}
	return pids
}

// SignalAll sends sig to everything this process may end: every process
// when it is PID 1 (kill(-1) spares init itself), otherwise every
// descendant of this process.
func (r *Reaper) SignalAll(sig syscall.Signal) {
	if os.Getpid() == 1 {
		_ = syscall.Kill(-1, sig)
		return
	}
	for _, pid := range Descendants(os.Getpid()) {
		_ = syscall.Kill(pid, sig)
	}
}

// Descendants returns the pids of all processes below pid, read from /proc.
func Descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, p)
		queue = append(queue, children[p]...)
	}
	return out
}

// HasChildren reports whether this process has any child left, running or
// not yet reaped.
func HasChildren() bool {
	var info unix.Siginfo
	// WNOWAIT leaves an exit status for the reaper.
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return !errors.Is(err, syscall.ECHILD)
}

// KillGroup sends sig to the process group led by pid, and to pid itself in
// case it left the group.
func KillGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
	_ = syscall.Kill(pid, sig)
}
