package moatnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/moatdev/moat/api/envd/process"
	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Provider runs the Pods bound to one node as sandboxes of one moat daemon. It keeps no
// state of its own that the daemon does not also hold: each sandbox carries its Pod's
// node, UID, namespace and name, so a restarted Provider re-adopts them (Adopt).
type Provider struct {
	c      *sdk.Client
	node   string
	hostIP string
	log    *slog.Logger
	// MainStartWait bounds how long CreatePod waits for the main command's start event
	// (0: 30 s). It never bounds the command's life. Set before the first CreatePod.
	MainStartWait time.Duration

	mu      sync.Mutex
	pods    map[string]*entry     // by namespace/name
	adopted map[string]v1.Sandbox // sandboxes found at start not yet claimed by a Pod, by namespace/name
	notify  func(*corev1.Pod)     // set by NotifyPods
	last    map[string]corev1.PodStatus
}

type entry struct {
	pod     *corev1.Pod
	id      string // sandbox id ("" until made)
	hasMain bool
	gone    bool
	err     error
	// mainEnded is the main process' record once it has ended (it does not change).
	mainEnded *v1.ProcessLog
}

// NewProvider returns a provider for node (its name) whose daemon is c; hostIP is the
// node's address.
func NewProvider(c *sdk.Client, node, hostIP string, log *slog.Logger) *Provider {
	return &Provider{c: c, node: node, hostIP: hostIP, log: log,
		pods: map[string]*entry{}, adopted: map[string]v1.Sandbox{}, last: map[string]corev1.PodStatus{}}
}

var (
	_ nodeutil.Provider = (*Provider)(nil)
)

func podKey(ns, name string) string { return ns + "/" + name }

// Adopt lists the daemon's sandboxes labelled with this node; CreatePod of the same Pod
// (same UID) then takes its sandbox over instead of making one. Call before the pod
// controller runs.
func (p *Provider) Adopt(ctx context.Context) (int, error) {
	sbs, err := p.c.ListFiltered(ctx, []string{"label=" + LabelNode + "=" + p.node})
	if err != nil {
		return 0, fmt.Errorf("listing the sandboxes of node %s: %w", p.node, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sb := range sbs {
		ns, name := sb.Metadata[MetaNamespace], sb.Metadata[MetaPod]
		if ns == "" || name == "" || sb.State == "deleting" {
			continue
		}
		p.adopted[podKey(ns, name)] = sb
	}
	return len(p.adopted), nil
}

// CreatePod makes pod's sandbox (or adopts the one a previous agent made) and starts its
// main command. A Pod moat cannot run is not an error here: it is reported Failed with
// the reason (retrying would not help).
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	k := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	if e, ok := p.pods[k]; ok && e.pod.UID == pod.UID && (e.id != "" || e.err != nil) {
		p.mu.Unlock()
		return nil
	}
	e := &entry{pod: pod.DeepCopy()}
	p.pods[k] = e
	sb, adopted := p.adopted[k]
	if adopted {
		delete(p.adopted, k)
	}
	p.mu.Unlock()

	req, main, err := PodToSandbox(pod, p.node)
	if err != nil {
		p.setErr(k, err)
		return nil
	}
	if adopted && sb.Labels[LabelPodUID] == string(pod.UID) {
		p.mu.Lock()
		e.id, e.hasMain = sb.ID, main.Cmd != ""
		p.mu.Unlock()
		p.log.Info("adopted sandbox", "pod", k, "sandbox", sb.ID)
		p.refresh(ctx, k)
		return nil
	}
	if adopted { // a sandbox of an older incarnation of this Pod name
		_ = p.c.Delete(context.WithoutCancel(ctx), sb.ID)
	}
	if wasStarted(pod) {
		// The Pod ran here before, and its sandbox is not among the node's: it vanished
		// while no agent watched. Report that rather than make a fresh one.
		p.mu.Lock()
		e.gone = true
		p.mu.Unlock()
		p.refresh(ctx, k)
		return nil
	}
	tmpl, err := p.ensureTemplate(ctx, req.Template)
	if err != nil {
		p.setErr(k, err)
		return nil
	}
	req.Template = tmpl
	made, err := p.c.Create(ctx, req)
	if err != nil {
		if errors.Is(err, sdk.ErrInvalidArgument) || errors.Is(err, sdk.ErrPermissionDenied) || errors.Is(err, sdk.ErrNotFound) {
			p.setErr(k, fmt.Errorf("creating the sandbox: %w", err))
			return nil
		}
		return fmt.Errorf("creating the sandbox of pod %s: %w", k, err)
	}
	p.mu.Lock()
	e.id = made.ID
	e.hasMain = main.Cmd != ""
	p.mu.Unlock()
	p.log.Info("made sandbox", "pod", k, "sandbox", made.ID)
	if main.Cmd != "" {
		if err := p.startMain(ctx, made.ID, main, req.Env); err != nil {
			p.setErr(k, err)
			return nil
		}
	}
	p.refresh(ctx, k)
	return nil
}

// wasStarted says whether the Pod's status shows a moat container that ran.
func wasStarted(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if strings.HasPrefix(cs.ContainerID, "moat://") {
			return true
		}
	}
	return false
}

