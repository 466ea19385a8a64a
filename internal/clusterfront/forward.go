package clusterfront

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/kubeapi"
)

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
