// Package clusterfront is moat's API for a whole Kubernetes cluster (moat serve
// --cluster): a create becomes a Pod that kube-scheduler places on a moat node (a host
// running moat serve and the moat-kubelet agent), the Pod is the sandbox's record, and
// every later request naming the sandbox is forwarded to the daemon of the node that runs
// it. The front keeps no state of its own, so any number of replicas serve together.
package clusterfront

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
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
	// PreviewDomain is the front's host-based preview domain (moat serve --preview-domain,
	// wildcard DNS to the front): http://PORT-ID.DOMAIN/ reaches the sandbox's port, and E2B
	// answers carry it as domain, so that the SDKs' getHost(port) names the front. "": none.
	PreviewDomain string
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
	if t, ok := previews.ParseHost(r.Host, f.cfg.PreviewDomain); ok {
		f.hostPreview(w, r, t)
		return
	}
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
	msg := apiserver.ClientMessage(err)
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
