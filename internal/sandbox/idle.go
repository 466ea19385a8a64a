package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Idle stop, transparent resume and deletion after a period unused (DESIGN §6).
//
// A sandbox is in use while any of these happens; "idle" is none of them for its whole
// idle period (Sandbox.IdleAfter):
//   - an API call that acts on it (any method but GET on a route naming it: reading its
//     record, events, egress log or metrics does not keep it alive, so `moat ls` or a
//     dashboard never does);
//   - an envd request (exec, file call, PTY, Connect-RPC), native or through the E2B
//     gateway: from its start until its stream ends, however long that is (Acquire);
//   - CPU time consumed by its processes: more than idleCPUShare of one core between two
//     looks of the sweep (its cgroup's cumulative CPU counter, as the metrics read it), so
//     a build or a busy loop running in the background keeps it.
//
// A sandbox idle for its period is first frozen (its processes stay in memory and use no
// CPU; StopIdle with an "idle_freeze" event), so that the next call thaws it in
// milliseconds; frozen for the daemon's freeze period too (Config.IdleFreeze, default
// DefaultIdleFreeze), it is stopped (processes end, memory is freed, the drive stays;
// "idle_stop"). With no freeze period it is stopped at once. Sandboxes a person or their
// timeout paused are left alone: their owner chose to keep their memory. Whatever its state, a sandbox not used for its unused
// period (Sandbox.DeleteAfter) is deleted, its drive written first to
// <data>/archives/<id>.tar.zst when Sandbox.Archive is set ("unused_delete" event).
//
// A call that needs the sandbox running (Acquire) starts an idle-stopped one again under
// its lock, once for concurrent callers, and then serves the call: the caller sees the
// start's latency, never an error. A sandbox stopped or paused by a person is not resumed
// by a call (409 as before: stop means stop); one stopped or paused by its timeout is,
// when it was created with AutoResume (E2B's autoResume).
const (
	// DefaultIdle and DefaultDeleteAfter are the built-in defaults of a create that names
	// none (Config overrides them per daemon).
	DefaultIdle        = 5 * time.Minute
	DefaultDeleteAfter = 7 * 24 * time.Hour
	DefaultIdleFreeze  = 10 * time.Minute
	// Who stopped or paused a sandbox (Sandbox.StopReason); "" is a person (or anything
	// else: a failed start, a dead container).
	StopIdle    = "idle"
	StopTimeout = "timeout"
	// idleCPUShare is the share of one core a sandbox must use between two looks to count
	// as active. moat-init answering health checks and gVisor's sentry at rest use far
	// less; any real work uses more.
	idleCPUShare = 0.02
	// idleFlush bounds how stale a running sandbox's stored LastUsedAt may be.
	idleFlush = 30 * time.Second
)

