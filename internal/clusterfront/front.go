// Package clusterfront is moat's API for a whole Kubernetes cluster (moat serve
// --cluster): a create becomes a Pod that kube-scheduler places on a moat node (a host
// running moat serve and the moat-kubelet agent), the Pod is the sandbox's record, and
// every later request naming the sandbox is forwarded to the daemon of the node that runs
// it. The front keeps no state of its own, so any number of replicas serve together.
package clusterfront

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/kubeapi"
	"github.com/moatdev/moat/internal/previews"
	"github.com/moatdev/moat/internal/sandbox"
)

// Kube is the part of the Kubernetes API the front uses (kubeapi.Client).
type Kube interface {
	CreatePod(ctx context.Context, ns string, p *kubeapi.Pod) (*kubeapi.Pod, error)
	ListPods(ctx context.Context, ns, labelSelector string) ([]kubeapi.Pod, error)
	PatchPodMetadata(ctx context.Context, ns, name string, labels, annotations map[string]string) (*kubeapi.Pod, error)
	DeletePod(ctx context.Context, ns, name string, gracePeriodSeconds *int64) error
	WatchPod(ctx context.Context, ns, name string, fn func(p *kubeapi.Pod) (done bool, err error)) error
	GetNode(ctx context.Context, name string) (*kubeapi.Node, error)
}

// Config configures a Front.
type Config struct {
	Kube      Kube
	Namespace string
	// CallerKeys and NodeKeys are the paths of the --cluster-keys and --cluster-node-keys
	// files (keys.go), re-read when they change.
	CallerKeys, NodeKeys string
	// E2BTemplates maps E2B template names onto moat templates.
	E2BTemplates map[string]string
	// CreateTimeout bounds a create: scheduling, the node's pull and start.
	CreateTimeout time.Duration
	Log           *slog.Logger
}

// Front serves the native and E2B APIs for a cluster.
type Front struct {
	cfg       Config
	callers   *keyFile[[]callerKey]
	nodeKeys  *keyFile[map[string]string]
	mux       *http.ServeMux
	transport http.RoundTripper

	mu     sync.Mutex
	routes map[string]cached[*kubeapi.Pod] // sandbox ID → its Pod
	nodes  map[string]cached[*url.URL]     // node name → its daemon's URL
}

type cached[T any] struct {
	val T
	at  time.Time
}

const (
	routeTTL = 10 * time.Second // a sandbox never moves; a deleted one answers 404 at its node
	nodeTTL  = 30 * time.Second
	// reapEvery is how often the front deletes Pods whose E2B timeout passed.
	reapEvery = 5 * time.Second
)