// ensureTemplate returns the template to make image's sandbox from: a local template
// named image as is; an image reference is pulled (once) as the template
// TemplateForImage(image).
func (p *Provider) ensureTemplate(ctx context.Context, image string) (string, error) {
	ts, err := p.c.Templates(ctx)
	if err != nil {
		return "", fmt.Errorf("listing templates: %w", err)
	}
	name := image
	if !strings.ContainsAny(image, "/:@") {
		for _, t := range ts {
			if t.Name == name {
				return name, nil
			}
		}
		return "", fmt.Errorf("image %q is neither a local moat template nor an image reference: %w", image, ErrUnsupported)
	}
	name = TemplateForImage(image)
	for _, t := range ts {
		if t.Name == name {
			return name, nil
		}
	}
	if _, err := p.c.TemplateOp(ctx, "pull", v1.TemplateRequest{Name: name, Ref: image}, nil); err != nil {
		return "", fmt.Errorf("pulling %s as template %s: %w", image, name, err)
	}
	return name, nil
}

// startMain starts the Pod's command in sandbox id as a tagged process that outlives this
// call (its output is kept by the sandbox for kubectl logs).
func (p *Provider) startMain(ctx context.Context, id string, m MainCommand, env map[string]string) error {
	pc := p.c.Process(id, "")
	tag := MainTag
	start := &process.StartRequest{Process: &process.ProcessConfig{Cmd: m.Cmd, Args: m.Args, Envs: env}, Tag: &tag}
	if m.Workdir != "" {
		start.Process.Cwd = &m.Workdir
	}
	// No deadline on the Start request: moat-init kills a process when its Start
	// request's deadline passes (connect-timeout-ms, as in envd), which would end the
	// Pod's main process 30 s after it started. Waiting for the start event is bounded
	// by cancelling instead: a client that goes away leaves the process running.
	wait := p.MainStartWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer time.AfterFunc(wait, cancel).Stop()
	stream, err := pc.Start(sctx, connect.NewRequest(start))
	if err != nil {
		return fmt.Errorf("starting the main command: %w", err)
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev.GetStart() != nil || ev.GetEnd() != nil {
			return nil
		}
	}
	return fmt.Errorf("starting the main command: %v", stream.Err())
}

func (p *Provider) setErr(k string, err error) {
	p.log.Warn("pod refused", "pod", k, "err", err)
	p.mu.Lock()
	if e, ok := p.pods[k]; ok {
		e.err = err
	}
	p.mu.Unlock()
	p.refresh(context.Background(), k)
}

// UpdatePod keeps the newer spec; a sandbox's shape does not change after create.
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.pods[podKey(pod.Namespace, pod.Name)]; ok && e.pod.UID == pod.UID {
		e.pod = pod.DeepCopy()
	}
	return nil
}

// DeletePod deletes pod's sandbox and reports the Pod terminated. Idempotent.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	k := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	e, ok := p.pods[k]
	id := ""
	if ok {
		id = e.id
	} else if sb, ok2 := p.adopted[k]; ok2 {
		id = sb.ID
		delete(p.adopted, k)
	}
	p.mu.Unlock()
	if id != "" {
		if err := p.c.Delete(context.WithoutCancel(ctx), id); err != nil && !errors.Is(err, sdk.ErrNotFound) {
			return fmt.Errorf("deleting sandbox %s of pod %s: %w", id, k, err)
		}
		p.log.Info("deleted sandbox", "pod", k, "sandbox", id)
	}
	p.mu.Lock()
	delete(p.pods, k)
	delete(p.last, k)
	cb := p.notify
	p.mu.Unlock()
	done := pod.DeepCopy()
	now := metav1.Now()
	done.Status.Phase = corev1.PodSucceeded
	done.Status.Reason = "Deleted"
	for i := range done.Status.ContainerStatuses {
		done.Status.ContainerStatuses[i].Ready = false
		done.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Deleted", FinishedAt: now, ContainerID: done.Status.ContainerStatuses[i].ContainerID}}
	}
	if cb != nil {
		cb(done)
	}
	return nil
}

// GetPod returns the Pod with its current status, or errdefs NotFound.
func (p *Provider) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := podKey(ns, name)
	e, ok := p.pods[k]
	if !ok {
		return nil, errdefs.NotFoundf("pod %s not on this node", k)
	}
	out := e.pod.DeepCopy()
	if st, ok := p.last[k]; ok {
		out.Status = *st.DeepCopy()
	}
	return out, nil
}

