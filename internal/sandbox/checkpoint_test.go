package sandbox

import (
	"context"
	"strings"
	"testing"
)

func TestCheckpointMethod(t *testing.T) {
	for _, c := range []struct {
		name   string
		rt     string
		s      MemorySupport
		reason []string
	}{
		{"runtime cannot", "runsc", MemorySupport{Reason: "hostinet refused"}, []string{"runsc: hostinet refused"}},
		{"runtime can, restore not built", "runc", MemorySupport{OK: true, Reason: "criu check passes"},
			[]string{"runc: ", "criu check passes", "not built yet"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			method, reason := checkpointMethod(c.rt, c.s)
			if method != CheckpointFilesystem {
				t.Errorf("method %q, want %q (no memory restore is built)", method, CheckpointFilesystem)
			}
			for _, r := range c.reason {
				if !strings.Contains(reason, r) {
					t.Errorf("reason %q lacks %q", reason, r)
				}
			}
		})
	}
}

// plainRuntime is a Runtime that is not a Checkpointer.
type plainRuntime struct{ Runtime }

func (plainRuntime) Name() string { return "crun" }

type ckptRuntime struct {
	plainRuntime
	s MemorySupport
}

func (c ckptRuntime) MemoryCheckpoint(context.Context) MemorySupport { return c.s }

func TestMemorySupportOf(t *testing.T) {
	if s := MemorySupportOf(context.Background(), plainRuntime{}); s.OK || !strings.Contains(s.Reason, "crun: moat has no memory checkpoint") {
		t.Errorf("a runtime without MemoryCheckpoint: %+v", s)
	}
	want := MemorySupport{Reason: "r", Fix: "f"}
	if s := MemorySupportOf(context.Background(), ckptRuntime{s: want}); s != want {
		t.Errorf("MemorySupportOf = %+v, want the runtime's %+v", s, want)
	}
}
