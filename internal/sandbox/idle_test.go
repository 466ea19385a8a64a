package sandbox

import (
	"testing"
	"time"
)

func TestDecideIdle(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	base := IdleInput{State: StateRunning, IdleAfter: 5 * time.Minute, DeleteAfter: 7 * 24 * time.Hour, Now: now}
	with := func(f func(*IdleInput)) IdleInput { in := base; f(&in); return in }
	cases := []struct {
		name string
		in   IdleInput
		want IdleAction
	}{
		{"used just now", with(func(i *IdleInput) { i.LastUsed = now }), IdleKeep},
		{"one second short of the idle period", with(func(i *IdleInput) { i.LastUsed = ago(5*time.Minute - time.Second) }), IdleKeep},
		{"idle period reached", with(func(i *IdleInput) { i.LastUsed = ago(5 * time.Minute) }), IdleStop},
		{"idle, but a stream is open", with(func(i *IdleInput) { i.LastUsed = ago(time.Hour); i.Open = 1 }), IdleKeep},
		{"idle stop off", with(func(i *IdleInput) { i.LastUsed = ago(time.Hour); i.IdleAfter = 0 }), IdleKeep},
		{"paused by a person is not idle-stopped", with(func(i *IdleInput) { i.LastUsed = ago(time.Hour); i.State = StatePaused }), IdleKeep},
		{"stopped is not stopped again", with(func(i *IdleInput) { i.LastUsed = ago(time.Hour); i.State = StateStopped }), IdleKeep},
		{"warm sandboxes are the pool's", with(func(i *IdleInput) { i.LastUsed = ago(30 * 24 * time.Hour); i.Warm = true }), IdleKeep},
		{"creating", with(func(i *IdleInput) { i.LastUsed = ago(30 * 24 * time.Hour); i.State = StateCreating }), IdleKeep},
		{"deleting", with(func(i *IdleInput) { i.LastUsed = ago(30 * 24 * time.Hour); i.State = StateDeleting }), IdleKeep},
		{"unused period reached while stopped", with(func(i *IdleInput) { i.LastUsed = ago(7 * 24 * time.Hour); i.State = StateStopped }), IdleDelete},
		{"unused period reached while paused", with(func(i *IdleInput) { i.LastUsed = ago(8 * 24 * time.Hour); i.State = StatePaused }), IdleDelete},
		{"unused period reached while running: delete wins", with(func(i *IdleInput) { i.LastUsed = ago(8 * 24 * time.Hour) }), IdleDelete},
		{"unused, but a stream is open", with(func(i *IdleInput) { i.LastUsed = ago(8 * 24 * time.Hour); i.Open = 2 }), IdleKeep},
		{"deletion off", with(func(i *IdleInput) { i.LastUsed = ago(80 * 24 * time.Hour); i.State = StateStopped; i.DeleteAfter = 0 }), IdleKeep},
		{"last use in the future (clock step)", with(func(i *IdleInput) { i.LastUsed = now.Add(time.Hour) }), IdleKeep},
		// With a freeze period: frozen first, stopped after it.
		{"idle with a freeze period: frozen", with(func(i *IdleInput) { i.LastUsed = ago(5 * time.Minute); i.Freeze = 10 * time.Minute }), IdleFreeze},
		{"frozen for idleness, freeze period not over", with(func(i *IdleInput) {
			i.LastUsed, i.Freeze, i.State, i.StopReason = ago(15*time.Minute-time.Second), 10*time.Minute, StatePaused, StopIdle
		}), IdleKeep},
		{"frozen for idleness, freeze period over: stopped", with(func(i *IdleInput) {
			i.LastUsed, i.Freeze, i.State, i.StopReason = ago(15*time.Minute), 10*time.Minute, StatePaused, StopIdle
		}), IdleStop},
		{"frozen for idleness, no freeze period (daemon changed): stopped", with(func(i *IdleInput) {
			i.LastUsed, i.State, i.StopReason = ago(5*time.Minute), StatePaused, StopIdle
		}), IdleStop},
		{"paused by a person is never idle-stopped", with(func(i *IdleInput) {
			i.LastUsed, i.Freeze, i.State = ago(time.Hour), 10*time.Minute, StatePaused
		}), IdleKeep},
		{"paused by its timeout is never idle-stopped", with(func(i *IdleInput) {
			i.LastUsed, i.State, i.StopReason = ago(time.Hour), StatePaused, StopTimeout
		}), IdleKeep},
		{"frozen for idleness, idle stop turned off", with(func(i *IdleInput) {
			i.LastUsed, i.State, i.StopReason, i.IdleAfter = ago(time.Hour), StatePaused, StopIdle, 0
		}), IdleKeep},
		{"frozen with a stream open (thawing)", with(func(i *IdleInput) {
			i.LastUsed, i.State, i.StopReason, i.Open = ago(time.Hour), StatePaused, StopIdle, 1
		}), IdleKeep},
	}
	for _, c := range cases {
		if got := DecideIdle(c.in); got != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
}

func TestCPUActive(t *testing.T) {
	cases := []struct {
		name      string
		prev, cur uint64
		elapsed   time.Duration
		want      bool
	}{
		{"nothing used", 1000, 1000, time.Second, false},
		{"health checks: 1 ms a second", 0, uint64(time.Millisecond), time.Second, false},
		{"just under 2%", 0, uint64(19 * time.Millisecond), time.Second, false},
		{"just over 2%", 0, uint64(21 * time.Millisecond), time.Second, true},
		{"a busy loop", 0, uint64(time.Second), time.Second, true},
		{"counter went back (new cgroup)", 5000, 10, time.Second, true},
		{"no time passed", 0, 100, 0, false},
	}
	for _, c := range cases {
		if got := cpuActive(c.prev, c.cur, c.elapsed); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestResumable(t *testing.T) {
	cases := []struct {
		state      State
		reason     string
		autoResume bool
		want       bool
	}{
		{StateStopped, StopIdle, false, true},
		{StateStopped, "", false, false},          // stopped by a person: stop means stop
		{StateStopped, "", true, false},           // even with autoResume
		{StateStopped, StopTimeout, false, false}, // the timeout ends it unless autoResume
		{StateStopped, StopTimeout, true, true},
		{StatePaused, StopTimeout, true, true},
		{StatePaused, "", true, false},       // paused by a person
		{StatePaused, StopIdle, false, true}, // frozen for idleness
		{StateRunning, StopIdle, true, false},
		{StateDeleting, StopIdle, true, false},
	}
	for _, c := range cases {
		sb := &Sandbox{State: c.state, StopReason: c.reason, AutoResume: c.autoResume}
		if got := Resumable(sb); got != c.want {
			t.Errorf("%s/%q/autoResume=%v: got %v, want %v", c.state, c.reason, c.autoResume, got, c.want)
		}
	}
}

func TestOrDefault(t *testing.T) {
	d := func(x time.Duration) *time.Duration { return &x }
	cases := []struct {
		asked           *time.Duration
		daemon, builtin time.Duration
		want            time.Duration
	}{
		{nil, 0, DefaultIdle, DefaultIdle},
		{nil, time.Minute, DefaultIdle, time.Minute},
		{nil, -1, DefaultIdle, 0},
		{d(0), time.Minute, DefaultIdle, 0},
		{d(3 * time.Second), -1, DefaultIdle, 3 * time.Second},
	}
	for i, c := range cases {
		if got := orDefault(c.asked, c.daemon, c.builtin); got != c.want {
			t.Errorf("case %d: got %s, want %s", i, got, c.want)
		}
	}
}

func TestLifecycleTimes(t *testing.T) {
	created := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	used := created.Add(time.Hour)
	sb := &Sandbox{State: StateRunning, CreatedAt: created, LastUsedAt: &used, IdleAfter: 5 * time.Minute, DeleteAfter: 24 * time.Hour}
	last, idleAt, deleteAt := LifecycleTimes(sb)
	if !last.Equal(used) || idleAt == nil || !idleAt.Equal(used.Add(5*time.Minute)) || deleteAt == nil || !deleteAt.Equal(used.Add(24*time.Hour)) {
		t.Fatalf("running: %v %v %v", last, idleAt, deleteAt)
	}
	sb.State = StateStopped
	if _, idleAt, _ := LifecycleTimes(sb); idleAt != nil {
		t.Errorf("a stopped sandbox has an idle-stop time: %v", idleAt)
	}
	sb.LastUsedAt, sb.DeleteAfter = nil, 0
	if last, _, deleteAt := LifecycleTimes(sb); !last.Equal(created) || deleteAt != nil {
		t.Errorf("never used, deletion off: %v %v", last, deleteAt)
	}
}
