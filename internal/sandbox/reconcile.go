package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/initlog"
)

// Reconcile at daemon start, and noticing sandboxes whose container died on its own.

// Reconcile makes the host match the store after a (possibly unclean) daemon start:
// interrupted deletions finish; interrupted creates (Sandbox.Provisioning: no client was
// ever answered with them) are removed with everything they made, since the drive may be
// missing and nobody knows their ID; interrupted starts of existing sandboxes stop (their
// drive holds the owner's data); running sandboxes whose container is alive and healthy
// stay running, and the rest are stopped cleanly.
func (m *Manager) Reconcile(ctx context.Context) error {
	list, err := m.store.List(ctx)
	if err != nil {
		return err
	}
	for _, sb := range list {
		if sb.Warm && sb.State != StateDeleting {
			// A warm sandbox of a previous daemon: disposable, never handed over.
			if err := m.Delete(ctx, sb.ID); err != nil {
				m.log.Error("deleting a previous daemon's warm sandbox", "sandbox", sb.ID, "err", err)
			}
			continue
		}
		switch {
		case sb.State == StateDeleting:
			m.finishDelete(sb)
		case sb.Provisioning:
			m.log.Warn("removing a sandbox whose create was interrupted", "sandbox", sb.ID, "state", sb.State)
			unlock := m.lock(sb.ID)
			m.destroy(sb.ID)
			unlock()
		case sb.State == StateCreating:
			unlock := m.lock(sb.ID)
			m.stopAfter(ctx, sb, "interrupted while starting (daemon restart)", "")
			unlock()
		case sb.State == StateRunning || sb.State == StatePaused:
			older := m.fromOlderDaemon(sb.ID)
			if !older && m.alive(ctx, sb) {
				m.attachLog(sb.ID)
				_, err := m.egress.Attach(sb.ID, sb.EgressPolicy(), sb.Credentials, sb.GitSettings())
				if err == nil {
					_, err = m.applyUserNetwork(sb) // per-user egress (useregress.go): stopped without it
				}
				if err == nil {
					m.log.Info("adopted running sandbox", "sandbox", sb.ID, "state", sb.State)
					m.reapplyUsers(ctx, sb) // useradd.go
					continue
				} else {
					m.log.Error("restarting egress of a running sandbox", "sandbox", sb.ID, "err", err)
				}
			}
			reason := "container was gone after a daemon restart"
			if older {
				reason = "started by an older moat without an output FIFO, a token pipe and closed directories; start it again"
			}
			unlock := m.lock(sb.ID)
			m.stopAfter(ctx, sb, reason, "")
			unlock()
		case sb.State == StateStopped:
			// Leftovers of a crash between teardown steps are removed; the drive stays.
			if _, err := os.Stat(m.paths(sb.ID).dir); err == nil {
				if err := m.down(sb.ID, sb.Runtime); err != nil {
					m.log.Error("cleaning stopped sandbox", "sandbox", sb.ID, "err", err)
				}
			}
		}
	}
	return nil
}

// fromOlderDaemon says whether sandbox id was started by a moat from before its output
// FIFO: such a sandbox also has its access token in moat-init's environment and a run
// directory (and, under runsc, a root overlay) other host users can reach, so it is stopped
// rather than adopted; starting it again sets it up as a new one.
func (m *Manager) fromOlderDaemon(id string) bool {
	fi, err := os.Lstat(m.paths(id).fifo)
	return err != nil || fi.Mode().Type() != os.ModeNamedPipe
}

// attachLog reads on from the output FIFO of a running sandbox of a previous daemon.
func (m *Manager) attachLog(id string) {
	m.closeLog(id)
	lg, err := initlog.Attach(m.paths(id).fifo, m.LogPath(id), initlog.DefaultLimits, m.log)
	if err != nil {
		m.log.Warn("reading the output of a running sandbox", "sandbox", id, "err", err)
		return
	}
	m.logs.Store(id, lg)
	m.watchInit(id, lg)
}

// watchInit notices at once when sandbox id's moat-init (PID 1) is gone: its output FIFO
// then has no writer left, because a PID 1 that ends takes every process of its sandbox
// with it (under runsc, the sandbox process goes too). Unless the daemon itself closed the
// log (stop, delete, shutdown: it is no longer lg in m.logs), the sandbox is checked and,
// its container gone, recorded as stopped with the reason (Check). The liveness sweep
// remains for whatever this misses.
func (m *Manager) watchInit(id string, lg *initlog.Log) {
	go func() {
		<-lg.Ended()
		if cur, ok := m.logs.Load(id); !ok || cur != lg {
			return
		}
		// The runtime may report the container a moment after its output ended (its
		// init not yet reaped): look again for a few seconds.
		for range 25 {
			select {
			case <-m.done:
				return
			default:
			}
			sb, err := m.Check(context.Background(), id)
			if errors.Is(err, errdefs.ErrNotFound) {
				return // deleted meanwhile: its deletion ended it
			}
			if err != nil {
				m.log.Warn("checking a sandbox whose init ended", "sandbox", id, "err", err)
				return
			}
			if sb.State != StateRunning {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
}

func (m *Manager) alive(ctx context.Context, sb *Sandbox) bool {
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return false
	}
	ok, err := rt.Running(ctx, sb.ID)
	if err != nil || !ok {
		return false
	}
	if sb.State == StatePaused {
		return true
	}
	return m.health(ctx, sb.ID) == nil
}

// Check notices a sandbox whose container died on its own (a runsc sandbox killed by its
// memory or pids limit, an external kill): a running sandbox whose container is gone is
// stopped cleanly, with the reason recorded. It returns the sandbox's current record.
func (m *Manager) Check(ctx context.Context, id string) (*Sandbox, error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil || sb.State != StateRunning {
		return sb, err
	}
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return sb, nil
	}
	if ok, err := rt.Running(ctx, id); err != nil || ok {
		return sb, err
	}
	reason := "the sandbox's init (PID 1) exited and its container with it (killed from outside, or by its pids limit)"
	// The OOM watch (WatchOOM, every second, without the sandbox's lock) may have recorded
	// the kill first, even after sb was read.
	if n, last := m.noteOOM(ctx, sb); n > 0 || (last != nil && time.Since(*last) < 10*time.Second) {
		reason = fmt.Sprintf("the sandbox's container was ended by the OOM killer (memory limit %d bytes)", sb.Limits.MemoryBytes)
	}
	m.log.Warn("sandbox container exited on its own", "sandbox", id, "reason", reason)
	return m.stopLocked(ctx, sb, reason)
}

// Sweep finds running sandboxes whose moat-init no longer answers and, when their container
// is gone, records them as stopped (Check). A /health dial through the gateway costs
// ~0.2 ms, so the daemon can afford it for every sandbox every few seconds.
func (m *Manager) Sweep(ctx context.Context) {
	list, err := m.store.List(ctx)
	if err != nil {
		m.log.Error("listing sandboxes for the liveness sweep", "err", err)
		return
	}
	for _, sb := range list {
		if sb.State != StateRunning || m.health(ctx, sb.ID) == nil {
			continue
		}
		if _, err := m.Check(ctx, sb.ID); err != nil {
			m.log.Warn("liveness sweep", "sandbox", sb.ID, "err", err)
		}
	}
}
