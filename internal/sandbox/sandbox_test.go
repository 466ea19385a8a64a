package sandbox

import "testing"

func TestTransitions(t *testing.T) {
	legal := map[[2]State]bool{
		{StateCreating, StateRunning}: true, {StateCreating, StateStopped}: true, {StateCreating, StateDeleting}: true,
		{StateRunning, StatePaused}: true, {StateRunning, StateStopped}: true, {StateRunning, StateDeleting}: true,
		{StatePaused, StateRunning}: true, {StatePaused, StateStopped}: true, {StatePaused, StateDeleting}: true,
		{StateStopped, StateCreating}: true, {StateStopped, StateDeleting}: true,
	}
	all := []State{StateCreating, StateRunning, StatePaused, StateStopped, StateDeleting}
	for _, from := range all {
		for _, to := range all {
			if got := CanTransition(from, to); got != legal[[2]State{from, to}] {
				t.Errorf("%s → %s: %v", from, to, got)
			}
		}
	}
}

func TestHostIDs(t *testing.T) {
	a := (&Sandbox{Slot: 0}).HostIDs()
	b := (&Sandbox{Slot: 1}).HostIDs()
	if a.Host != 0x40000000 || b.Host != a.Host+65536 || a.Size != 65536 {
		t.Errorf("ranges %+v %+v", a, b)
	}
	last := (&Sandbox{Slot: MaxSlots - 1}).HostIDs()
	if uint64(last.Host)+uint64(last.Size) > 1<<32-1 {
		t.Errorf("last slot overflows uid space: %+v", last)
	}
}