// New checks the key files and returns a Front.
func New(cfg Config) (*Front, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = 2 * time.Minute
	}
	callers, err := newKeyFile(cfg.CallerKeys, ParseCallerKeys)
	if err != nil {
		return nil, fmt.Errorf("--cluster-keys: %w", err)
	}
	nodeKeys, err := newKeyFile(cfg.NodeKeys, ParseNodeKeys)
	if err != nil {
		return nil, fmt.Errorf("--cluster-node-keys: %w", err)
	}
	f := &Front{cfg: cfg, callers: callers, nodeKeys: nodeKeys, mux: http.NewServeMux(),
		transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: false},
		routes:    map[string]cached[*kubeapi.Pod]{}, nodes: map[string]cached[*url.URL]{}}
	for _, r := range []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"GET /health", f.health},
		{"GET /v1/health", f.health},
		// E2B.
		{"POST /sandboxes", f.e2bCreate},
		{"POST /v2/sandboxes", f.e2bCreate},
		{"GET /sandboxes", f.e2bList},
		{"GET /v2/sandboxes", f.e2bList},
		{"GET /sandboxes/{id}", f.e2bGet},
		{"DELETE /sandboxes/{id}", f.kill(e2bAPI)},
		{"POST /sandboxes/{id}/timeout", f.e2bTimeout("timeout")},
		{"POST /sandboxes/{id}/refreshes", f.e2bTimeout("duration")},
		{"POST /sandboxes/{id}/connect", f.e2bConnect},
		{"POST /v2/sandboxes/{id}/connect", f.e2bConnect},
		{"POST /sandboxes/{id}/resume", f.e2bConnect},
		{"POST /sandboxes/{id}/pause", f.refuse(e2bAPI, "pausing: a sandbox of the cluster front lives as long as its Pod")},
		{"GET /sandboxes/{id}/metrics", f.forwardByKey(e2bAPI)},
		{"PUT /sandboxes/{id}/network", f.forwardByKey(e2bAPI)},
		{"GET /sandboxes/{id}/logs", f.forwardByKey(e2bAPI)},
		{"GET /v2/sandboxes/{id}/logs", f.forwardByKey(e2bAPI)},
		// Native.
		{"POST /v1/sandboxes", f.nativeCreate},
		{"GET /v1/sandboxes", f.nativeList},
		{"GET /v1/sandboxes/{id}", f.forwardByKey(nativeAPI)},
		{"DELETE /v1/sandboxes/{id}", f.kill(nativeAPI)},
		{"/v1/sandboxes/{id}/{rest...}", f.nativeForward},
	} {
		f.mux.HandleFunc(r.pattern, r.h)
	}
	f.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, nativeAPI, fmt.Errorf("%s %s is not served by the cluster front (docs/cluster.md): %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	return f, nil
}

// ServeHTTP routes envd traffic (E2B's E2b-Sandbox-Id header) and previews by the
// sandbox they name, and everything else by path.
func (f *Front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		f.envd(w, r, id)
		return
	}
	if previews.IsPreviewPath(r.URL.Path) {
		f.preview(w, r)
		return
	}
	f.mux.ServeHTTP(w, r)
}

type apiKind int

const (
	nativeAPI apiKind = iota
	e2bAPI
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr translates err once, at the edge, in the API's own error shape.
func writeErr(w http.ResponseWriter, kind apiKind, err error) {
	status, code := apiserver.StatusOf(err)
	msg := err.Error()
	if code == "internal" {
		msg = "internal error: " + msg
	}
	if kind == e2bAPI {
		writeJSON(w, status, map[string]any{"code": status, "message": msg})
		return
	}
	writeJSON(w, status, v1.Error{Code: code, Message: msg})
}

func (f *Front) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "mode": "cluster"})
}

// authenticate returns the caller of a request's API key (Authorization: Bearer, or E2B's
// X-API-KEY).
func (f *Front) authenticate(r *http.Request) (Caller, error) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		key = r.Header.Get("X-API-KEY")
	}
	if key == "" {
		return Caller{}, fmt.Errorf("an API key is required (Authorization: Bearer <key>, or X-API-KEY): %w", errdefs.ErrUnauthenticated)
	}
	keys, err := f.callers.get(time.Now())
	if err != nil {
		f.cfg.Log.Warn("reading --cluster-keys; keeping the last good keys", "err", err)
	}
	c, ok := lookupKey(keys, key)
	if !ok {
		return Caller{}, fmt.Errorf("unknown API key: %w", errdefs.ErrUnauthenticated)
	}
	return c, nil
}

// pod returns the Pod of sandbox id (the cache, else the API server).
func (f *Front) pod(ctx context.Context, id string) (*kubeapi.Pod, error) {
	notFound := fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	if !sandbox.IsFullID(id) {
		return nil, notFound
	}
	f.mu.Lock()
	c, ok := f.routes[id]
	f.mu.Unlock()
	if ok && time.Since(c.at) < routeTTL {
		return c.val, nil
	}
	pods, err := f.cfg.Kube.ListPods(ctx, f.cfg.Namespace, LabelFront+"=true,"+LabelSandboxID+"="+id)
	if err != nil {
		return nil, fmt.Errorf("finding sandbox %s: %w", id, err)
	}
	var live []*kubeapi.Pod
	for i := range pods {
		if pods[i].Metadata.DeletionTimestamp == nil {
			live = append(live, &pods[i])
		}
	}
	switch len(live) {
	case 0:
		return nil, notFound
	case 1:
	default:
		return nil, fmt.Errorf("sandbox %s: %d Pods carry its ID: %w", id, len(live), errdefs.ErrConflict)
	}
	f.mu.Lock()
	f.routes[id] = cached[*kubeapi.Pod]{live[0], time.Now()}
	f.mu.Unlock()
	return live[0], nil
}

