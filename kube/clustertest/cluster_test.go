// Package clustertest runs moat nodes in a real local control plane (test/cluster/harness):
// two moat daemons, two moat-kubelet agents, Pods placed by kube-scheduler. Run by
// `make test-cluster` (MOAT_TEST_CLUSTER=1); skipped otherwise.
package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"crypto/rand"
	"encoding/hex"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/kube/moatnode"
	"github.com/moatdev/moat/sdk"
	"github.com/moatdev/moat/test/cluster/harness"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

type daemon struct {
	name   string
	socket string
	client *sdk.Client
	global []string
}

// startDaemon starts `moat serve` on a unix socket (and whatever serveArgs add), with its
// own data, run directory and id base; it is stopped (its sandboxes deleted first) when t
// ends.
func startDaemon(t *testing.T, moat, name string, serveArgs ...string) *daemon {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	runDir := "/run/moat-kube-" + hex.EncodeToString(rnd[:])
	sock := filepath.Join(runDir, "moat.sock")
	data := t.TempDir()
	global := []string{"--data", data, "--run-dir", runDir, "--socket", sock,
		"--id-base", strconv.FormatUint(uint64(testutil.IDBase(t)), 10)}
	logs := &testutil.SyncBuffer{}
	cmd := exec.Command(moat, append(append(slices.Clone(global), "serve", "--warm", "0", "--default-disk", "1G"), serveArgs...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d := &daemon{name: name, socket: sock, client: sdk.NewUnix(sock), global: global}
	t.Cleanup(func() {
		_, _ = exec.Command(moat, append(slices.Clone(global), "rm", "--all", "--force")...).CombinedOutput()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("moat serve %s output:\n%s", name, tail(logs.String(), 32<<10))
		}
		_ = os.RemoveAll(runDir)
		drives := filepath.Join(data, "drives")
		for range 100 {
			b, _ := os.ReadFile("/proc/self/mountinfo")
			if !strings.Contains(string(b), " "+drives+" ") {
				break
			}
			_ = syscall.Unmount(drives, 0)
			time.Sleep(50 * time.Millisecond)
		}
	})
	testutil.WaitFor(t, 30*time.Second, "moat serve "+name, func() bool {
		return d.client.Ping(context.Background()) == nil
	})
	return d
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// agent is one moat-kubelet process; start/stop may be called repeatedly.
type agent struct {
	t    *testing.T
	bin  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	logs *testutil.SyncBuffer
	name string
}

func (a *agent) start() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.logs = &testutil.SyncBuffer{}
	a.cmd = exec.Command(a.bin, a.args...)
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if err := a.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	a.done = make(chan struct{})
	done := a.done
	cmd := a.cmd
	go func() { _ = cmd.Wait(); close(done) }()
}

func (a *agent) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
	if a.t.Failed() {
		a.t.Logf("moat-kubelet %s output:\n%s", a.name, tail(a.logs.String(), 32<<10))
	}
	a.cmd = nil
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// testCluster is where every test here starts: a control plane on loopback, a client of
// it as admin, and the moat binaries (moat-kubelet built for the test).
type testCluster struct {
	c       *harness.Cluster
	rc      *rest.Config
	kc      *kubernetes.Clientset
	moat    string
	kubelet string
}

// upCluster builds moat-kubelet and brings the control plane up with o (Dir and Logf are
// the test's); it goes down when t ends.
func upCluster(t *testing.T, ctx context.Context, o harness.Options) *testCluster {
	t.Helper()
	tc := &testCluster{moat: filepath.Join(testutil.Binaries(t), "moat"), kubelet: filepath.Join(t.TempDir(), "moat-kubelet")}
	if out, err := exec.Command("go", "build", "-o", tc.kubelet, "../cmd/moat-kubelet").CombinedOutput(); err != nil {
		t.Fatalf("building moat-kubelet: %v\n%s", err, out)
	}
	o.Dir, o.Logf = t.TempDir(), t.Logf
	c, err := harness.Up(ctx, o)
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	t.Cleanup(func() { c.Down() })
	if tc.rc, err = clientcmd.BuildConfigFromFlags("", c.AdminKubeconfig); err != nil {
		t.Fatal(err)
	}
	tc.c, tc.kc = c, kubernetes.NewForConfigOrDie(tc.rc)
	return tc
}

// startAgent starts moat-kubelet as node name of daemon d, with extra flags; it is stopped
// when t ends.
func (tc *testCluster) startAgent(t *testing.T, name string, d *daemon, extra ...string) *agent {
	t.Helper()
	n, err := tc.c.Node(name)
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{t: t, bin: tc.kubelet, name: name, args: append([]string{
		"--kubeconfig", n.Kubeconfig, "--node-name", name, "--socket", d.socket,
		"--listen", "127.0.0.1:" + strconv.Itoa(freePort(t)),
		"--tls-cert", n.CertFile, "--tls-key", n.KeyFile, "--client-ca", tc.c.CAFile,
		"--doctor-period", "5s", "--max-sandboxes", "10"}, extra...)}
	a.start()
	t.Cleanup(a.stop)
	return a
}

// nodeReady is a waitFor condition: node name's Ready condition is want.
func (tc *testCluster) nodeReady(ctx context.Context, name string, want corev1.ConditionStatus) func() (bool, string) {
	return func() (bool, string) {
		n, err := tc.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cd := range n.Status.Conditions {
			if cd.Type == corev1.NodeReady {
				return cd.Status == want, string(cd.Status) + " " + cd.Message
			}
		}
		return false, "no Ready condition"
	}
}

func TestMoatNodes(t *testing.T) {
	if os.Getenv("MOAT_TEST_CLUSTER") == "" {
		t.Skip("set MOAT_TEST_CLUSTER=1 (make test-cluster) to run")
	}
	testutil.RequiresRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	tc := upCluster(t, ctx, harness.Options{
		ExtraArgs: map[string][]string{"kube-controller-manager": {"--node-monitor-grace-period=10s"}}})
	rc, kc, nodeReady := tc.rc, tc.kc, func(name string, want corev1.ConditionStatus) func() (bool, string) {
		return tc.nodeReady(ctx, name, want)
	}
	daemons := map[string]*daemon{"moat-a": startDaemon(t, tc.moat, "moat-a"), "moat-b": startDaemon(t, tc.moat, "moat-b")}
	agents := map[string]*agent{}
	for _, name := range []string{"moat-a", "moat-b"} {
		agents[name] = tc.startAgent(t, name, daemons[name])
	}
	for name := range agents {
		waitFor(t, 90*time.Second, "node "+name+" Ready", nodeReady(name, corev1.ConditionTrue))
	}
	n, _ := kc.CoreV1().Nodes().Get(ctx, "moat-a", metav1.GetOptions{})
	if n.Labels["moat.dev/runtime-runc"] != "true" || len(n.Spec.Taints) == 0 || n.Spec.Taints[0].Key != moatnode.TaintKey {
		t.Fatalf("node moat-a: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
	if _, ok := n.Labels["kubernetes.io/role"]; ok {
		t.Fatalf("node carries kubernetes.io/role")
	}
	t.Logf("node moat-a: capacity %v, labels %v", n.Status.Capacity, n.Labels)

	// Direct single-host baseline, same run: create + first output of a command.
	var direct []time.Duration
	for i := range 3 {
		t0 := time.Now()
		sb, err := daemons["moat-b"].client.Create(ctx, v1.CreateSandboxRequest{Template: "host"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := daemons["moat-b"].client.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "echo", Args: []string{"direct", strconv.Itoa(i)}, Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		direct = append(direct, time.Since(t0))
		if err := daemons["moat-b"].client.Delete(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}

	// Six Pods, placed by the scheduler.
	grace := int64(1)
	created := map[string]time.Time{}
	firstOut := map[string]time.Duration{}
	for i := range 6 {
		name := fmt.Sprintf("sb-%d", i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
				Annotations: map[string]string{moatnode.AnnotationAllow: "example.test"}},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				Tolerations:                   []corev1.Toleration{{Key: moatnode.TaintKey, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
				NodeSelector:                  map[string]string{"moat.dev/node": "true"},
				Containers: []corev1.Container{{Name: "main", Image: "host",
					Command: []string{"sh", "-c", fmt.Sprintf("echo hello-%d; exec sleep 3600", i)},
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
			},
		}
		created[name] = time.Now()
		if _, err := kc.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podsOn := map[string][]string{}
	waitFor(t, 3*time.Minute, "six Pods Running with output", func() (bool, string) {
		pods, err := kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for _, p := range pods.Items {
			states = append(states, p.Name+"="+string(p.Status.Phase)+"@"+p.Spec.NodeName)
			if _, ok := firstOut[p.Name]; ok || p.Status.Phase != corev1.PodRunning {
				continue
			}
			b, err := kc.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err == nil && strings.Contains(string(b), "hello-"+strings.TrimPrefix(p.Name, "sb-")) {
				firstOut[p.Name] = time.Since(created[p.Name])
			}
		}
		return len(firstOut) == 6, strings.Join(states, " ")
	})
	pods, _ := kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	containerIDs := map[string]string{}
	for _, p := range pods.Items {
		podsOn[p.Spec.NodeName] = append(podsOn[p.Spec.NodeName], p.Name)
		containerIDs[p.Name] = p.Status.ContainerStatuses[0].ContainerID
	}
	t.Logf("placement: %v", podsOn)
	if len(podsOn["moat-a"]) == 0 || len(podsOn["moat-b"]) == 0 {
		t.Fatalf("the scheduler did not spread the Pods over both nodes: %v", podsOn)
	}
	// Each Pod is a sandbox at its node's daemon, labelled with the Pod.
	for node, names := range podsOn {
		sbs, err := daemons[node].client.ListFiltered(ctx, []string{"label=" + moatnode.LabelNode + "=" + node})
		if err != nil {
			t.Fatal(err)
		}
		if len(sbs) != len(names) {
			t.Fatalf("daemon %s holds %d sandboxes for %d Pods", node, len(sbs), len(names))
		}
		for _, sb := range sbs {
			if sb.Limits.CPUs != 0.5 || sb.Limits.MemoryBytes != 256<<20 || len(sb.Policy.Phases["run"].Allow) != 1 {
				t.Errorf("sandbox %s: limits %+v policy %+v", sb.ID, sb.Limits, sb.Policy)
			}
		}
	}
	t.Logf("FIGURE create-to-first-output: pod p50 %s (all %v); direct single-host p50 %s (all %v); ratio %.1f",
		p50(values(firstOut)), values(firstOut), p50(direct), direct, float64(p50(values(firstOut)))/float64(p50(direct)))

	// A command in each Pod, and kubectl-style exec with a TTY into one.
	for _, p := range pods.Items {
		out, err := execIn(ctx, rc, p.Name, []string{"sh", "-c", "echo ran-in-" + p.Name}, false)
		if err != nil || !strings.Contains(out, "ran-in-"+p.Name) {
			t.Fatalf("exec in %s: %q %v", p.Name, out, err)
		}
	}
	out, err := execIn(ctx, rc, "sb-0", []string{"sh", "-c", "test -t 0 && echo on-a-tty"}, true)
	if err != nil || !strings.Contains(out, "on-a-tty") {
		t.Fatalf("exec -t in sb-0: %q %v", out, err)
	}
	// kubectl exec -it: a shell on a terminal reading what is typed.
	out, err = execInput(ctx, rc, "default", "sb-1", []string{"sh"}, true, strings.NewReader("echo typed-$((6*7))\nexit 0\n"))
	if err != nil || !strings.Contains(out, "typed-42") {
		t.Fatalf("exec -it in sb-1: %q %v", out, err)
	}
	if _, err := execIn(ctx, rc, "sb-0", []string{"sh", "-c", "exit 3"}, false); err == nil || !strings.Contains(err.Error(), "exit code 3") {
		t.Fatalf("exec exit code: %v", err)
	}

	// Stop moat-a's agent: its Pods are reported (not ready) by the control plane. One of
	// its sandboxes vanishes meanwhile.
	aPods := podsOn["moat-a"]
	sort.Strings(aPods)
	agents["moat-a"].stop()
	sbs, _ := daemons["moat-a"].client.ListFiltered(ctx, []string{"label=" + moatnode.LabelNode + "=moat-a"})
	var vanished string
	for _, sb := range sbs {
		if sb.Metadata[moatnode.MetaPod] == aPods[0] {
			vanished = aPods[0]
			if err := daemons["moat-a"].client.Delete(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 2*time.Minute, "node moat-a NotReady/Unknown", func() (bool, string) {
		ok, s := nodeReady("moat-a", corev1.ConditionUnknown)()
		return ok, s
	})
	waitFor(t, time.Minute, "moat-a's Pods reported not ready", func() (bool, string) {
		var st []string
		for _, name := range aPods {
			p, err := kc.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, cd := range p.Status.Conditions {
				if cd.Type == corev1.PodReady && cd.Status == corev1.ConditionTrue {
					st = append(st, name)
				}
			}
		}
		return len(st) == 0, "still ready: " + strings.Join(st, ",")
	})
	t.Logf("agent moat-a stopped: node Unknown, its Pods %v not ready", aPods)

	// Restart it: it adopts its Pods' sandboxes and reports the vanished one Failed.
	agents["moat-a"].start()
	waitFor(t, 90*time.Second, "node moat-a Ready again", nodeReady("moat-a", corev1.ConditionTrue))
	waitFor(t, 90*time.Second, "moat-a's Pods adopted", func() (bool, string) {
		var st []string
		ok := true
		for _, name := range aPods {
			p, err := kc.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cid := ""
			if len(p.Status.ContainerStatuses) > 0 {
				cid = p.Status.ContainerStatuses[0].ContainerID
			}
			st = append(st, fmt.Sprintf("%s=%s/%s/%s", name, p.Status.Phase, p.Status.Reason, cid))
			if name == vanished {
				ok = ok && p.Status.Phase == corev1.PodFailed && p.Status.Reason == moatnode.ReasonSandboxGone
				continue
			}
			ready := false
			for _, cd := range p.Status.Conditions {
				ready = ready || cd.Type == corev1.PodReady && cd.Status == corev1.ConditionTrue
			}
			ok = ok && ready && p.Status.Phase == corev1.PodRunning && cid == containerIDs[name]
		}
		return ok, strings.Join(st, " ")
	})
	if !strings.Contains(agents["moat-a"].logs.String(), "adopted sandbox") {
		t.Fatalf("the restarted agent logged no adoption")
	}
	if len(aPods) > 1 {
		out, err := execIn(ctx, rc, aPods[1], []string{"echo", "after-adoption"}, false)
		if err != nil || !strings.Contains(out, "after-adoption") {
			t.Fatalf("exec after adoption: %q %v", out, err)
		}
	}
	t.Logf("agent moat-a restarted: adopted %v, %s reported %s", aPods, vanished, moatnode.ReasonSandboxGone)

	// Delete everything: no sandbox is left at either daemon.
	if err := kc.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "all Pods gone", func() (bool, string) {
		pods, err := kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d left", len(pods.Items))
	})
	for name, d := range daemons {
		waitFor(t, time.Minute, "no sandbox at "+name, func() (bool, string) {
			sbs, err := d.client.List(ctx)
			if err != nil {
				return false, err.Error()
			}
			return len(sbs) == 0, fmt.Sprintf("%d left", len(sbs))
		})
	}
}

func execIn(ctx context.Context, rc *rest.Config, pod string, cmd []string, tty bool) (string, error) {
	return execInput(ctx, rc, "default", pod, cmd, tty, nil)
}

// execInput is kubectl exec [-t] [-i when stdin is set] POD -- cmd through client-go.
func execInput(ctx context.Context, rc *rest.Config, ns, pod string, cmd []string, tty bool, stdin io.Reader) (string, error) {
	kc := kubernetes.NewForConfigOrDie(rc)
	req := kc.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: cmd, Stdin: stdin != nil, Stdout: true, Stderr: !tty, TTY: tty}, scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(rc, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ws, err := remotecommand.NewWebSocketExecutor(rc, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool { return true })
	if err != nil {
		return "", err
	}
	var out, errb bytes.Buffer
	opts := remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Tty: tty}
	if !tty {
		opts.Stderr = &errb
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = ex.StreamWithContext(cctx, opts)
	return out.String() + errb.String(), err
}

func values(m map[string]time.Duration) []time.Duration {
	var out []time.Duration
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
