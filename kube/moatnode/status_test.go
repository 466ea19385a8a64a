package moatnode

import (
	"encoding/json"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestPodStatus(t *testing.T) {
	code := func(c int32) *int32 { return &c }
	running := &v1.Sandbox{ID: "sb-1", State: "running", CreatedAt: time.Unix(100, 0)}
	tests := []struct {
		name   string
		o      Observed
		phase  corev1.PodPhase
		reason string
		ready  bool
		exit   *int32
	}{
		{"not made yet", Observed{}, corev1.PodPending, "", false, nil},
		{"creating", Observed{Sandbox: &v1.Sandbox{ID: "sb-1", State: "creating"}}, corev1.PodPending, "", false, nil},
		{"running, no main", Observed{Sandbox: running}, corev1.PodRunning, "", true, nil},
		{"running, main running", Observed{Sandbox: running, HasMain: true, Main: &v1.ProcessLog{Running: true}}, corev1.PodRunning, "", true, nil},
		{"main exited 0", Observed{Sandbox: running, HasMain: true, Main: &v1.ProcessLog{ExitCode: code(0)}}, corev1.PodSucceeded, "", false, code(0)},
		{"main exited 2", Observed{Sandbox: running, HasMain: true, Main: &v1.ProcessLog{ExitCode: code(2), Status: "exit status 2"}}, corev1.PodFailed, "", false, code(2)},
		{"paused", Observed{Sandbox: &v1.Sandbox{ID: "sb-1", State: "paused"}}, corev1.PodRunning, "", false, nil},
		{"stopped", Observed{Sandbox: &v1.Sandbox{ID: "sb-1", State: "stopped", Error: "oom"}}, corev1.PodFailed, ReasonSandboxError, false, code(137)},
		{"vanished", Observed{Gone: true}, corev1.PodFailed, ReasonSandboxGone, false, code(137)},
		{"refused", Observed{Err: ErrUnsupported}, corev1.PodFailed, ReasonUnsupported, false, code(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := PodStatus(basePod(), tt.o, "127.0.0.9")
			if st.Phase != tt.phase || st.Reason != tt.reason {
				t.Fatalf("phase %s reason %q, want %s %q", st.Phase, st.Reason, tt.phase, tt.reason)
			}
			ready := false
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady {
					ready = c.Status == corev1.ConditionTrue
				}
			}
			if ready != tt.ready || st.ContainerStatuses[0].Ready != tt.ready && st.ContainerStatuses[0].State.Running != nil {
				t.Fatalf("ready %v, want %v", ready, tt.ready)
			}
			term := st.ContainerStatuses[0].State.Terminated
			if (term == nil) != (tt.exit == nil) || term != nil && term.ExitCode != *tt.exit {
				t.Fatalf("terminated %+v, want exit %v", term, tt.exit)
			}
			if tt.o.Sandbox != nil && st.ContainerStatuses[0].ContainerID != "moat://sb-1" {
				t.Fatalf("container id %q", st.ContainerStatuses[0].ContainerID)
			}
		})
	}
}