func (f *Front) forget(id string) {
	f.mu.Lock()
	delete(f.routes, id)
	f.mu.Unlock()
}

// owned returns the Pod of the sandbox a request names by its {id}, if the caller may
// use it; any other sandbox is not found, as one that does not exist.
func (f *Front) owned(r *http.Request) (Caller, *kubeapi.Pod, error) {
	c, err := f.authenticate(r)
	if err != nil {
		return c, nil, err
	}
	id := r.PathValue("id")
	p, err := f.pod(r.Context(), id)
	if err != nil {
		return c, nil, err
	}
	if !mayUse(c, p) {
		return c, nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return c, p, nil
}

// node returns the daemon URL and API key of a node.
func (f *Front) node(ctx context.Context, name string) (*url.URL, string, error) {
	keys, err := f.nodeKeys.get(time.Now())
	if err != nil {
		f.cfg.Log.Warn("reading --cluster-node-keys; keeping the last good keys", "err", err)
	}
	key, ok := keys[name]
	if !ok {
		key, ok = keys["*"]
	}
	if !ok {
		return nil, "", fmt.Errorf("node %s: no key in --cluster-node-keys: %w", name, errdefs.ErrUnavailable)
	}
	f.mu.Lock()
	c, ok := f.nodes[name]
	f.mu.Unlock()
	if ok && time.Since(c.at) < nodeTTL {
		return c.val, key, nil
	}
	n, err := f.cfg.Kube.GetNode(ctx, name)
	if err != nil {
		return nil, "", fmt.Errorf("node %s: %w", name, err)
	}
	u, err := daemonURL(n.Metadata.Annotations[AnnotationDaemonURL])
	if err != nil {
		return nil, "", fmt.Errorf("node %s: %w", name, err)
	}
	f.mu.Lock()
	f.nodes[name] = cached[*url.URL]{u, time.Now()}
	f.mu.Unlock()
	return u, key, nil
}

// daemonURL checks a node's moat.dev/daemon-url annotation: an http(s) URL with a host and
// nothing else. Pure.
func daemonURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if s == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("annotation %s %q: want http(s)://HOST:PORT of the node's moat serve --listen (moat-kubelet --daemon-url): %w", AnnotationDaemonURL, s, errdefs.ErrUnavailable)
	}
	u.Path = ""
	return u, nil
}

// forward proxies r to the daemon of the node that runs p. withKey: the caller
// authenticated with a front key and may use the sandbox, so the request goes on with the
// node's key; otherwise it goes on with no API key at all (envd traffic, checked by the
// sandbox's access token; token previews).
func (f *Front) forward(w http.ResponseWriter, r *http.Request, kind apiKind, p *kubeapi.Pod, withKey bool) {
	target, key, err := f.node(r.Context(), p.Spec.NodeName)
	if err != nil {
		writeErr(w, kind, err)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			h := pr.Out.Header
			h.Del("X-API-KEY")
			if !strings.HasPrefix(h.Get("Authorization"), "Basic ") { // envd's user, not a key
				h.Del("Authorization")
			}
			if withKey {
				h.Set("Authorization", "Bearer "+key)
			}
		},
		Transport:     f.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.cfg.Log.Warn("forwarding to node", "node", p.Spec.NodeName, "err", err)
			writeErr(w, kind, fmt.Errorf("node %s did not answer: %v: %w", p.Spec.NodeName, err, errdefs.ErrUnavailable))
		},
	}
	rp.ServeHTTP(w, r)
}