// validateLifecycle checks a create's idle and unused periods.
func validateLifecycle(opts *CreateOptions) error {
	if opts.Idle != nil && *opts.Idle < 0 {
		return fmt.Errorf("idle period %s is negative (0 turns idle stop off): %w", *opts.Idle, errdefs.ErrInvalidArgument)
	}
	if opts.DeleteAfter != nil && *opts.DeleteAfter < 0 {
		return fmt.Errorf("delete-after period %s is negative (0 turns deletion off): %w", *opts.DeleteAfter, errdefs.ErrInvalidArgument)
	}
	if opts.Archive && opts.DeleteAfter != nil && *opts.DeleteAfter == 0 {
		return fmt.Errorf("archive is what happens at deletion after the unused period, which is off (delete-after 0): %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// setLifecycle fills the record's idle settings from a create's options and the daemon's
// defaults. The create counts as a use.
func (m *Manager) setLifecycle(s *Sandbox, opts CreateOptions, now time.Time) {
	s.IdleAfter = orDefault(opts.Idle, m.cfg.DefaultIdle, DefaultIdle)
	s.DeleteAfter = orDefault(opts.DeleteAfter, m.cfg.DefaultDeleteAfter, DefaultDeleteAfter)
	s.Archive, s.AutoResume = opts.Archive, opts.AutoResume
	s.LastUsedAt = &now
	s.StopReason = ""
	m.Touch(s.ID)
}

// orDefault is *asked, else the daemon's setting (negative: off), else the built-in one.
func orDefault(asked *time.Duration, daemon, builtin time.Duration) time.Duration {
	switch {
	case asked != nil:
		return *asked
	case daemon < 0:
		return 0
	case daemon > 0:
		return daemon
	}
	return builtin
}

// Resumable says whether a call to sb starts (or thaws) it on its own: stopped or frozen
// for idleness, or stopped or paused by its timeout when it was made with AutoResume.
func Resumable(sb *Sandbox) bool {
	switch sb.State {
	case StateStopped, StatePaused:
		return sb.StopReason == StopIdle || sb.AutoResume && sb.StopReason == StopTimeout
	}
	return false
}

// IdleAction is what the idle sweep does with one sandbox.
type IdleAction int

const (
	IdleKeep IdleAction = iota
	IdleFreeze
	IdleStop
	IdleDelete
)

func (a IdleAction) String() string {
	return [...]string{"keep", "freeze", "stop", "delete"}[a]
}

// IdleInput is what DecideIdle looks at.
type IdleInput struct {
	State       State
	StopReason  string // who paused or stopped it (Sandbox.StopReason)
	Warm        bool
	IdleAfter   time.Duration // 0: never idle-stopped
	DeleteAfter time.Duration // 0: never deleted for disuse
	LastUsed    time.Time     // the latest activity (API call, stream end, CPU use, create)
	Open        int           // envd streams open now
	Freeze      time.Duration // how long an idle sandbox stays frozen before it is stopped (0: not frozen)
	Now         time.Time
}

// DecideIdle is the idle sweep's decision for one sandbox. A sandbox with an open stream,
// a warm one and one being created or deleted are kept. One unused for DeleteAfter is
// deleted (whatever its state). A running one unused for IdleAfter is frozen, or stopped
// when there is no freeze period; one frozen for idleness and unused for IdleAfter +
// Freeze is stopped. It is pure.
func DecideIdle(in IdleInput) IdleAction {
	if in.Warm || in.Open > 0 {
		return IdleKeep
	}
	switch in.State {
	case StateRunning, StatePaused, StateStopped:
	default:
		return IdleKeep
	}
	unused := in.Now.Sub(in.LastUsed)
	if in.DeleteAfter > 0 && unused >= in.DeleteAfter {
		return IdleDelete
	}
	if in.IdleAfter <= 0 {
		return IdleKeep
	}
	switch {
	case in.State == StateRunning && unused >= in.IdleAfter && in.Freeze > 0:
		return IdleFreeze
	case in.State == StateRunning && unused >= in.IdleAfter:
		return IdleStop
	case in.State == StatePaused && in.StopReason == StopIdle && unused >= in.IdleAfter+in.Freeze:
		return IdleStop
	}
	return IdleKeep
}

// cpuActive says whether a sandbox that used usedNs of CPU time over elapsed was doing
// work: more than idleCPUShare of one core. A counter that went back (a new cgroup after a
// restart) is activity. It is pure.
func cpuActive(prevNs, curNs uint64, elapsed time.Duration) bool {
	if curNs < prevNs {
		return true
	}
	if elapsed <= 0 {
		return false
	}
	return float64(curNs-prevNs) > idleCPUShare*float64(elapsed.Nanoseconds())
}

// LifecycleTimes returns when sb was last used and when, unused from now on, it would be
// idle-stopped (nil: it will not be: off, or not running) and deleted (nil: never).
func LifecycleTimes(sb *Sandbox) (last time.Time, idleAt, deleteAt *time.Time) {
	last = lastUsed(sb)
	if sb.State == StateRunning && sb.IdleAfter > 0 {
		t := last.Add(sb.IdleAfter)
		idleAt = &t
	}
	if sb.DeleteAfter > 0 && sb.State != StateDeleting {
		t := last.Add(sb.DeleteAfter)
		deleteAt = &t
	}
	return last, idleAt, deleteAt
}

// lastUsed is the record's latest use: LastUsedAt, else its creation.
func lastUsed(sb *Sandbox) time.Time {
	if sb.LastUsedAt != nil && sb.LastUsedAt.After(sb.CreatedAt) {
		return *sb.LastUsedAt
	}
	return sb.CreatedAt
}

// activity is one sandbox's use as this daemon has seen it.
type activity struct {
	mu    sync.Mutex
	last  time.Time // latest API call, stream end, or CPU use seen
	open  int       // envd streams open now
	cpuNs uint64    // CPU counter at cpuAt (cpuAt zero: no reading yet)
	cpuAt time.Time
}

func (m *Manager) activityOf(id string) *activity {
	v, _ := m.act.LoadOrStore(id, &activity{})
	return v.(*activity)
}

func (m *Manager) now() time.Time {
	if m.cfg.Now != nil {
		return m.cfg.Now().UTC()
	}
	return time.Now().UTC()
}

// Touch records an API call that acts on sandbox id (a use).
func (m *Manager) Touch(id string) {
	a := m.activityOf(id)
	now := m.now()
	a.mu.Lock()
	if now.After(a.last) {
		a.last = now
	}
	a.mu.Unlock()
}

// Acquire is the way in of every call that needs sandbox id running (an envd request:
// exec, file call, PTY): it counts as a use, starts (or thaws) the sandbox when it is
// Resumable, under its lock so that concurrent callers wait for one start, and counts a
// stream open until release is called (at the end of the call's response). It returns
// the sandbox's record: a sandbox that is not running and not resumable is returned as
// it is, for the caller to refuse. Warm sandboxes do not exist here.
func (m *Manager) Acquire(ctx context.Context, id string) (sb *Sandbox, release func(), err error) {
	noop := func() {}
	sb, err = m.Get(ctx, id)
	if err != nil {
		return nil, noop, err
	}
	a := m.activityOf(id)
	count := func() func() {
		a.mu.Lock()
		a.open++
		if now := m.now(); now.After(a.last) {
			a.last = now
		}
		a.mu.Unlock()
		var once sync.Once
		return func() {
			once.Do(func() {
				a.mu.Lock()
				a.open--
				if now := m.now(); now.After(a.last) {
					a.last = now
				}
				a.mu.Unlock()
			})
		}
	}
	if sb.State != StateRunning && sb.State != StateCreating && !Resumable(sb) {
		m.Touch(id)
		return sb, noop, nil
	}
	// Under the lock: the idle sweep stops a sandbox only under it with no stream open, so
	// a stream counted here keeps it running; a start under way (creating) finishes first.
	unlock := m.lock(id)
	defer unlock()
	if sb, err = m.store.Get(ctx, id); err != nil {
		return nil, noop, err
	}
	return m.wakeLocked(ctx, sb, count)
}

// wakeLocked brings a Resumable sandbox back (the caller holds its lock) and counts the
// caller's stream; others are returned as they are.
func (m *Manager) wakeLocked(ctx context.Context, sb *Sandbox, count func() func()) (*Sandbox, func(), error) {
	noop := func() {}
	if sb.State == StateRunning {
		return sb, count(), nil
	}
	if !Resumable(sb) {
		return sb, noop, nil
	}
	release := count() // the sweep must not stop it again before the call is served
	from, t0 := sb.State, time.Now()
	var err error
	if sb.State == StateStopped {
		done := m.busy() // the warm pools wait for a start, as for Start (pool.go)
		sb, err = m.startLocked(ctx, sb.ID)
		done()
	} else {
		sb, err = m.thawLocked(ctx, sb)
	}
	if err != nil {
		release()
		return nil, noop, fmt.Errorf("resuming sandbox: %w", err)
	}
	m.log.Info("sandbox resumed by a call", "sandbox", sb.ID, "from", from, "took", time.Since(t0))
	if err := m.store.AddEvent(context.WithoutCancel(ctx), sb.ID, "auto_resume", fmt.Sprintf("%s sandbox resumed by a call in %s", from, time.Since(t0).Round(time.Millisecond))); err != nil {
		m.log.Warn("recording a resume", "sandbox", sb.ID, "err", err)
	}
	return sb, release, nil
}

// thawLocked thaws a sandbox frozen for idleness or paused by its timeout; the latter
// gets its timeout again (the pause cleared its deadline).
func (m *Manager) thawLocked(ctx context.Context, sb *Sandbox) (*Sandbox, error) {
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return nil, fmt.Errorf("runtime %s unavailable: %w", sb.Runtime, errdefs.ErrUnavailable)
	}
	if err := rt.Resume(ctx, sb.ID); err != nil {
		return nil, fmt.Errorf("thawing sandbox %s: %w", sb.ID, err)
	}
	return m.store.Update(ctx, sb.ID, func(s *Sandbox) error {
		s.State, s.StopReason = StateRunning, ""
		if s.Timeout > 0 && s.ExpiresAt == nil {
			exp := time.Now().UTC().Add(s.Timeout)
			s.ExpiresAt = &exp
		}
		return nil
	})
}

// Archiver writes a stopped sandbox's drive to an archive and says where. Implemented by
// *storage.Store; without it, sandboxes asking for an archive are not deleted for disuse.
type Archiver interface {
	ArchiveDrive(ctx context.Context, id string) (string, error)
}

// Idle is the idle sweep (the daemon calls it every second): it reads each running
// sandbox's CPU counter, then stops the idle ones and deletes those unused past their
// period (DecideIdle), and keeps the records' LastUsedAt fresh.
func (m *Manager) Idle(ctx context.Context) {
	list, err := m.store.List(ctx)
	if err != nil {
		m.log.Error("listing sandboxes for the idle sweep", "err", err)
		return
	}
	for _, sb := range list {
		if sb.Warm || sb.State == StateDeleting || sb.State == StateCreating {
			continue
		}
		now := m.now()
		a := m.activityOf(sb.ID)
		m.sampleCPU(ctx, sb, a, now)
		in := m.idleInput(sb, a, now)
		act := DecideIdle(in)
		if act == IdleKeep {
			m.flushLastUsed(ctx, sb, a)
			continue
		}
		if err := m.idleAct(ctx, sb.ID, act); err != nil {
			m.log.Error("idle sweep", "sandbox", sb.ID, "action", act, "err", err)
		}
	}
	// Forget the activity of sandboxes that are gone.
	m.act.Range(func(k, _ any) bool {
		if _, err := m.store.Get(ctx, k.(string)); errors.Is(err, errdefs.ErrNotFound) {
			m.act.Delete(k)
		}
		return true
	})
}

// idleInput gathers DecideIdle's input for sb from its record and its activity.
func (m *Manager) idleInput(sb *Sandbox, a *activity, now time.Time) IdleInput {
	last := lastUsed(sb)
	a.mu.Lock()
	if a.last.After(last) {
		last = a.last
	}
	open := a.open
	a.mu.Unlock()
	return IdleInput{State: sb.State, StopReason: sb.StopReason, Warm: sb.Warm, IdleAfter: sb.IdleAfter, DeleteAfter: sb.DeleteAfter,
		LastUsed: last, Open: open, Freeze: m.idleFreeze(), Now: now}
}

// idleFreeze is the daemon's freeze period (0: none).
func (m *Manager) idleFreeze() time.Duration {
	switch f := m.cfg.IdleFreeze; {
	case f < 0:
		return 0
	case f == 0:
		return DefaultIdleFreeze
	default:
		return f
	}
}

// sampleCPU reads a running sandbox's CPU counter and counts CPU use since the last
// reading as activity.
func (m *Manager) sampleCPU(ctx context.Context, sb *Sandbox, a *activity, now time.Time) {
	if sb.State != StateRunning {
		a.mu.Lock()
		a.cpuAt = time.Time{}
		a.mu.Unlock()
		return
	}
	rt := m.runtimes[sb.Runtime]
	if rt == nil {
		return
	}
	st, err := rt.Stats(ctx, sb.ID)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.cpuAt.IsZero() && cpuActive(a.cpuNs, st.CPUUsageNs, now.Sub(a.cpuAt)) && now.After(a.last) {
		a.last = now
	}
	a.cpuNs, a.cpuAt = st.CPUUsageNs, now
}

// flushLastUsed writes the latest use to the record when it is idleFlush newer than the
// stored one.
func (m *Manager) flushLastUsed(ctx context.Context, sb *Sandbox, a *activity) {
	a.mu.Lock()
	last := a.last
	a.mu.Unlock()
	if !last.After(lastUsed(sb).Add(idleFlush)) {
		return
	}
	m.saveLastUsed(ctx, sb.ID, last)
}

func (m *Manager) saveLastUsed(ctx context.Context, id string, last time.Time) {
	if _, err := m.store.Update(ctx, id, func(s *Sandbox) error {
		if s.LastUsedAt == nil || last.After(*s.LastUsedAt) {
			s.LastUsedAt = &last
		}
		return nil
	}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.log.Warn("recording a sandbox's last use", "sandbox", id, "err", err)
	}
}

// idleAct stops or deletes sandbox id under its lock, after deciding again on its current
// record and activity (a call may have come meanwhile).
func (m *Manager) idleAct(ctx context.Context, id string, _ IdleAction) error {
	unlock := m.lock(id)
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return err
	}
	a := m.activityOf(id)
	in := m.idleInput(sb, a, m.now())
	unused := in.Now.Sub(in.LastUsed).Round(time.Second)
	switch DecideIdle(in) {
	case IdleFreeze:
		rt := m.runtimes[sb.Runtime]
		if rt == nil {
			return fmt.Errorf("runtime %s unavailable: %w", sb.Runtime, errdefs.ErrUnavailable)
		}
		m.log.Info("freezing idle sandbox", "sandbox", id, "unused", unused)
		if err := rt.Pause(ctx, id); err != nil {
			return fmt.Errorf("freezing idle sandbox: %w", err)
		}
		if _, err := m.store.Update(ctx, id, func(s *Sandbox) error {
			s.State, s.StopReason = StatePaused, StopIdle
			return nil
		}); err != nil {
			return err
		}
		m.saveLastUsed(ctx, id, in.LastUsed)
		return m.store.AddEvent(ctx, id, "idle_freeze", fmt.Sprintf("no activity for %s (idle period %s): frozen; the next call thaws it; stopped after %s more", unused, sb.IdleAfter, in.Freeze))
	case IdleStop:
		m.log.Info("stopping idle sandbox", "sandbox", id, "unused", unused)
		if _, err := m.stopFor(ctx, sb, "", StopIdle); err != nil {
			return err
		}
		m.saveLastUsed(ctx, id, in.LastUsed)
		return m.store.AddEvent(ctx, id, "idle_stop", fmt.Sprintf("no activity for %s (idle period %s); the next call starts it again", unused, sb.IdleAfter))
	case IdleDelete:
		detail := fmt.Sprintf("unused for %s (period %s)", unused, sb.DeleteAfter)
		if sb.Archive {
			if sb.State != StateStopped {
				// As an idle stop: should the archive fail, a call still brings it back.
				if _, err = m.stopFor(ctx, sb, "", StopIdle); err != nil {
					return err
				}
			}
			ar, ok := m.storage.(Archiver)
			if !ok {
				return fmt.Errorf("archiving the drive before deleting: %w", errdefs.ErrUnavailable)
			}
			path, err := ar.ArchiveDrive(ctx, id)
			if err != nil {
				m.event(ctx, id, "archive_failed", err.Error())
				return fmt.Errorf("archiving the drive before deleting (kept; retried): %w", err)
			}
			detail += "; drive archived to " + path
		}
		m.log.Info("deleting unused sandbox", "sandbox", id, "detail", detail)
		if err := m.store.AddEvent(ctx, id, "unused_delete", detail); err != nil {
			return err
		}
		// Deleting from here on, before the lock goes: no call resumes it meanwhile.
		if _, err := m.store.Update(ctx, id, func(s *Sandbox) error {
			if err := checkTransition(id, s.State, StateDeleting); err != nil {
				return err
			}
			s.State = StateDeleting
			return nil
		}); err != nil {
			return err
		}
		unlock()
		locked = false
		return m.Delete(ctx, id)
	}
	return nil
}
