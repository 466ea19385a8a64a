package clustertest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/kube/moatnode"
	"github.com/moatdev/moat/sdk"
	"github.com/moatdev/moat/test/cluster/harness"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const frontNS = "moat"

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func randomKey() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "mk_" + hex.EncodeToString(b[:])
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// sdkStep runs one step of test/e2b/cluster-front.mjs (the real e2b SDK) against url with
// key and decodes its JSON.
func sdkStep(t *testing.T, ctx context.Context, url, key string, out any, args ...string) {
	t.Helper()
	dir, err := filepath.Abs("../../test/e2b")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "node", append([]string{"cluster-front.mjs"}, args...)...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+key, "NO_COLOR=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("node cluster-front.mjs %v: %v\n%s%s", args, err, b, stderr.String())
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("node cluster-front.mjs %v: %v: %s", args, err, b)
		}
	}
}

type created struct {
	ID   string `json:"id"`
	Out  string `json:"out"`
	Exit int    `json:"exit"`
	MS   int64  `json:"ms"`
}

// frontKubeconfig gives the front the identity deploy/kubernetes/front.yaml gives it: a
// service account with Pods in its namespace and read access to Nodes, nothing more.
func frontKubeconfig(t *testing.T, ctx context.Context, kc *kubernetes.Clientset, server, caFile string) string {
	if _, err := kc.CoreV1().ServiceAccounts(frontNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "moat-front"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "moat-front", Namespace: frontNS}}
	if _, err := kc.RbacV1().Roles(frontNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "moat-front"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "patch", "delete"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().RoleBindings(frontNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "moat-front"}, Subjects: sa,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "moat-front"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "moat-front-nodes"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "moat-front-nodes"}, Subjects: sa,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "moat-front-nodes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tok, err := kc.CoreV1().ServiceAccounts(frontNS).CreateToken(ctx, "moat-front", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "front.kubeconfig")
	y := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: moat-front
  user:
    token: %s
contexts:
- name: front
  context: {cluster: test, user: moat-front, namespace: %s}