// nodeCall makes one API call to the daemon of the node that runs p, with the node's key,
// and decodes its JSON answer.
func (f *Front) nodeCall(ctx context.Context, p *kubeapi.Pod, method, path string, body string, out any) error {
	target, key, err := f.node(ctx, p.Spec.NodeName)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, target.String()+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.transport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("node %s: %v: %w", p.Spec.NodeName, err, errdefs.ErrUnavailable)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("node %s: %v: %w", p.Spec.NodeName, err, errdefs.ErrUnavailable)
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Message string }
		_ = json.Unmarshal(b, &e)
		return fmt.Errorf("node %s: %s %s: %d %s: %w", p.Spec.NodeName, method, path, resp.StatusCode, e.Message, statusClass(resp.StatusCode))
	}
	return json.Unmarshal(b, out)
}

// statusClass is the errdefs class of a node's HTTP status.
func statusClass(code int) error {
	switch code {
	case http.StatusNotFound:
		return errdefs.ErrNotFound
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return errdefs.ErrInvalidArgument
	case http.StatusConflict:
		return errdefs.ErrConflict
	case http.StatusForbidden:
		return errdefs.ErrPermissionDenied
	}
	return errdefs.ErrUnavailable
}

// makePod creates the Pod of r and waits until its sandbox runs; it labels the Pod with
// the sandbox's ID (from then on requests find it) and returns it. A Pod that fails or
// is not placed in time is deleted.
func (f *Front) makePod(ctx context.Context, r podRequest) (*kubeapi.Pod, string, error) {
	t0 := time.Now()
	pod, err := buildPod(r, t0)
	if err != nil {
		return nil, "", err
	}
	created, err := f.cfg.Kube.CreatePod(ctx, f.cfg.Namespace, pod)
	if err != nil {
		return nil, "", fmt.Errorf("creating the sandbox's Pod: %w", err)
	}
	name := created.Metadata.Name
	ok := false
	defer func() {
		if !ok {
			grace := int64(0)
			if err := f.cfg.Kube.DeletePod(context.WithoutCancel(ctx), f.cfg.Namespace, name, &grace); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				f.cfg.Log.Warn("deleting a Pod whose create failed", "pod", name, "err", err)
			}
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, f.cfg.CreateTimeout)
	defer cancel()
	last := created
	err = f.cfg.Kube.WatchPod(wctx, f.cfg.Namespace, name, func(p *kubeapi.Pod) (bool, error) {
		last = p
		return podOutcome(p)
	})
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			msg := fmt.Sprintf("no moat node ran the sandbox within %s", f.cfg.CreateTimeout)
			if u := unschedulable(last); u != "" {
				msg += ": " + u
			}
			return nil, "", fmt.Errorf("%s: %w", msg, errdefs.ErrUnavailable)
		}
		return nil, "", err
	}
	id, _ := sandboxOf(last)
	if last, err = f.cfg.Kube.PatchPodMetadata(ctx, f.cfg.Namespace, name, map[string]string{LabelSandboxID: id}, nil); err != nil {
		return nil, "", fmt.Errorf("labelling Pod %s: %w", name, err)
	}
	ok = true
	f.cfg.Log.Info("sandbox created", "id", id, "pod", name, "node", last.Spec.NodeName, "owner", r.Owner, "took", time.Since(t0).Round(time.Millisecond))
	return last, id, nil
}

func decode(r *http.Request, v any, strict bool) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if strings.TrimSpace(string(b)) == "" {
		return nil
	}
	d := json.NewDecoder(strings.NewReader(string(b)))
	if strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (f *Front) e2bCreate(w http.ResponseWriter, r *http.Request) {
	c, err := f.authenticate(r)
	if err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	var req e2bCreate
	if err := decode(r, &req, false); err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	pr, err := fromE2B(req, c.Owner, f.cfg.E2BTemplates)
	if err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	p, id, err := f.makePod(r.Context(), pr)
	if err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	// The node's connect answers with the sandbox's envd access token (the node made it).
	var out map[string]any
	if err := f.nodeCall(r.Context(), p, http.MethodPost, "/sandboxes/"+id+"/connect", "{}", &out); err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	out["templateID"] = pr.E2BTemplate
	writeJSON(w, http.StatusCreated, out)
}

