package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/kube/moatnode"
	"github.com/moatdev/moat/test/cluster/harness"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var (
	sandboxesGVR      = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	sandboxClaimsGVR  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	sandboxTmplGVR    = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	sandboxWarmPlGVR  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	agentSandboxCRDs  = []string{"sandboxes.agents.x-k8s.io", "sandboxclaims.extensions.agents.x-k8s.io", "sandboxtemplates.extensions.agents.x-k8s.io", "sandboxwarmpools.extensions.agents.x-k8s.io"}
	agentSandboxReady = "Ready"
)

// TestAgentSandbox runs the Kubernetes agent-sandbox controller (sigs.k8s.io/agent-sandbox
// v1.0.1, built by scripts/kube-tools.sh) against one moat node: a Sandbox, and a
// SandboxClaim through a template and an empty warm pool, each become a Pod that
// kube-scheduler binds to the moat node and so a moat sandbox at its daemon, with the Pod
// template's limits and egress policy; deleting them leaves no sandbox behind.
func TestAgentSandbox(t *testing.T) {
	if os.Getenv("MOAT_TEST_CLUSTER") == "" {
		t.Skip("set MOAT_TEST_CLUSTER=1 (make test-cluster) to run")
	}
	testutil.RequiresRoot(t)
	binDir := harness.DefaultBinDir()
	controller := filepath.Join(binDir, "agent-sandbox-controller")
	crds := filepath.Join(binDir, "..", "agent-sandbox-crds")
	for _, f := range []string{controller, crds} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%v: run scripts/kube-tools.sh", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	tc := upCluster(t, ctx, harness.Options{BinDir: binDir})
	c, kc := tc.c, tc.kc
	dc := dynamic.NewForConfigOrDie(tc.rc)
	d := startDaemon(t, tc.moat, "moat-a")
	tc.startAgent(t, "moat-a", d)

	if out, err := c.Kubectl(ctx, "apply", "-f", crds).CombinedOutput(); err != nil {
		t.Fatalf("applying the agent-sandbox CRDs: %v\n%s", err, out)
	}
	wait := append([]string{"wait", "--for=condition=Established", "--timeout=60s"}, prefixed("crd/", agentSandboxCRDs)...)
	if out, err := c.Kubectl(ctx, wait...).CombinedOutput(); err != nil {
		t.Fatalf("agent-sandbox CRDs not established: %v\n%s", err, out)
	}
	startController(t, controller, c.AdminKubeconfig)
	waitFor(t, 90*time.Second, "node moat-a Ready", tc.nodeReady(ctx, "moat-a", corev1.ConditionTrue))

	// A Sandbox: one Pod, bound by kube-scheduler to the moat node, a sandbox at its daemon.
	tmpl := moatPodTemplate(t, "ready")
	sandbox := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
		"metadata": map[string]any{"name": "agent-direct", "namespace": "default"},
		"spec":     map[string]any{"service": false, "podTemplate": tmpl},
	}}
	t0 := time.Now()
	if _, err := dc.Resource(sandboxesGVR).Namespace("default").Create(ctx, sandbox, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each milestone is timed when a poll (every 250 ms) first sees it.
	var podMade, podBound, podRunning, firstOut, ready time.Duration
	isReady := sandboxReady(ctx, dc, sandboxesGVR, "agent-direct")
	waitFor(t, 90*time.Second, "Pod agent-direct Running on moat-a with output, Sandbox Ready", func() (bool, string) {
		p, err := kc.CoreV1().Pods("default").Get(ctx, "agent-direct", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if podMade == 0 {
			podMade = time.Since(t0)
		}
		if podBound == 0 && p.Spec.NodeName != "" {
			podBound = time.Since(t0)
		}
		state := fmt.Sprintf("phase %s node %q conditions %s", p.Status.Phase, p.Spec.NodeName, podConditions(p))
		if p.Status.Phase != corev1.PodRunning {
			return false, state
		}
		if p.Spec.NodeName != "moat-a" {
			t.Fatalf("Pod agent-direct Running on %q, not moat-a", p.Spec.NodeName)
		}
		if podRunning == 0 {
			podRunning = time.Since(t0)
		}
		if firstOut == 0 {
			b, err := kc.CoreV1().Pods("default").GetLogs("agent-direct", &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil || !strings.Contains(string(b), "ready") {
				return false, fmt.Sprintf("%s, logs %q %v", state, b, err)
			}
			firstOut = time.Since(t0)
		}
		if ready == 0 {
			ok, st := isReady()
			if !ok {
				return false, "Sandbox " + st
			}
			ready = time.Since(t0)
		}
		return true, ""
	})
	if nodeName := field(t, ctx, dc, sandboxesGVR, "agent-direct", "status", "nodeName"); nodeName != "moat-a" {
		t.Fatalf("Sandbox agent-direct status.nodeName %q", nodeName)
	}
	t.Logf("FIGURE agent-sandbox: Sandbox create -> Pod made %d ms -> bound %d ms -> Running on moat %d ms -> Sandbox Ready %d ms; -> first output via kubectl logs %d ms",
		podMade.Milliseconds(), podBound.Milliseconds(), podRunning.Milliseconds(), ready.Milliseconds(), firstOut.Milliseconds())
	assertDaemonSandboxes(t, ctx, d, map[string]bool{"agent-direct": true})
	out, err := execInput(ctx, tc.rc, "default", "agent-direct", []string{"sh", "-c", "echo exec-$((6*7))"}, false, nil)
	if err != nil || !strings.Contains(out, "exec-42") {
		t.Fatalf("kubectl exec in agent-direct: %q %v", out, err)
	}

	// A SandboxTemplate, an empty SandboxWarmPool and a SandboxClaim: a second Pod and sandbox.
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		obj map[string]any
	}{
		{sandboxTmplGVR, map[string]any{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
			"metadata": map[string]any{"name": "moat-host", "namespace": "default"},
			"spec": map[string]any{"networkPolicyManagement": "Unmanaged", "service": false,
				"podTemplate": moatPodTemplate(t, "claimed")}}},
		{sandboxWarmPlGVR, map[string]any{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
			"metadata": map[string]any{"name": "moat-host", "namespace": "default"},
			"spec":     map[string]any{"replicas": int64(0), "sandboxTemplateRef": map[string]any{"name": "moat-host"}}}},
		{sandboxClaimsGVR, map[string]any{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
			"metadata": map[string]any{"name": "agent-task-1", "namespace": "default"},
			"spec": map[string]any{"warmPoolRef": map[string]any{"name": "moat-host"},
				"lifecycle": map[string]any{"shutdownPolicy": "Delete"}}}},
	} {
		if _, err := dc.Resource(o.gvr).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: o.obj}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s: %v", o.gvr.Resource, err)
		}
	}
	waitFor(t, 90*time.Second, "SandboxClaim agent-task-1 Ready", sandboxReady(ctx, dc, sandboxClaimsGVR, "agent-task-1"))
	claimed := field(t, ctx, dc, sandboxClaimsGVR, "agent-task-1", "status", "sandbox", "name")
	p, err := kc.CoreV1().Pods("default").Get(ctx, claimed, metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "moat-a" || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("claim's Pod %q: %v", claimed, err)
	}
	assertDaemonSandboxes(t, ctx, d, map[string]bool{"agent-direct": true, claimed: true})
	t.Logf("SandboxClaim agent-task-1 Ready: Sandbox and Pod %s, a sandbox at moat-a", claimed)

	// Deleting the Sandbox and the claim deletes their Pods (by kube-controller-manager's
	// garbage collector, which learns of new CRDs on its 30 s discovery resync, hence the
	// wait) and the daemon's sandboxes.
	tDel := time.Now()
	if err := dc.Resource(sandboxesGVR).Namespace("default").Delete(ctx, "agent-direct", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dc.Resource(sandboxClaimsGVR).Namespace("default").Delete(ctx, "agent-task-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "Pods and Sandboxes gone", func() (bool, string) {
		pods, err := kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		sbs, err := dc.Resource(sandboxesGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0 && len(sbs.Items) == 0, fmt.Sprintf("%d Pods, %d Sandboxes left", len(pods.Items), len(sbs.Items))
	})
	waitFor(t, time.Minute, "no sandbox at moat-a", func() (bool, string) {
		sbs, err := d.client.List(ctx)
		if err != nil {
			return false, err.Error()
		}
		return len(sbs) == 0, fmt.Sprintf("%d left", len(sbs))
	})
	t.Logf("Sandbox and SandboxClaim deleted: Pods gone and no sandbox at moat-a after %d ms", time.Since(tDel).Milliseconds())
}