current-context: front
`, server, caFile, tok.Status.Token, frontNS)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClusterFront is issue 19's scenario through moat serve --cluster: two moat nodes,
// six sandboxes made with the E2B SDK through the front and spread by kube-scheduler, a
// command in each, kubectl exec into one, one node agent stopped (its Pods reported) and
// restarted (adopted), everything deleted through the SDK, no sandbox left. Also: owners
// are kept apart, the front's E2B timeout deletes a sandbox, and the figure of
// create-to-first-output against a single host, same run.
func TestClusterFront(t *testing.T) {
	if os.Getenv("MOAT_TEST_CLUSTER") == "" {
		t.Skip("set MOAT_TEST_CLUSTER=1 (make test-cluster) to run")
	}
	testutil.RequiresRoot(t)
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed (make deps)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	tc := upCluster(t, ctx, harness.Options{
		ExtraArgs: map[string][]string{"kube-controller-manager": {"--node-monitor-grace-period=10s"}}})
	c, rc, kc, moatBin := tc.c, tc.rc, tc.kc, tc.moat
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: frontNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the moat namespace's default service account", func() (bool, string) {
		_, err := kc.CoreV1().ServiceAccounts(frontNS).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// Two moat nodes: each a daemon with a TCP listener and an admin key for the front, and
	// an agent publishing that listener on its Node.
	names := []string{"moat-a", "moat-b"}
	daemons, urls, nodeKey, nodeKeys := map[string]*daemon{}, map[string]string{}, map[string]string{}, ""
	for _, name := range names {
		urls[name] = "http://127.0.0.1:" + strconv.Itoa(freePort(t))
		daemons[name] = startDaemon(t, moatBin, name, "--listen", strings.TrimPrefix(urls[name], "http://"), "--e2b-template", "base=host")
		k, err := daemons[name].client.CreateAPIKeyWith(ctx, v1.APIKeyRequest{Owner: "moat-front", Admin: true})
		if err != nil {
			t.Fatal(err)
		}
		nodeKey[name] = k.Key
		nodeKeys += name + " " + k.Key + "\n"
	}
	agents := map[string]*agent{}
	for _, name := range names {
		agents[name] = tc.startAgent(t, name, daemons[name], "--daemon-url", urls[name])
	}
	nodeReady := func(name string, want corev1.ConditionStatus) func() (bool, string) {
		return tc.nodeReady(ctx, name, want)
	}
	for _, name := range names {
		waitFor(t, 90*time.Second, "node "+name+" Ready", nodeReady(name, corev1.ConditionTrue))
		n, _ := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if n.Annotations[moatnode.AnnotationDaemonURL] != urls[name] {
			t.Fatalf("node %s: annotation %s = %q", name, moatnode.AnnotationDaemonURL, n.Annotations[moatnode.AnnotationDaemonURL])
		}
	}

	// The front, with its own identity and two owners' keys.
	alice, bob := randomKey(), randomKey()
	dir := t.TempDir()
	keysFile, nodeKeysFile := filepath.Join(dir, "keys"), filepath.Join(dir, "node-keys")
	if err := os.WriteFile(keysFile, []byte("alice "+sha(alice)+"\nbob "+sha(bob)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nodeKeysFile, []byte(nodeKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	frontPort := strconv.Itoa(freePort(t))
	frontURL := "http://127.0.0.1:" + frontPort
	previewDomain := "preview.localhost:" + frontPort
	frontLogs := &testutil.SyncBuffer{}
	front := exec.Command(moatBin, "serve", "--cluster", frontKubeconfig(t, ctx, kc, rc.Host, c.CAFile),
		"--cluster-keys", keysFile, "--cluster-node-keys", nodeKeysFile, "--e2b-template", "base=host", "--preview-domain", previewDomain, "--listen", strings.TrimPrefix(frontURL, "http://"))
	front.Stdout, front.Stderr = frontLogs, frontLogs
	if err := front.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = front.Process.Signal(syscall.SIGTERM)
		_ = front.Wait()
		if t.Failed() {
			t.Logf("moat serve --cluster output:\n%s", tail(frontLogs.String(), 32<<10))
		}
	})
	waitFor(t, 30*time.Second, "the front's /health", func() (bool, string) {
		resp, err := http.Get(frontURL + "/health")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})

	// Baseline, same run: the same SDK step against one node's daemon directly.
	direct, err := daemons["moat-b"].client.CreateAPIKeyWith(ctx, v1.APIKeyRequest{Owner: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	var directMS []time.Duration
	for range 3 {
		var one []created
		sdkStep(t, ctx, urls["moat-b"], direct.Key, &one, "create", "1")
		directMS = append(directMS, time.Duration(one[0].MS)*time.Millisecond)
		sdkStep(t, ctx, urls["moat-b"], direct.Key, nil, "kill", one[0].ID)
	}

	// Six sandboxes through the front, at once.
	var six []created
	sdkStep(t, ctx, frontURL, alice, &six, "create", "6")
	var clusterMS []time.Duration
	ids := map[string]bool{}
	for i, s := range six {
		if !strings.Contains(s.Out, fmt.Sprintf("hello-%d", i)) || s.Exit != 0 {
			t.Fatalf("sandbox %d: %+v", i, s)
		}
		ids[s.ID] = true
		clusterMS = append(clusterMS, time.Duration(s.MS)*time.Millisecond)
	}
	if len(ids) != 6 {
		t.Fatalf("six creates made %d sandboxes: %+v", len(ids), six)
	}
	// Each is a Pod placed by kube-scheduler and a sandbox at that node's daemon.
	pods, err := kc.CoreV1().Pods(frontNS).List(ctx, metav1.ListOptions{LabelSelector: "moat.dev/front=true"})
	if err != nil {
		t.Fatal(err)
	}
	podOf, onNode := map[string]corev1.Pod{}, map[string][]string{}
	for _, p := range pods.Items {
		id := p.Labels["moat.dev/sandbox-id"]
		if !ids[id] || p.Status.ContainerStatuses[0].ContainerID != "moat://"+id || p.Annotations["moat.dev/owner"] != "alice" {
			t.Fatalf("pod %s: labels %v annotations %v status %+v", p.Name, p.Labels, p.Annotations, p.Status.ContainerStatuses)
		}
		podOf[id] = p
		onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], id)
	}
	t.Logf("placement by kube-scheduler: %v", onNode)
	if len(podOf) != 6 || len(onNode["moat-a"]) == 0 || len(onNode["moat-b"]) == 0 {
		t.Fatalf("six sandboxes not spread over both nodes: %v", onNode)
	}
	for node, want := range onNode {
		sbs, err := daemons[node].client.ListFiltered(ctx, []string{"label=" + moatnode.LabelNode + "=" + node})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, sb := range sbs {
			got = append(got, sb.ID)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("daemon %s holds %v, the front placed %v there", node, got, want)
		}
	}
	t.Logf("FIGURE cluster front create-to-first-output (E2B SDK, 6 at once): p50 %s (all %v); single-host direct (same SDK step, sequential) p50 %s (all %v); ratio %.1f",
		p50(clusterMS), clusterMS, p50(directMS), directMS, float64(p50(clusterMS))/float64(p50(directMS)))

	// A command in each through the SDK (Sandbox.connect, envd through the front).
	for id, p := range podOf {
		var r struct {
			Out  string `json:"out"`
			Exit int    `json:"exit"`
		}
		sdkStep(t, ctx, frontURL, alice, &r, "run", id, "echo ran-on-$(cat /etc/hostname)")
		if r.Exit != 0 || !strings.Contains(r.Out, "ran-on-") {
			t.Fatalf("run in %s (%s on %s): %+v", id, p.Name, p.Spec.NodeName, r)
		}
	}
	// The cost of the front's hop: a command's round trip through the front and straight
	// to the node's daemon (its admin key), the same sandbox, same run.
	{
		var viaFront, viaNode []float64
		id := onNode["moat-b"][0]
		sdkStep(t, ctx, frontURL, alice, &viaFront, "bench", id, "30")
		sdkStep(t, ctx, urls["moat-b"], nodeKey["moat-b"], &viaNode, "bench", id, "30")
		f, n := median(viaFront[5:]), median(viaNode[5:])
		t.Logf("FIGURE command round trip (commands.run true, 25 after 5 warm-up): via the front p50 %.2f ms, to the node directly p50 %.2f ms; +%.2f ms (ratio %.2f)", f, n, f-n, f/n)
	}

	// kubectl exec into one of them (the kubelet API of its node).
	var someID string
	for id := range podOf {
		someID = id
		break
	}
	out, err := execInput(ctx, rc, frontNS, podOf[someID].Name, []string{"sh", "-c", "echo exec-$((6*7))"}, false, nil)
	if err != nil || !strings.Contains(out, "exec-42") {
		t.Fatalf("kubectl exec into %s: %q %v", podOf[someID].Name, out, err)
	}

	// Owners are kept apart: bob sees none of alice's sandboxes, cannot read or kill
	// them; no key or a wrong one is refused. Checked where it lands: the Pod and the
	// sandbox at its node are still there.
	var bobs []map[string]any
	sdkStep(t, ctx, frontURL, bob, &bobs, "list")
	if len(bobs) != 0 {
		t.Fatalf("bob lists %v", bobs)
	}
	var alices []map[string]any
	sdkStep(t, ctx, frontURL, alice, &alices, "list")
	if len(alices) != 6 {
		t.Fatalf("alice lists %d sandboxes: %v", len(alices), alices)
	}
	call := func(method, path, key string, hdr map[string]string) int {
		req, _ := http.NewRequestWithContext(ctx, method, frontURL+path, strings.NewReader("{}"))
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, key string
		want              int
	}{
		{"GET", "/sandboxes/" + someID, bob, 404},
		{"DELETE", "/sandboxes/" + someID, bob, 404},
		{"POST", "/sandboxes/" + someID + "/timeout", bob, 404},
		{"GET", "/v1/sandboxes/" + someID, bob, 404},
		{"POST", "/v1/sandboxes/" + someID + "/envd/process.Process/Start", bob, 404},
		{"DELETE", "/sandboxes/" + someID, "", 401},
		{"DELETE", "/sandboxes/" + someID, "mk_wrong", 401},
		{"POST", "/sandboxes", "", 401},
		{"POST", "/v1/sandboxes/" + someID + "/stop", alice, 501},
		{"POST", "/sandboxes/" + someID + "/pause", alice, 501},
		{"GET", "/sandboxes/" + someID, alice, 200},
	} {
		if got := call(c.method, c.path, c.key, nil); got != c.want {
			t.Errorf("%s %s with key %.6s: %d, want %d", c.method, c.path, c.key, got, c.want)
		}
	}
	// The native API through the front (moat's Go SDK, as `moat --url FRONT` uses it):
	// the list is alice's six; exec and the sandbox's record come from its node; a create
	// the front cannot carry is refused by name.
	nat := sdk.NewHTTP(frontURL, alice)
	list, err := nat.List(ctx)
	if err != nil || len(list) != 6 {
		t.Fatalf("native list through the front: %d %v", len(list), err)
	}
	var nout strings.Builder
	if code, err := nat.Exec(ctx, someID, sdk.ExecRequest{Cmd: "sh", Args: []string{"-c", "echo native-$((6*7))"}, Stdout: &nout}); err != nil || code != 0 || !strings.Contains(nout.String(), "native-42") {
		t.Fatalf("native exec through the front: %d %v %q", code, err, nout.String())
	}
	if sb, err := nat.Get(ctx, someID); err != nil || sb.ID != someID || sb.State != "running" {
		t.Fatalf("native get through the front: %+v %v", sb, err)
	}
	if _, err := sdk.NewHTTP(frontURL, bob).Get(ctx, someID); err == nil {
		t.Fatalf("bob's native get of alice's sandbox succeeded")
	}
	if _, err := nat.Create(ctx, v1.CreateSandboxRequest{Template: "host", Repo: "/src"}); err == nil || !strings.Contains(err.Error(), "repo") {
		t.Fatalf("a native create with a repo: %v", err)
	}

	// Previews through the front: E2B's header-routed one with the traffic token (and not
	// without), and the path-based one with the owner's key only (a private port).
	var pv struct {
		Token, Host   string
		With, Without struct {
			Status int
			Body   string
		}
	}
	sdkStep(t, ctx, frontURL, alice, &pv, "preview", someID)
	if pv.Token == "" || pv.With.Status != 200 || pv.With.Body != "preview-of-"+someID || pv.Without.Status == 200 || strings.Contains(pv.Without.Body, "preview-of") {
		t.Fatalf("E2B preview through the front: %+v", pv)
	}
	for key, want := range map[string]int{alice: 200, bob: 404, "": 404} {
		if got := call("GET", "/preview/"+someID+"/8080/", key, nil); got != want {
			t.Errorf("path preview with key %.6s: %d, want %d", key, got, want)
		}
	}
	// Host-based, as the SDK's getHost(8080) names it: the front's --preview-domain.
	if want := "8080-" + someID + "." + previewDomain; pv.Host != want {
		t.Errorf("getHost(8080) = %q, want %q", pv.Host, want)
	}
	for _, c := range []struct {
		key, token string
		want       int
	}{{"", pv.Token, 200}, {alice, "", 200}, {bob, "", 404}, {"", "", 404}, {"", "mpt_wrong", 404}} {
		req, _ := http.NewRequestWithContext(ctx, "GET", frontURL+"/", nil)
		req.Host = pv.Host
		if c.key != "" {
			req.Header.Set("X-API-KEY", c.key)
		}
		if c.token != "" {
			req.Header.Set("E2b-Traffic-Access-Token", c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || c.want == 200 && string(b) != "preview-of-"+someID {
			t.Errorf("host preview with key %.6s token %.8s: %d %q, want %d", c.key, c.token, resp.StatusCode, b, c.want)
		}
	}

	// envd traffic without the sandbox's access token is refused by its node.
	if got := call("POST", "/files?path=/tmp/x", "", map[string]string{"E2b-Sandbox-Id": someID}); got != 401 {
		t.Errorf("envd without an access token: %d, want 401", got)
	}
	if p, err := kc.CoreV1().Pods(frontNS).Get(ctx, podOf[someID].Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("alice's Pod after bob's kill: %v", err)
	} else if p.DeletionTimestamp != nil {
		t.Fatalf("alice's Pod is being deleted after bob's kill")
	}
	if _, err := daemons[podOf[someID].Spec.NodeName].client.Get(ctx, someID); err != nil {
		t.Fatalf("alice's sandbox after bob's kill: %v", err)
	}

	// Stop moat-a's agent: its Pods are reported not ready; the sandboxes keep serving
	// through the front (the front routes to the node's daemon, not to the agent).
	aIDs := onNode["moat-a"]
	agents["moat-a"].stop()
	waitFor(t, 2*time.Minute, "node moat-a Unknown", nodeReady("moat-a", corev1.ConditionUnknown))
	waitFor(t, time.Minute, "moat-a's Pods reported not ready", func() (bool, string) {
		var ready []string
		for _, id := range aIDs {
			p, err := kc.CoreV1().Pods(frontNS).Get(ctx, podOf[id].Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, cd := range p.Status.Conditions {
				if cd.Type == corev1.PodReady && cd.Status == corev1.ConditionTrue {
					ready = append(ready, p.Name)
				}
			}
		}
		return len(ready) == 0, "still ready: " + strings.Join(ready, ",")
	})
	var r struct {
		Out string `json:"out"`
	}
	sdkStep(t, ctx, frontURL, alice, &r, "run", aIDs[0], "echo still-serving")
	if !strings.Contains(r.Out, "still-serving") {
		t.Fatalf("sandbox %s with its agent stopped: %+v", aIDs[0], r)
	}
	t.Logf("agent moat-a stopped: node Unknown, Pods of %v not ready, sandboxes still serving", aIDs)
	agents["moat-a"].start()
	waitFor(t, 90*time.Second, "node moat-a Ready again", nodeReady("moat-a", corev1.ConditionTrue))
	waitFor(t, 90*time.Second, "moat-a's Pods adopted", func() (bool, string) {
		var st []string
		ok := true
		for _, id := range aIDs {
			p, err := kc.CoreV1().Pods(frontNS).Get(ctx, podOf[id].Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ready := false
			for _, cd := range p.Status.Conditions {
				ready = ready || cd.Type == corev1.PodReady && cd.Status == corev1.ConditionTrue
			}
			cid := ""
			if len(p.Status.ContainerStatuses) > 0 {
				cid = p.Status.ContainerStatuses[0].ContainerID
			}
			st = append(st, fmt.Sprintf("%s=%s/%v/%s", p.Name, p.Status.Phase, ready, cid))
			ok = ok && ready && p.Status.Phase == corev1.PodRunning && cid == "moat://"+id
		}
		return ok, strings.Join(st, " ")
	})
	if !strings.Contains(agents["moat-a"].logs.String(), "adopted sandbox") {
		t.Fatalf("the restarted agent logged no adoption")
	}

	// The front's E2B timeout: a sandbox made with a 3 s timeout is deleted with its Pod.
	var short []created
	sdkStep(t, ctx, frontURL, bob, &short, "create", "1", "3")
	waitFor(t, time.Minute, "the timed-out sandbox gone", func() (bool, string) {
		for _, d := range daemons {
			if _, err := d.client.Get(ctx, short[0].ID); err == nil {
				return false, "still at " + d.name
			}
		}
		ps, err := kc.CoreV1().Pods(frontNS).List(ctx, metav1.ListOptions{LabelSelector: "moat.dev/sandbox-id=" + short[0].ID})
		if err != nil {
			return false, err.Error()
		}
		return len(ps.Items) == 0, fmt.Sprintf("%d Pods", len(ps.Items))
	})

	// Delete everything through the SDK: no Pod and no sandbox is left.
	var all []string
	for id := range podOf {
		all = append(all, id)
	}
	var killed []bool
	sdkStep(t, ctx, frontURL, alice, &killed, append([]string{"kill"}, all...)...)
	if slices.Contains(killed, false) || len(killed) != 6 {
		t.Fatalf("kill: %v", killed)
	}
	waitFor(t, 2*time.Minute, "no Pod and no sandbox left", func() (bool, string) {
		ps, err := kc.CoreV1().Pods(frontNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		left := len(ps.Items)
		for _, d := range daemons {
			sbs, err := d.client.List(ctx)
			if err != nil {
				return false, err.Error()
			}
			left += len(sbs)
		}
		return left == 0, fmt.Sprintf("%d Pods and sandboxes left", left)
	})
}
