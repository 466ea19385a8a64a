package moatnode

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/moatdev/moat/sdk"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Doctor is the part of the daemon's doctor report (GET /v1/doctor) the node uses.
type Doctor struct {
	OK       bool `json:"ok"`
	Runtimes []struct {
		Name      string `json:"name"`
		Usable    bool   `json:"usable"`
		Isolation string `json:"isolation"`
		Version   string `json:"version"`
		Problem   string `json:"problem"`
	} `json:"runtimes"`
	Isolation []struct {
		Name      string `json:"name"`
		Available bool   `json:"available"`
		Detail    string `json:"detail"`
	} `json:"isolation"`
	Kernel  []DoctorCheck `json:"kernel"`
	Storage []DoctorCheck `json:"storage"`
}

// DoctorCheck is one check of the doctor report.
type DoctorCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// NodeShape is what a node registers: its address and kubelet port, and its capacity.
type NodeShape struct {
	Name       string
	InternalIP string
	Port       int32
	CPUs       int64
	Memory     int64 // bytes
	Slots      int64 // sandboxes at once (Pod capacity)
	Disk       int64 // bytes of drives the node can hold (ephemeral-storage; 0: none published)
	Version    string
	// DaemonURL is the node daemon's TCP API (moat serve --listen), published for the
	// cluster front as annotation moat.dev/daemon-url ("": none).
	DaemonURL string
}

// NodeSpec is the Node object for shape given the doctor report: labels for each usable
// runtime (moat.dev/runtime-NAME=true) and available isolation level
// (moat.dev/isolation-LEVEL=true), the moat.dev/sandbox=true:NoSchedule taint, capacity,
// and conditions (Ready from the doctor's overall verdict; DiskPressure from the storage
// filesystem check). It sets no kubernetes.io/role label (NodeRestriction refuses it). Pure.
func NodeSpec(s NodeShape, d Doctor) corev1.Node {
	labels := map[string]string{
		"type":                   "virtual-kubelet",
		"kubernetes.io/hostname": s.Name,
		"kubernetes.io/os":       "linux",
		"moat.dev/node":          "true",
	}
	var rts []string
	for _, rt := range d.Runtimes {
		if rt.Usable && isWord(rt.Name) {
			labels[LabelRuntimePrefix+rt.Name] = "true"
			rts = append(rts, rt.Name)
		}
	}
	for _, l := range d.Isolation {
		if l.Available && isWord(l.Name) {
			labels[LabelIsolationPrefix+l.Name] = "true"
		}
	}
	sort.Strings(rts)
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(s.CPUs, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(s.Memory, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(s.Slots, resource.DecimalSI),
	}
	if s.Disk > 0 {
		// Without it a Pod asking for ephemeral-storage (a sandbox's drive) never schedules.
		capacity[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(s.Disk, resource.BinarySI)
	}
	var ann map[string]string
	if s.DaemonURL != "" {
		ann = map[string]string{AnnotationDaemonURL: s.DaemonURL}
	}
	n := corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Labels: labels, Annotations: ann},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: TaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: s.InternalIP},
				{Type: corev1.NodeHostName, Address: s.Name},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: s.Port}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux", Architecture: "amd64",
				KubeletVersion:          s.Version,
				ContainerRuntimeVersion: "moat://" + strings.Join(rts, ","),
			},
			Conditions: NodeConditions(d, time.Time{}),
		},
	}
	return n
}

// NodeConditions are the node's conditions from the doctor report, stamped at now.
func NodeConditions(d Doctor, now time.Time) []corev1.NodeCondition {
	t := metav1.NewTime(now)
	cond := func(typ corev1.NodeConditionType, ok bool, reason, msg string) corev1.NodeCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		return corev1.NodeCondition{Type: typ, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: t, LastTransitionTime: t}
	}
	usable := false
	for _, rt := range d.Runtimes {
		usable = usable || rt.Usable
	}
	ready := cond(corev1.NodeReady, usable, "MoatReady", "moat daemon answers and a runtime is usable")
	if !usable {
		ready.Reason, ready.Message = "NoUsableRuntime", "moat doctor finds no usable runtime"
	}
	var failed []string
	for _, c := range d.Storage {
		// Only the data filesystem's room is pressure; other storage checks (snapshots,
		// memory checkpoints) are features the host may lack.
		if !c.OK && c.Name == "data filesystem" {
			failed = append(failed, c.Name+": "+c.Detail)
		}
	}
	disk := cond(corev1.NodeDiskPressure, len(failed) > 0, "MoatStorage", strings.Join(failed, "; "))
	if len(failed) == 0 {
		disk.Message = "moat doctor: the data filesystem has room"
	}
	var kern []string
	for _, c := range d.Kernel {
		if !c.OK {
			kern = append(kern, c.Name)
		}
	}
	kmsg := "moat doctor's kernel checks pass"
	if len(kern) > 0 {
		kmsg = "kernel checks failing: " + strings.Join(kern, ", ")
	}
	return []corev1.NodeCondition{
		ready, disk,
		cond(corev1.NodeMemoryPressure, false, "MoatMemory", "not measured by moat"),
		cond(corev1.NodePIDPressure, false, "MoatPIDs", "each sandbox has its own pids limit"),
		cond(corev1.NodeNetworkUnavailable, false, "MoatNetwork", kmsg),
	}
}

// NodeProvider heartbeats the node from the daemon: Ping asks the daemon, and every
// period the doctor report refreshes the node's conditions.
type NodeProvider struct {
	c      *sdk.Client
	log    *slog.Logger
	period time.Duration

	mu   sync.Mutex
	node *corev1.Node
}

// NewNodeProvider returns a NodeProvider updating node (the spec NodeSpec made).
func NewNodeProvider(c *sdk.Client, node *corev1.Node, period time.Duration, log *slog.Logger) *NodeProvider {
	return &NodeProvider{c: c, node: node, period: period, log: log}
}

// Ping is the heartbeat: the daemon must answer.
func (np *NodeProvider) Ping(ctx context.Context) error {
	if err := np.c.Ping(ctx); err != nil {
		return fmt.Errorf("moat daemon: %w", err)
	}
	return nil
}

// statusRefresh is how often the node's status is written when nothing changed (the
// kubelet's own default report frequency): liveness is the Lease, so status writes are
// only needed for changes.
const statusRefresh = 5 * time.Minute

// NotifyNodeStatus checks the doctor every period and sends the conditions when they
// changed, or every statusRefresh.
func (np *NodeProvider) NotifyNodeStatus(ctx context.Context, cb func(*corev1.Node)) {
	go func() {
		t := time.NewTicker(np.period)
		defer t.Stop()
		sent := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var d Doctor
			if err := np.c.Doctor(ctx, &d); err != nil {
				np.log.Warn("moat doctor", "err", err)
				d = Doctor{}
			}
			now := time.Now()
			np.mu.Lock()
			conds := NodeConditions(d, now)
			if sameConditions(np.node.Status.Conditions, conds) && now.Sub(sent) < statusRefresh {
				np.mu.Unlock()
				continue
			}
			n := np.node.DeepCopy()
			n.Status.Conditions = conds
			np.node = n
			np.mu.Unlock()
			sent = now
			cb(n.DeepCopy())
		}
	}()
}

// sameConditions reports whether two condition lists say the same (type, status, reason
// and message; not their times). Pure.
func sameConditions(a, b []corev1.NodeCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status || a[i].Reason != b[i].Reason || a[i].Message != b[i].Message {
			return false
		}
	}
	return true
}