// e2bGet is getInfo: the node's answer, with the template and end the front keeps.
func (f *Front) e2bGet(w http.ResponseWriter, r *http.Request) {
	_, p, err := f.owned(r)
	if err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	var out map[string]any
	if err := f.nodeCall(r.Context(), p, http.MethodGet, "/sandboxes/"+r.PathValue("id"), "", &out); err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	if l, ok := toE2BListed(p, ""); ok {
		out["templateID"], out["endAt"] = l.TemplateID, l.EndAt
	}
	writeJSON(w, http.StatusOK, out)
}

func (f *Front) e2bConnect(w http.ResponseWriter, r *http.Request) {
	_, p, err := f.owned(r)
	if err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decode(r, &req, false); err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	if req.Timeout != nil && *req.Timeout > 0 {
		if p, err = f.extend(r.Context(), p, *req.Timeout, true); err != nil {
			writeErr(w, e2bAPI, err)
			return
		}
	}
	id := r.PathValue("id")
	var out map[string]any
	if err := f.nodeCall(r.Context(), p, http.MethodPost, "/sandboxes/"+id+"/connect", "{}", &out); err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	if l, ok := toE2BListed(p, ""); ok {
		out["templateID"] = l.TemplateID
	}
	writeJSON(w, http.StatusOK, out)
}

// extend sets the Pod's expiry to seconds from now (onlyLater: unless it is later
// already).
func (f *Front) extend(ctx context.Context, p *kubeapi.Pod, seconds int64, onlyLater bool) (*kubeapi.Pod, error) {
	if seconds < 0 || time.Duration(seconds)*time.Second > maxTimeout {
		return nil, fmt.Errorf("timeout %d: want 0 to %d seconds: %w", seconds, int64(maxTimeout/time.Second), errdefs.ErrInvalidArgument)
	}
	at := time.Now().Add(time.Duration(seconds) * time.Second).UTC()
	if old, err := time.Parse(time.RFC3339, p.Metadata.Annotations[AnnotationExpiresAt]); onlyLater && err == nil && !at.After(old) {
		return p, nil
	}
	np, err := f.cfg.Kube.PatchPodMetadata(ctx, f.cfg.Namespace, p.Metadata.Name, nil, map[string]string{AnnotationExpiresAt: at.Format(time.RFC3339)})
	if err != nil {
		return nil, fmt.Errorf("setting the sandbox's timeout: %w", err)
	}
	if id, ok := sandboxOf(np); ok {
		f.forget(id)
	}
	return np, nil
}

