package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// maxEvent caps the bytes read for one event of a watch stream (a Pod and its envelope).
const maxEvent = 2 * maxObject

// WatchPod follows Pod ns/name: it lists it (by fieldSelector metadata.name=name), calls fn
// with the Pod if it exists, then watches from the list's resourceVersion and calls fn
// with the Pod of each ADDED and MODIFIED event. It returns nil when fn says done, fn's
// error when fn fails, an error of class errdefs.ErrNotFound when the Pod is deleted (a
// DELETED event, or a Pod seen before that a new list no longer shows), and the context's
// error when ctx ends. A Pod that does not exist yet is waited for. A watch the server ends
// is resumed from the last resourceVersion seen, or listed again if the server has dropped
// that version (410 Gone); failures of class errdefs.ErrUnavailable (network, 5xx, 429) are
// retried with backoff; other failures (401, 403, ...) are returned.
func (c *Client) WatchPod(ctx context.Context, ns, name string, fn func(p *Pod) (done bool, err error)) error {
	if _, err := namedPodPath(ns, name); err != nil {
		return err
	}
	w := podWatch{c: c, ns: ns, name: name, fn: fn}
	backoff := time.Second / 2
	for {
		start := time.Now()
		stop, err := w.step(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("watching Pod %s/%s: %w", ns, name, ctx.Err())
		}
		switch {
		case stop:
			return err
		case isGone(err):
			w.rv = ""
			continue
		case err != nil && !errors.Is(err, errdefs.ErrUnavailable):
			return fmt.Errorf("watching Pod %s/%s: %w", ns, name, err)
		case err == nil && time.Since(start) > time.Second:
			backoff = time.Second / 2
			continue
		}
		// Wait before trying again: a failure, or a watch that ended at once.
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("watching Pod %s/%s: %w", ns, name, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// podWatch is the state of one WatchPod.
type podWatch struct {
	c        *Client
	ns, name string
	fn       func(p *Pod) (bool, error)
	rv       string // the resourceVersion to watch from; "" = list first
	seen     bool   // the Pod has existed
}

// step lists the Pod if w.rv is "", then watches until the stream ends. stop says WatchPod
// returns err as it is; otherwise err (nil for a stream the server ended) is to be
// retried or returned by WatchPod.
func (w *podWatch) step(ctx context.Context) (stop bool, err error) {
	path, _ := podPath(w.ns, "")
	sel := "metadata.name=" + w.name
	if w.rv == "" {
		pods, rv, err := list[Pod](ctx, w.c, path, url.Values{"fieldSelector": {sel}})
		if err != nil {
			return false, err
		}
		w.rv = rv
		if stop, err := w.saw(pods); stop {
			return true, err
		}
	}
	timeout := w.c.watchTimeout
	q := url.Values{
		"watch":               {"true"},
		"fieldSelector":       {sel},
		"resourceVersion":     {w.rv},
		"allowWatchBookmarks": {"true"},
		"timeoutSeconds":      {strconv.Itoa(int(timeout.Seconds()))},
	}
	// The server ends the watch after timeoutSeconds; the deadline only ends a watch whose
	// connection died silently.
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	resp, err := w.c.do(ctx, http.MethodGet, path, q, "", nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	dec := newEventDecoder(resp.Body)
	for {
		ev, err := dec.next()
		if errors.Is(err, io.EOF) {
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("reading the watch of Pod %s/%s: %w: %w", w.ns, w.name, err, errdefs.ErrUnavailable)
		}
		pod, err := decodePodEvent(ev, path)
		if err != nil {
			return false, err
		}
		if pod.Metadata.ResourceVersion != "" {
			w.rv = pod.Metadata.ResourceVersion
		}
		if ev.Type == "BOOKMARK" || pod.Metadata.Name != w.name {
			continue
		}
		if ev.Type == "DELETED" {
			return true, fmt.Errorf("pod %s/%s was deleted: %w", w.ns, w.name, errdefs.ErrNotFound)
		}
		if stop, err := w.saw([]Pod{*pod}); stop {
			return true, err
		}
	}
}

// saw hands the Pod of a list or event to fn; an empty list after the Pod was seen means
// it is gone.
func (w *podWatch) saw(pods []Pod) (stop bool, err error) {
	if len(pods) == 0 {
		if w.seen {
			return true, fmt.Errorf("pod %s/%s is gone: %w", w.ns, w.name, errdefs.ErrNotFound)
		}
		return false, nil
	}
	w.seen = true
	done, err := w.fn(&pods[0])
	return done || err != nil, err
}

// watchEvent is one event of a watch stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// eventDecoder reads the events of a watch stream (JSON objects one after another) from a
// network peer, reading at most maxEvent bytes for any one event.
type eventDecoder struct {
	cr  *cappedReader
	dec *json.Decoder
}

func newEventDecoder(r io.Reader) *eventDecoder {
	cr := &cappedReader{r: r, left: maxEvent}
	return &eventDecoder{cr: cr, dec: json.NewDecoder(cr)}
}

// next returns the next event, io.EOF at the end of the stream, or another error for a
// stream that is not a watch stream (then no later call succeeds).
func (d *eventDecoder) next() (watchEvent, error) {
	d.cr.left = maxEvent
	var ev watchEvent
	if err := d.dec.Decode(&ev); err != nil {
		return watchEvent{}, err
	}
	if ev.Type == "" || len(ev.Object) == 0 {
		return watchEvent{}, errors.New("a watch event without type or object")
	}
	return ev, nil
}

// cappedReader reads from r until left bytes have been read.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("a watch event larger than %d bytes", maxEvent)
	}
	p = p[:min(int64(len(p)), c.left)]
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// decodePodEvent is the Pod of an ADDED, MODIFIED, DELETED or BOOKMARK event of a Pod
// watch at path, or the error an ERROR event carries (its object is a Status: 410 Gone
// when the resourceVersion watched from is too old).
func decodePodEvent(ev watchEvent, path string) (*Pod, error) {
	switch ev.Type {
	case "ADDED", "MODIFIED", "DELETED", "BOOKMARK":
		var p Pod
		if err := json.Unmarshal(ev.Object, &p); err != nil {
			return nil, fmt.Errorf("watch of %s: a %s event: %w: %w", path, ev.Type, err, errdefs.ErrUnavailable)
		}
		return &p, nil
	case "ERROR":
		var st struct {
			Code int `json:"code"`
		}
		_ = json.Unmarshal(ev.Object, &st)
		return nil, statusError("WATCH", path, st.Code, ev.Object)
	}
	return nil, fmt.Errorf("watch of %s: unknown event type %q: %w", path, ev.Type, errdefs.ErrUnavailable)
}
