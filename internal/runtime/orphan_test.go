package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestStopKillsOrphans: a container whose runtime state is gone (a runtime killed half-way)
// still has processes in its cgroup; Stop kills them and removes the cgroup.
func TestStopKillsOrphans(t *testing.T) {
	o := newDriver(t, "runc")
	sb := newTestSandbox(t, "runc")
	startContainer(t, o, sb)
	st, err := o.State(context.Background(), sb.spec.ID)
	if err != nil || st.Pid <= 0 {
		t.Fatalf("state: %+v %v", st, err)
	}
	// Lose the runtime's state, as a runtime killed mid-create would.
	if err := os.RemoveAll(filepath.Join(o.Root(), sb.spec.ID)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := o.Running(context.Background(), sb.spec.ID); ok {
		t.Fatalf("runtime still knows the container")
	}
	if err := syscall.Kill(st.Pid, 0); err != nil {
		t.Fatalf("the orphan is not running before Stop: %v", err)
	}
	if err := o.Stop(context.Background(), sb.spec.ID); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(st.Pid) + "/status")
	if len(data) > 0 && !strings.Contains(string(data), "State:\tZ") {
		t.Errorf("orphaned container process %d survived Stop", st.Pid)
	}
	assertGone(t, o, sb.spec.ID)
}