func TestNodeSpec(t *testing.T) {
	var d Doctor
	if err := json.Unmarshal([]byte(`{"ok":true,"runtimes":[{"name":"runc","usable":true,"isolation":"container"},
		{"name":"runsc","usable":true,"isolation":"gvisor"},{"name":"crun","usable":false}],
		"isolation":[{"name":"container","available":true},{"name":"gvisor","available":true},{"name":"microvm","available":false}],
		"storage":[{"name":"data filesystem","ok":false,"detail":"full"},{"name":"memory checkpoint (runc)","ok":false}]}`), &d); err != nil {
		t.Fatal(err)
	}
	n := NodeSpec(NodeShape{Name: "n1", InternalIP: "127.0.0.2", Port: 10250, CPUs: 2, Memory: 1 << 30, Slots: 7, DaemonURL: "http://127.0.0.2:7070"}, d)
	if n.Annotations[AnnotationDaemonURL] != "http://127.0.0.2:7070" {
		t.Errorf("daemon URL annotation: %v", n.Annotations)
	}
	if m := NodeSpec(NodeShape{Name: "n1"}, d); len(m.Annotations) != 0 {
		t.Errorf("annotations without a daemon URL: %v", m.Annotations)
	} else if _, ok := m.Status.Capacity[corev1.ResourceEphemeralStorage]; ok {
		t.Errorf("ephemeral-storage published without a disk size")
	}
	if m := NodeSpec(NodeShape{Name: "n1", Disk: 64 << 30}, d); m.Status.Capacity.StorageEphemeral().Value() != 64<<30 {
		t.Errorf("ephemeral-storage capacity %v", m.Status.Capacity.StorageEphemeral())
	}
	for _, k := range []string{"moat.dev/runtime-runc", "moat.dev/runtime-runsc", "moat.dev/isolation-container", "moat.dev/isolation-gvisor"} {
		if n.Labels[k] != "true" {
			t.Errorf("label %s missing: %v", k, n.Labels)
		}
	}
	for _, k := range []string{"moat.dev/runtime-crun", "moat.dev/isolation-microvm", "kubernetes.io/role"} {
		if _, ok := n.Labels[k]; ok {
			t.Errorf("label %s set", k)
		}
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != TaintKey || n.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 7 {
		t.Errorf("pods capacity %v", q.String())
	}
	if n.Status.Addresses[0].Address != "127.0.0.2" || n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("address %v port %v", n.Status.Addresses, n.Status.DaemonEndpoints)
	}
	conds := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for _, c := range n.Status.Conditions {
		conds[c.Type] = c.Status
	}
	if conds[corev1.NodeReady] != corev1.ConditionTrue || conds[corev1.NodeDiskPressure] != corev1.ConditionTrue {
		t.Errorf("conditions %v", conds)
	}
	var d2 Doctor
	d2.Storage = []DoctorCheck{{Name: "memory checkpoint (runc)"}}
	if c := NodeConditions(d2, time.Now()); c[0].Status != corev1.ConditionFalse || c[1].Status != corev1.ConditionFalse {
		t.Errorf("no usable runtime but Ready %v, or a failed checkpoint check is disk pressure %v", c[0].Status, c[1].Status)
	}
}

func TestTailBytes(t *testing.T) {
	for _, tt := range []struct {
		in          string
		tail, limit int
		want        string
	}{
		{"a\nb\nc\n", 0, 0, "a\nb\nc\n"},
		{"a\nb\nc\n", 1, 0, "c\n"},
		{"a\nb\nc\n", 2, 0, "b\nc\n"},
		{"a\nb\nc", 1, 0, "c"},
		{"a\nb\nc\n", 9, 0, "a\nb\nc\n"},
		{"a\nb\nc\n", 0, 3, "a\nb"},
		{"", 3, 3, ""},
	} {
		if got := string(TailBytes([]byte(tt.in), tt.tail, tt.limit)); got != tt.want {
			t.Errorf("TailBytes(%q, %d, %d) = %q, want %q", tt.in, tt.tail, tt.limit, got, tt.want)
		}
	}
}

func TestSameConditions(t *testing.T) {
	var d Doctor
	_ = json.Unmarshal([]byte(`{"ok":true,"runtimes":[{"name":"runc","usable":true}],"storage":[{"name":"data filesystem","ok":true}]}`), &d)
	t0 := time.Now()
	a, b := NodeConditions(d, t0), NodeConditions(d, t0.Add(time.Minute))
	if !sameConditions(a, b) {
		t.Errorf("the same doctor report a minute later differs: %v %v", a, b)
	}
	bad := d
	bad.Runtimes = nil
	if sameConditions(a, NodeConditions(bad, t0)) {
		t.Error("no usable runtime: the same conditions")
	}
	if sameConditions(a, a[:len(a)-1]) {
		t.Error("a condition fewer: the same")
	}
}