// e2bTimeout is setTimeout (field "timeout") and refresh ("duration"): the front's
// expiry on the Pod moves.
func (f *Front) e2bTimeout(field string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, p, err := f.owned(r)
		if err != nil {
			writeErr(w, e2bAPI, err)
			return
		}
		var req map[string]*int64
		if err := decode(r, &req, false); err != nil {
			writeErr(w, e2bAPI, err)
			return
		}
		secs := req[field]
		if secs == nil {
			writeErr(w, e2bAPI, fmt.Errorf("%s: required: %w", field, errdefs.ErrInvalidArgument))
			return
		}
		if _, err := f.extend(r.Context(), p, *secs, false); err != nil {
			writeErr(w, e2bAPI, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (f *Front) e2bList(w http.ResponseWriter, r *http.Request) {
	pods, c, err := f.callerPods(r)
	if err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	want, err := url.ParseQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		writeErr(w, e2bAPI, fmt.Errorf("metadata: %v: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	if st := r.URL.Query()["state"]; len(st) > 0 && !strings.Contains(strings.Join(st, ","), "running") {
		writeJSON(w, http.StatusOK, []e2bListed{}) // a sandbox of the cluster front is never paused
		return
	}
	out := []e2bListed{}
	for i := range pods {
		if !mayUse(c, &pods[i]) {
			continue
		}
		l, ok := toE2BListed(&pods[i], apiserver.EnvdVersion)
		if !ok || !matches(l.Metadata, want) {
			continue
		}
		out = append(out, l)
	}
	writeJSON(w, http.StatusOK, out)
}

func matches(md map[string]string, want url.Values) bool {
	for k, vs := range want {
		for _, v := range vs {
			if md[k] != v {
				return false
			}
		}
	}
	return true
}

// callerPods lists the Pods of the caller's sandboxes (an admin's: every front Pod).
func (f *Front) callerPods(r *http.Request) ([]kubeapi.Pod, Caller, error) {
	c, err := f.authenticate(r)
	if err != nil {
		return nil, c, err
	}
	sel := LabelFront + "=true"
	if !c.Admin {
		sel += "," + LabelOwnerID + "=" + ownerID(c.Owner)
	}
	pods, err := f.cfg.Kube.ListPods(r.Context(), f.cfg.Namespace, sel)
	if err != nil {
		return nil, c, fmt.Errorf("listing sandboxes: %w", err)
	}
	sortPods(pods)
	return pods, c, nil
}

// kill deletes the sandbox's Pod; the node agent deletes the sandbox.
func (f *Front) kill(kind apiKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, p, err := f.owned(r)
		if err != nil {
			writeErr(w, kind, err)
			return
		}
		grace := int64(1)
		if err := f.cfg.Kube.DeletePod(r.Context(), f.cfg.Namespace, p.Metadata.Name, &grace); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			writeErr(w, kind, fmt.Errorf("deleting the sandbox's Pod: %w", err))
			return
		}
		f.forget(r.PathValue("id"))
		f.cfg.Log.Info("sandbox deleted", "id", r.PathValue("id"), "pod", p.Metadata.Name)
		w.WriteHeader(http.StatusNoContent)
	}
}

func (f *Front) refuse(kind apiKind, what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, kind, fmt.Errorf("%s: %w", what, errdefs.ErrNotImplemented))
	}
}

func (f *Front) forwardByKey(kind apiKind) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, p, err := f.owned(r)
		if err != nil {
			writeErr(w, kind, err)
			return
		}
		f.forward(w, r, kind, p, true)
	}
}

