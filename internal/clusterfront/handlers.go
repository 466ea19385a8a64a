package clusterfront

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/kubeapi"
	"github.com/moatdev/moat/internal/previews"
)

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

func (f *Front) e2bCreate(w http.ResponseWriter, r *http.Request) {
	c, err := f.authenticate(r)
	if err != nil {
		writeErr(w, e2bAPI, err)
		return
	}
	var req e2bCreate
	if err := apiserver.DecodeE2B(r, &req); err != nil {
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
	f.withDomain(out)
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
	if l, ok := toE2BListed(p); ok {
		out["templateID"], out["endAt"] = l.TemplateID, l.EndAt
	}
	f.withDomain(out)
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
	if err := apiserver.DecodeE2B(r, &req); err != nil {
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
	if l, ok := toE2BListed(p); ok {
		out["templateID"] = l.TemplateID
	}
	f.withDomain(out)
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
		if err := apiserver.DecodeE2B(r, &req); err != nil {
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
		writeJSON(w, http.StatusOK, []apiserver.E2BListed{}) // a sandbox of the cluster front is never paused
		return
	}
	out := []apiserver.E2BListed{}
	for i := range pods {
		if !mayUse(c, &pods[i]) {
			continue
		}
		l, ok := toE2BListed(&pods[i])
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
	if err := apiserver.DecodeOptional(r, &req); err != nil {
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

// hostPreview serves http://PORT-ID.DOMAIN/ (the E2B SDKs' getHost(port)): the node gets
// it as E2B's header-routed preview of that port (E2b-Sandbox-Id, E2b-Sandbox-Port), port
// 49983 being envd itself. As for path-based previews, a caller with a front key who may
// use the sandbox goes on with the node's key, anyone else with none (the traffic token or
// a port's token then decides at the node).
func (f *Front) hostPreview(w http.ResponseWriter, r *http.Request, t previews.Target) {
	p, err := f.pod(r.Context(), t.ID)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	r.Header.Set("E2b-Sandbox-Id", t.ID)
	r.Header.Set("E2b-Sandbox-Port", strconv.Itoa(t.Port))
	c, err := f.authenticate(r)
	f.forward(w, r, e2bAPI, p, err == nil && mayUse(c, p) && t.Port != envdPort)
}

// envdPort is the sandbox port of envd (moat-init) in E2B's host names.
const envdPort = 49983

// withDomain sets an E2B answer's domain to the front's preview domain (the node's own
// would name the node).
func (f *Front) withDomain(out map[string]any) {
	if f.cfg.PreviewDomain != "" {
		out["domain"] = f.cfg.PreviewDomain
	} else {
		out["domain"] = nil
	}
}