// moatPodTemplate is a Sandbox's podTemplate whose Pod lands on moat nodes (tolerates their
// taint, selects their label) as a `host` sandbox that prints word and sleeps.
func moatPodTemplate(t *testing.T, word string) map[string]any {
	grace := int64(1)
	no := false
	spec := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{moatnode.AnnotationAllow: "example.test"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Tolerations:                   []corev1.Toleration{{Key: moatnode.TaintKey, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
			NodeSelector:                  map[string]string{"moat.dev/node": "true"},
			Containers: []corev1.Container{{Name: "main", Image: "host",
				Command: []string{"sh", "-c", "echo " + word + "; sleep 3600"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
		},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// assertDaemonSandboxes checks, at the daemon, that it holds exactly one sandbox for each of
// pods, labelled with moat-a and with the Pod template's limits and egress policy.
func assertDaemonSandboxes(t *testing.T, ctx context.Context, d *daemon, pods map[string]bool) {
	t.Helper()
	sbs, err := d.client.ListFiltered(ctx, []string{"label=" + moatnode.LabelNode + "=moat-a"})
	if err != nil {
		t.Fatal(err)
	}
	all, err := d.client.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != len(pods) || len(all) != len(pods) {
		t.Fatalf("daemon holds %d sandboxes (%d labelled moat-a) for Pods %v", len(all), len(sbs), pods)
	}
	seen := map[string]bool{}
	for _, sb := range sbs {
		pod := sb.Metadata[moatnode.MetaPod]
		if !pods[pod] || seen[pod] {
			t.Fatalf("sandbox %s belongs to Pod %q, want one each for %v", sb.ID, pod, pods)
		}
		seen[pod] = true
		if sb.Limits.CPUs != 0.5 || sb.Limits.MemoryBytes != 256<<20 || len(sb.Policy.Phases["run"].Allow) != 1 {
			t.Fatalf("sandbox %s (Pod %s): limits %+v policy %+v", sb.ID, pod, sb.Limits, sb.Policy)
		}
	}
}

// sandboxReady reports whether the named object's status has condition Ready=True.
func sandboxReady(ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource, name string) func() (bool, string) {
	return func() (bool, string) {
		u, err := dc.Resource(gvr).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == agentSandboxReady {
				return m["status"] == "True", fmt.Sprintf("Ready=%v %v: %v", m["status"], m["reason"], m["message"])
			}
		}
		return false, fmt.Sprintf("no Ready condition in %v", conds)
	}
}

func field(t *testing.T, ctx context.Context, dc dynamic.Interface, gvr schema.GroupVersionResource, name string, path ...string) string {
	t.Helper()
	u, err := dc.Resource(gvr).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedString(u.Object, path...)
	return s
}

func podConditions(p *corev1.Pod) string {
	var s []string
	for _, c := range p.Status.Conditions {
		s = append(s, fmt.Sprintf("%s=%s(%s %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(s, " ")
}

func prefixed(p string, names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, p+n)
	}
	return out
}

// startController runs the agent-sandbox controller (with its extensions) as the cluster
// admin until t ends; its log is shown when t failed. It returns once the controller's four
// reconcilers (sandbox and the extensions' claim, template and warm pool) run.
func startController(t *testing.T, bin, kubeconfig string) {
	logs := &testutil.SyncBuffer{}
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--extensions", "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("agent-sandbox-controller output:\n%s", tail(logs.String(), 32<<10))
		}
	})
	waitFor(t, time.Minute, "agent-sandbox-controller's workers", func() (bool, string) {
		n := strings.Count(logs.String(), `"msg":"Starting workers"`)
		return n == 4, fmt.Sprintf("%d of 4 started", n)
	})
}
