// Package smoke proves the test control plane that test/cluster/harness brings up: a real
// API server with Node and RBAC authorization and NodeRestriction, a controller manager and a
// scheduler. Run by `make test-cluster` (not by the main module's go test ./...).
package smoke

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/moatdev/moat/test/cluster/harness"
)

const taintKey = "moat.dev/sandbox"

func clientset(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// up brings a cluster up for one test and checks, at cleanup, that Down left no process.
func up(t testing.TB) *harness.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := harness.Up(ctx, harness.Options{Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	procs := append([]harness.Proc(nil), c.Procs...)
	t.Cleanup(func() {
		if err := c.Down(); err != nil {
			t.Error(err)
		}
		for _, p := range procs {
			if _, err := os.Stat("/proc/" + strconv.Itoa(p.Pid)); err == nil {
				t.Errorf("%s (pid %d) still runs after Down", p.Name, p.Pid)
			}
		}
	})
	return c
}

func TestControlPlane(t *testing.T) {
	_, runBefore := os.Stat("/var/run/kubernetes")
	_, flexBefore := os.Stat("/usr/libexec/kubernetes")
	c := up(t)
	t.Logf("bring-up %v: %+v", c.BringUp().Round(time.Millisecond), c.Stages)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := clientset(t, c.AdminKubeconfig)

	// The API server is healthy and the pinned release.
	body, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil || string(body) != "ok" {
		t.Fatalf("/readyz: %q %v", body, err)
	}
	v, err := admin.Discovery().ServerVersion()
	if err != nil || v.GitVersion != harness.KubeVersion {
		t.Fatalf("server version %v %v", v, err)
	}

	// The controller manager made the default service account.
	if _, err := admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}

	// A node registers itself with its node certificate.
	creds, err := c.Node("moat-smoke")
	if err != nil {
		t.Fatal(err)
	}
	node := clientset(t, creds.Kubeconfig)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "moat-smoke", Labels: map[string]string{
			"kubernetes.io/role": "agent", // virtual-kubelet's default: NodeRestriction refuses it
		}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: taintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	}
	if _, err := node.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("node with label kubernetes.io/role: err = %v, want forbidden", err)
	}
	n.Labels = map[string]string{"type": "virtual-kubelet", "moat.dev/node": "true"}
	if n, err = node.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Admission (TaintNodesByCondition) gives a new node the not-ready taint, which only the
	// controller manager's node lifecycle controller removes (below, once it is Ready).
	if !hasTaint(n, corev1.TaintNodeNotReady) {
		t.Fatalf("new node's taints %v lack %s", n.Spec.Taints, corev1.TaintNodeNotReady)
	}
	// NodeRestriction: a node cannot create another node.
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "moat-other"}}
	if _, err := node.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("node creating another node: err = %v, want forbidden", err)
	}
	// It reports itself ready, with its address and capacity.
	n, err = node.CoreV1().Nodes().Get(ctx, "moat-smoke", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	n.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("10")},
	}
	n.Status.Allocatable = n.Status.Capacity
	if _, err := node.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	for !func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, "moat-smoke", metav1.GetOptions{})
		return err == nil && !hasTaint(n, corev1.TaintNodeNotReady)
	}() {
		if ctx.Err() != nil {
			t.Fatal("the not-ready taint stayed on a Ready node")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Its heartbeat Lease: created, then renewed.
	leases := node.CoordinationV1().Leases("kube-node-lease")
	l, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "moat-smoke", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: "moat-smoke", UID: n.UID}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("moat-smoke"), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := metav1.MicroTime{Time: time.Now().Add(time.Second).Truncate(time.Microsecond)}
	l.Spec.RenewTime = &renewed
	if l, err = leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !l.Spec.RenewTime.Equal(&renewed) {
		t.Fatalf("lease renew time %v, want %v", l.Spec.RenewTime, renewed)
	}

	// virtual-kubelet's informers list secrets and configmaps cluster-wide.
	if _, err := node.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("node listing secrets: %v", err)
	}
	if _, err := node.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("node listing configmaps: %v", err)
	}

	// The scheduler places a Pod that tolerates the node's taint on it, and not one that
	// does not.
	pod := func(name string, tolerate bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				Containers:                    []corev1.Container{{Name: "main", Image: "moat/none"}},
				TerminationGracePeriodSeconds: ptr.To[int64](1),
			},
		}
		if tolerate {
			p.Spec.Tolerations = []corev1.Toleration{{Key: taintKey, Operator: corev1.TolerationOpExists}}
		}
		return p
	}
	pods := admin.CoreV1().Pods("default")
	for _, p := range []*corev1.Pod{pod("sandbox", true), pod("plain", false)} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPod(ctx, t, admin, "sandbox", func(p *corev1.Pod) bool { return p.Spec.NodeName == "moat-smoke" })
	waitPod(ctx, t, admin, "plain", func(p *corev1.Pod) bool {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	p, _ := pods.Get(ctx, "plain", metav1.GetOptions{})
	if p.Spec.NodeName != "" {
		t.Fatalf("untolerating pod bound to %q", p.Spec.NodeName)
	}
	if p, _ := pods.Get(ctx, "sandbox", metav1.GetOptions{}); p.Spec.ServiceAccountName != "default" {
		t.Fatalf("service account %q", p.Spec.ServiceAccountName)
	}
	// The node sees the pods bound to it (the field selector the Node authorizer requires).
	bound, err := node.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=moat-smoke"})
	if err != nil || len(bound.Items) != 1 || bound.Items[0].Name != "sandbox" {
		t.Fatalf("node's pods: %v %v", bound, err)
	}
	// A bound pod is gone at once with grace period 0 (no kubelet here to confirm).
	if err := pods.Delete(ctx, "sandbox", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Get(ctx, "sandbox", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("deleted pod: %v", err)
	}

	// kubectl as the admin, with its cache under Dir.
	out, err := c.Kubectl(ctx, "get", "node", "moat-smoke", "-o", "jsonpath={.status.conditions[0].type}").CombinedOutput()
	if err != nil || string(out) != "Ready" {
		t.Fatalf("kubectl: %q %v", out, err)
	}

	if err := c.Down(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/var/run/kubernetes"); runBefore != nil && err == nil {
		t.Error("the control plane wrote /var/run/kubernetes")
	}
	if _, err := os.Stat("/usr/libexec/kubernetes"); flexBefore != nil && err == nil {
		t.Error("the controller manager made /usr/libexec/kubernetes")
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "kubectl-cache")); err != nil {
		t.Errorf("kubectl's cache is not under Dir: %v", err)
	}
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

func waitPod(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, name string, ok func(*corev1.Pod) bool) {
	t.Helper()
	var last *corev1.Pod
	for ctx.Err() == nil {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err == nil && ok(p) {
			return
		}
		last = p
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("pod %s: %+v", name, last)
}

// BenchmarkBringUp reports the median time from nothing to a ready control plane (warm
// build cache): go test -run '^$' -bench BringUp -benchtime 3x ./smoke/
func BenchmarkBringUp(b *testing.B) {
	var ds []time.Duration
	for range b.N {
		start := time.Now()
		c := up(b)
		ds = append(ds, time.Since(start))
		if err := c.Down(); err != nil {
			b.Fatal(err)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	b.ReportMetric(float64(ds[len(ds)/2].Milliseconds()), "median-ms")
	b.ReportMetric(float64(slices.Max(ds).Milliseconds()), "max-ms")
}