func (f *Front) nativeCreate(w http.ResponseWriter, r *http.Request) {
	c, err := f.authenticate(r)
	if err != nil {
		writeErr(w, nativeAPI, err)
		return
	}
	var req v1.CreateSandboxRequest
	if err := decode(r, &req, true); err != nil {
		writeErr(w, nativeAPI, err)
		return
	}
	pr, err := fromNative(req, c)
	if err != nil {
		writeErr(w, nativeAPI, err)
		return
	}
	p, id, err := f.makePod(r.Context(), pr)
	if err != nil {
		writeErr(w, nativeAPI, err)
		return
	}
	var out map[string]any
	if err := f.nodeCall(r.Context(), p, http.MethodGet, "/v1/sandboxes/"+id, "", &out); err != nil {
		writeErr(w, nativeAPI, err)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (f *Front) nativeList(w http.ResponseWriter, r *http.Request) {
	pods, c, err := f.callerPods(r)
	if err != nil {
		writeErr(w, nativeAPI, err)
		return
	}
	out := []v1.Sandbox{}
	for i := range pods {
		if s, ok := toV1Sandbox(&pods[i]); ok && mayUse(c, &pods[i]) {
			out = append(out, s)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (f *Front) nativeForward(w http.ResponseWriter, r *http.Request) {
	if ok, why := nativeForwarded(r.Method, r.PathValue("rest")); !ok {
		writeErr(w, nativeAPI, fmt.Errorf("%s %s: %s: %w", r.Method, r.URL.Path, why, errdefs.ErrNotImplemented))
		return
	}
	_, p, err := f.owned(r)
	if err != nil {
		writeErr(w, nativeAPI, err)
		return
	}
	f.forward(w, r, nativeAPI, p, true)
}

// nativeForwarded says whether a native route below /v1/sandboxes/{id}/ goes on to the
// node, and if not why. Only routes that use or look at a running sandbox do: its
// lifecycle (stop, start, pause, resume, snapshots, forks), visibility and ownership are
// the Pod's and the front's. An allowlist, so that a route added to the daemon later is
// refused here until it is thought about. Pure.
func nativeForwarded(method, rest string) (bool, string) {
	first, _, _ := strings.Cut(rest, "/")
	switch first {
	case "envd", "terminal", "logs", "events", "egress", "stats", "diff", "changes", "ports", "users":
		return true, ""
	case "policy":
		return method == http.MethodPut, "only PUT"
	case "export":
		return method == http.MethodPost, "only POST"
	case "stop", "start", "pause", "resume", "fork", "snapshot", "restore", "checkpoint":
		return false, "a sandbox of the cluster front lives as long as its Pod (delete it to end it)"
	case "visibility":
		return false, "ownership is the front's (--cluster-keys)"
	}
	return false, "not offered by the cluster front"
}

// envd forwards an E2B SDK's envd request to the node of its sandbox, without any API
// key: the node checks the sandbox's access token. An unknown sandbox answers 502, as
// E2B's edge (and a single moat daemon) does.
func (f *Front) envd(w http.ResponseWriter, r *http.Request, id string) {
	p, err := f.pod(r.Context(), id)
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": http.StatusBadGateway})
		return
	}
	f.forward(w, r, e2bAPI, p, false)
}

// preview forwards a path-based preview (/preview/<id>/<port>/…). A caller with a front
// key that may use the sandbox goes on with the node's key (private ports); anyone else
// goes on with none (ports opened to a token, or public ones).
func (f *Front) preview(w http.ResponseWriter, r *http.Request) {
	t, _, ok := previews.ParsePath(r.URL.EscapedPath())
	if !ok {
		http.NotFound(w, r)
		return
	}
	p, err := f.pod(r.Context(), t.ID)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	c, err := f.authenticate(r)
	f.forward(w, r, nativeAPI, p, err == nil && mayUse(c, p))
}

// Reap deletes, every few seconds until ctx ends, the Pods whose E2B timeout passed.
// Every replica reaps; a delete of a Pod already gone is not an error.
func (f *Front) Reap(ctx context.Context) {
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.prune(time.Now())
		pods, err := f.cfg.Kube.ListPods(ctx, f.cfg.Namespace, LabelFront+"=true")
		if err != nil {
			f.cfg.Log.Warn("listing Pods to reap", "err", err)
			continue
		}
		now := time.Now()
		for i := range pods {
			p := &pods[i]
			if p.Metadata.DeletionTimestamp != nil || !expired(p, now) {
				continue
			}
			grace := int64(1)
			if err := f.cfg.Kube.DeletePod(ctx, f.cfg.Namespace, p.Metadata.Name, &grace); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				f.cfg.Log.Warn("deleting an expired sandbox's Pod", "pod", p.Metadata.Name, "err", err)
				continue
			}
			id, _ := sandboxOf(p)
			f.forget(id)
			f.cfg.Log.Info("sandbox timed out", "id", id, "pod", p.Metadata.Name)
		}
	}
}

// prune drops cache entries past their time, so that the caches hold only sandboxes and
// nodes in use.
func (f *Front) prune(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, c := range f.routes {
		if now.Sub(c.at) >= routeTTL {
			delete(f.routes, id)
		}
	}
	for n, c := range f.nodes {
		if now.Sub(c.at) >= nodeTTL {
			delete(f.nodes, n)
		}
	}
}