// GetPodStatus returns the Pod's status, or errdefs NotFound.
func (p *Provider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists the node's Pods, including sandboxes adopted but not yet claimed (as
// skeleton Pods, so the pod controller deletes those whose Pod no longer exists).
func (p *Provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*corev1.Pod
	for k, e := range p.pods {
		pod := e.pod.DeepCopy()
		if st, ok := p.last[k]; ok {
			pod.Status = *st.DeepCopy()
		}
		out = append(out, pod)
	}
	for _, sb := range p.adopted {
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: sb.Metadata[MetaNamespace], Name: sb.Metadata[MetaPod], UID: types.UID(sb.Labels[LabelPodUID])}})
	}
	return out, nil
}

// NotifyPods registers the callback that receives status changes; it also starts the
// loop that watches the sandboxes (every second) until ctx ends.
func (p *Provider) NotifyPods(ctx context.Context, cb func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = cb
	keys := make([]string, 0, len(p.pods))
	for k := range p.pods {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// One list per tick for all the node's sandboxes, not one read per Pod.
			sbs, err := p.c.ListFiltered(ctx, []string{"label=" + LabelNode + "=" + p.node})
			if err != nil {
				p.log.Warn("listing the node's sandboxes", "err", err)
				continue
			}
			listed := make(map[string]*v1.Sandbox, len(sbs))
			for i := range sbs {
				listed[sbs[i].ID] = &sbs[i]
			}
			p.mu.Lock()
			keys = keys[:0]
			for k := range p.pods {
				keys = append(keys, k)
			}
			p.mu.Unlock()
			for _, k := range keys {
				p.refreshWith(ctx, k, listed)
			}
		}
	}()
}

// refresh reads pod k's sandbox and main process from the daemon and notifies a changed
// status.
func (p *Provider) refresh(ctx context.Context, k string) { p.refreshWith(ctx, k, nil) }

