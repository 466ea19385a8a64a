package clustertest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/kube/moatnode"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type attachIO struct {
	out *bytes.Buffer
	tty bool
}

type nopWC struct{ io.Writer }

func (nopWC) Close() error { return nil }

func (a attachIO) Stdin() io.Reader            { return nil }
func (a attachIO) Stdout() io.WriteCloser      { return nopWC{a.out} }
func (a attachIO) Stderr() io.WriteCloser      { return nopWC{a.out} }
func (a attachIO) TTY() bool                   { return a.tty }
func (a attachIO) Resize() <-chan api.TermSize { return nil }

// TestProviderWithDaemon drives the provider against a real moat daemon without a
// control plane: a Pod becomes a sandbox running its command, its logs and an exec come
// from the sandbox, a second provider (a restarted agent) adopts it, a Pod whose sandbox
// vanished is Failed, and deleting the Pod deletes the sandbox (asserted at the daemon).
func TestProviderWithDaemon(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := startDaemon(t, filepath.Join(testutil.Binaries(t), "moat"), "solo")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := moatnode.NewProvider(d.client, "solo", "127.0.0.1", log)
	p.MainStartWait = time.Second // the main command must outlive it (checked below)
	p.NotifyPods(ctx, func(*corev1.Pod) {})
	grace := int64(0)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1", UID: "uid-p1"},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "main", Image: "host",
			Command: []string{"sh", "-c", "echo line1; echo line2; exec sleep 600"}}}}}
	created := time.Now()
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	status := func(p *moatnode.Provider, name string) *corev1.PodStatus {
		st, err := p.GetPodStatus(ctx, "ns", name)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitFor(t, 30*time.Second, "Pod Running", func() (bool, string) {
		st := status(p, "p1")
		return st.Phase == corev1.PodRunning, string(st.Phase) + " " + st.Message
	})
	cid := status(p, "p1").ContainerStatuses[0].ContainerID
	sbs, err := d.client.ListFiltered(ctx, []string{"label=" + moatnode.LabelPodUID + "=uid-p1"})
	if err != nil || len(sbs) != 1 || "moat://"+sbs[0].ID != cid {
		t.Fatalf("daemon sandboxes %v (%v), container %s", sbs, err, cid)
	}
	var logs string
	waitFor(t, 10*time.Second, "logs", func() (bool, string) {
		rc, err := p.GetContainerLogs(ctx, "ns", "p1", "main", api.ContainerLogOpts{Tail: 1})
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(rc)
		logs = string(b)
		return logs == "line2\n", logs
	})
	// The main command outlives the agent's wait for its start (moat-init kills a process
	// whose Start request's deadline passes): asserted at the daemon.
	time.Sleep(time.Until(created.Add(2500 * time.Millisecond)))
	if pl, err := d.client.ProcessLogs(ctx, sbs[0].ID); err != nil || len(pl) == 0 || pl[0].Tag != moatnode.MainTag || !pl[0].Running {
		t.Fatalf("main process after the start wait: %+v (%v), want %s running", pl, err, moatnode.MainTag)
	}
	var out bytes.Buffer
	if err := p.RunInContainer(ctx, "ns", "p1", "main", []string{"sh", "-c", "echo exec-ok; test -t 1 && echo tty"}, attachIO{out: &out, tty: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "exec-ok") || !strings.Contains(out.String(), "tty") {
		t.Fatalf("exec output %q", out.String())
	}

	// A second Pod, then a restarted agent: p1 is adopted, p2's sandbox vanished.
	pod2 := pod.DeepCopy()
	pod2.Name, pod2.UID = "p2", "uid-p2"
	if err := p.CreatePod(ctx, pod2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "p2 Running", func() (bool, string) {
		st := status(p, "p2")
		return st.Phase == corev1.PodRunning, string(st.Phase)
	})
	pod2.Status = *status(p, "p2")
	pod.Status = *status(p, "p1")
	sb2, _ := d.client.ListFiltered(ctx, []string{"label=" + moatnode.LabelPodUID + "=uid-p2"})
	if err := d.client.Delete(ctx, sb2[0].ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "p2's sandbox gone", func() (bool, string) {
		all, err := d.client.List(ctx)
		return err == nil && len(all) == 1, "still there"
	})
	p2 := moatnode.NewProvider(d.client, "solo", "127.0.0.1", log)
	if n, err := p2.Adopt(ctx); err != nil || n != 1 {
		t.Fatalf("adopt: %d %v", n, err)
	}
	p2.NotifyPods(ctx, func(*corev1.Pod) {})
	for _, pp := range []*corev1.Pod{pod, pod2} {
		if err := p2.CreatePod(ctx, pp); err != nil {
			t.Fatal(err)
		}
	}
	if st := status(p2, "p1"); st.Phase != corev1.PodRunning || st.ContainerStatuses[0].ContainerID != cid {
		t.Fatalf("p1 after adoption: %s %s", st.Phase, st.ContainerStatuses[0].ContainerID)
	}
	if st := status(p2, "p2"); st.Phase != corev1.PodFailed || st.Reason != moatnode.ReasonSandboxGone {
		t.Fatalf("p2 after its sandbox vanished: %s %s", st.Phase, st.Reason)
	}
	if all, _ := d.client.List(ctx); len(all) != 1 {
		t.Fatalf("adoption made sandboxes: %d at the daemon", len(all))
	}

	// A Pod moat refuses is Failed without a sandbox.
	bad := pod.DeepCopy()
	bad.Name, bad.UID, bad.Status = "p3", "uid-p3", corev1.PodStatus{}
	bad.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}}}
	if err := p2.CreatePod(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if st := status(p2, "p3"); st.Phase != corev1.PodFailed || st.Reason != moatnode.ReasonUnsupported {
		t.Fatalf("p3: %s %s", st.Phase, st.Reason)
	}

	for _, pp := range []*corev1.Pod{pod, pod2, bad} {
		if err := p2.DeletePod(ctx, pp); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "no sandbox left", func() (bool, string) {
		all, err := d.client.List(ctx)
		return err == nil && len(all) == 0, "sandboxes left"
	})
}