// refreshWith is refresh with the node's sandboxes as just listed (nil: read this Pod's
// sandbox alone). A main process that has ended is not read again.
func (p *Provider) refreshWith(ctx context.Context, k string, listed map[string]*v1.Sandbox) {
	p.mu.Lock()
	e, ok := p.pods[k]
	if !ok {
		p.mu.Unlock()
		return
	}
	o := Observed{HasMain: e.hasMain, Gone: e.gone, Err: e.err, Main: e.mainEnded}
	id := e.id
	p.mu.Unlock()
	if id != "" && o.Err == nil && !o.Gone {
		var sb *v1.Sandbox
		var err error
		if listed != nil {
			sb = listed[id]
		}
		if sb == nil {
			// Not listed (or no list): read it alone. A sandbox made after the list was
			// taken is not gone.
			sb, err = p.c.Get(ctx, id)
		}
		switch {
		case errors.Is(err, sdk.ErrNotFound):
			o.Gone = true
			p.mu.Lock()
			e.gone = true
			p.mu.Unlock()
		case err != nil:
			p.log.Warn("reading sandbox", "sandbox", id, "err", err)
			return
		default:
			o.Sandbox = sb
			if o.HasMain && o.Main == nil && sb.State == "running" {
				logs, err := p.c.ProcessLogs(ctx, id)
				if err != nil {
					p.log.Warn("reading processes", "sandbox", id, "err", err)
					return
				}
				for i := range logs {
					if logs[i].Tag == MainTag {
						o.Main = &logs[i]
					}
				}
				if o.Main != nil && !o.Main.Running {
					p.mu.Lock()
					e.mainEnded = o.Main
					p.mu.Unlock()
				}
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok = p.pods[k]
	if !ok {
		return
	}
	st := PodStatus(e.pod, o, p.hostIP)
	if prev, ok := p.last[k]; ok && statusEqual(prev, st) {
		return
	}
	p.last[k] = st
	if p.notify != nil {
		pod := e.pod.DeepCopy()
		pod.Status = st
		go p.notify(pod)
	}
}

// statusEqual compares statuses ignoring times.
func statusEqual(a, b corev1.PodStatus) bool {
	a, b = *a.DeepCopy(), *b.DeepCopy()
	for _, s := range []*corev1.PodStatus{&a, &b} {
		s.StartTime = nil
		for i := range s.ContainerStatuses {
			s.ContainerStatuses[i].State = stripTimes(s.ContainerStatuses[i].State)
		}
	}
	return reflect.DeepEqual(a, b)
}

func stripTimes(cs corev1.ContainerState) corev1.ContainerState {
	if cs.Running != nil {
		cs.Running = &corev1.ContainerStateRunning{}
	}
	if cs.Terminated != nil {
		t := *cs.Terminated
		t.StartedAt, t.FinishedAt = metav1.Time{}, metav1.Time{}
		cs.Terminated = &t
	}
	return cs
}

// sandboxOf returns the sandbox id of a Pod of this node.
func (p *Provider) sandboxOf(ns, name string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.pods[podKey(ns, name)]
	if !ok || e.id == "" {
		return "", errdefs.NotFoundf("pod %s/%s has no sandbox on this node", ns, name)
	}
	return e.id, nil
}

// exitError carries a command's exit code to the kubelet API (k8s.io/utils/exec.ExitError).
type exitError struct{ code int }

func (e exitError) Error() string   { return fmt.Sprintf("command terminated with exit code %d", e.code) }
func (e exitError) String() string  { return e.Error() }
func (e exitError) Exited() bool    { return true }
func (e exitError) ExitStatus() int { return e.code }

// RunInContainer runs cmd in the Pod's sandbox (kubectl exec), on a terminal when asked.
func (p *Provider) RunInContainer(ctx context.Context, ns, name, _ string, cmd []string, attach api.AttachIO) error {
	id, err := p.sandboxOf(ns, name)
	if err != nil {
		return err
	}
	if len(cmd) == 0 {
		return errdefs.InvalidInput("no command")
	}
	req := sdk.ExecRequest{Cmd: cmd[0], Args: cmd[1:]}
	if in := attach.Stdin(); in != nil {
		req.Stdin = in
	}
	if out := attach.Stdout(); out != nil {
		req.Stdout = out
	}
	if errw := attach.Stderr(); errw != nil {
		req.Stderr = errw
	}
	if attach.TTY() {
		req.TTY = &sdk.TermSize{Cols: 80, Rows: 24}
		rs := make(chan sdk.TermSize, 1)
		req.Resize = rs
		ctx2, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			for {
				select {
				case <-ctx2.Done():
					return
				case sz, ok := <-attach.Resize():
					if !ok {
						return
					}
					select {
					case rs <- sdk.TermSize{Cols: uint32(sz.Width), Rows: uint32(sz.Height)}:
					case <-ctx2.Done():
						return
					}
				}
			}
		}()
	}
	code, err := p.c.Exec(ctx, id, req)
	if err != nil {
		return fmt.Errorf("exec in sandbox %s: %w", id, err)
	}
	if code != 0 {
		return exitError{code: code}
	}
	return nil
}

// AttachToContainer is not offered: a sandbox's main process has no attachable terminal.
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errdefs.InvalidInput("attach is not supported by moat nodes; use exec")
}

// GetContainerLogs returns the main command's kept output (kubectl logs), following it
// when asked; Tail and LimitBytes are applied when not following.
func (p *Provider) GetContainerLogs(ctx context.Context, ns, name, _ string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	id, err := p.sandboxOf(ns, name)
	if err != nil {
		return nil, err
	}
	if !opts.Follow {
		var buf bytes.Buffer
		err := p.c.Logs(ctx, id, 0, MainTag, false, func(ch v1.LogChunk) error {
			buf.Write(ch.Data)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading the logs of sandbox %s: %w", id, err)
		}
		return io.NopCloser(bytes.NewReader(TailBytes(buf.Bytes(), opts.Tail, opts.LimitBytes))), nil
	}
	pr, pw := io.Pipe()
	go func() {
		err := p.c.Logs(ctx, id, 0, MainTag, true, func(ch v1.LogChunk) error {
			_, err := pw.Write(ch.Data)
			return err
		})
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// TailBytes keeps the last tail lines of b (tail <= 0: all), then at most limit bytes
// (limit <= 0: all). Pure.
func TailBytes(b []byte, tail, limit int) []byte {
	if tail > 0 {
		n, i := 0, len(b)
		if i > 0 && b[i-1] == '\n' {
			i--
		}
		for ; i > 0; i-- {
			if b[i-1] == '\n' {
				n++
				if n == tail {
					break
				}
			}
		}
		b = b[i:]
	}
	if limit > 0 && len(b) > limit {
		b = b[:limit]
	}
	return b
}

// GetStatsSummary reports no statistics yet (moat's per-sandbox stats are not mapped).
func (p *Provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, errdefs.NotFound("stats are not offered by moat nodes yet")
}

// GetMetricsResource reports no metrics yet.
func (p *Provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errdefs.NotFound("metrics are not offered by moat nodes yet")
}

// PortForward is not offered (a sandbox's ports are reached through moat previews).
func (p *Provider) PortForward(context.Context, string, string, int32, io.ReadWriteCloser) error {
	return errdefs.InvalidInput("port-forward is not supported by moat nodes; use moat previews")
}
