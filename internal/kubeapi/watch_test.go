package kubeapi

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// events decodes a whole stream; it stops at the first error (io.EOF included).
func events(b []byte) ([]watchEvent, error) {
	d := newEventDecoder(strings.NewReader(string(b)))
	var evs []watchEvent
	for {
		ev, err := d.next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
	}
}

func TestEventDecoder(t *testing.T) {
	stream := `{"type":"ADDED","object":{"metadata":{"name":"p","resourceVersion":"1"}}}
{"type":"MODIFIED","object":{"metadata":{"name":"p","resourceVersion":"2"}}}{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"3"}}}
  {"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version: 1 (3)"}}
`
	evs, err := events([]byte(stream))
	if !errors.Is(err, io.EOF) || len(evs) != 4 {
		t.Fatalf("%d events, %v; want 4 and EOF", len(evs), err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if want := []string{"ADDED", "MODIFIED", "BOOKMARK", "ERROR"}; !reflect.DeepEqual(types, want) {
		t.Errorf("types %v, want %v", types, want)
	}
	p, err := decodePodEvent(evs[1], "/p")
	if err != nil || p.Metadata.ResourceVersion != "2" || p.Metadata.Name != "p" {
		t.Errorf("MODIFIED: %+v, %v", p, err)
	}
	if _, err := decodePodEvent(evs[3], "/p"); !isGone(err) || !strings.Contains(err.Error(), "too old") {
		t.Errorf("ERROR 410: %v", err)
	}
	if _, err := decodePodEvent(watchEvent{Type: "ERROR", Object: []byte(`{"kind":"Status","code":403,"message":"no"}`)}, "/p"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("ERROR 403: %v", err)
	}
	if _, err := decodePodEvent(watchEvent{Type: "EXPLODED", Object: []byte(`{}`)}, "/p"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := decodePodEvent(watchEvent{Type: "ADDED", Object: []byte(`[1]`)}, "/p"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("a Pod that is not an object: %v", err)
	}

	for name, bad := range map[string]string{
		"truncated":  `{"type":"ADDED","object":{"metadata":`,
		"no type":    `{"object":{}}`,
		"no object":  `{"type":"ADDED"}`,
		"not JSON":   `HTTP/1.1 200 OK`,
		"too large":  `{"type":"ADDED","object":{"metadata":{"name":"` + strings.Repeat("a", maxEvent) + `"}}}`,
		"endless ws": strings.Repeat(" ", maxEvent+1),
	} {
		evs, err := events([]byte(bad))
		if err == nil || errors.Is(err, io.EOF) || len(evs) != 0 {
			t.Errorf("%s: %d events, err %v; want an error that is not EOF", name, len(evs), err)
		}
	}
	// The cap is per event: many events, each under it, add up to more than it.
	ev := `{"type":"MODIFIED","object":{"metadata":{"name":"` + strings.Repeat("a", maxEvent/4) + `"}}}`
	if evs, err := events([]byte(strings.Repeat(ev, 10))); !errors.Is(err, io.EOF) || len(evs) != 10 {
		t.Errorf("10 events of a quarter of the cap: %d, %v", len(evs), err)
	}
}

// FuzzWatchDecoder: a watch stream is bytes from a network peer. Decoding never panics,
// never returns an event without type or object, and never an unbounded one.
func FuzzWatchDecoder(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":{"metadata":{"name":"p","resourceVersion":"1","labels":{"a":"b"}},"spec":{"containers":[]},"status":{"phase":"Pending"}}}` + "\n" +
		`{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}`))
	f.Add([]byte(`{"type":"DELETED","object":{"metadata":{"name":"p","creationTimestamp":"2026-12-07T10:00:00Z"}}}{"type":"BOOKMARK","object":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, _ := events(b)
		for _, ev := range evs {
			if ev.Type == "" || len(ev.Object) == 0 || len(ev.Object) > maxEvent {
				t.Fatalf("bad event %q", ev.Type)
			}
			p, err := decodePodEvent(ev, "/p")
			if (p == nil) == (err == nil) {
				t.Fatalf("decodePodEvent: %v and %v", p, err)
			}
		}
	})
}

// fakeServer is an API server over TLS whose handler the test writes, and a Client for it.
func fakeServer(t *testing.T, h http.HandlerFunc) *Client {
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := New(Config{Server: srv.URL, CAData: ca, Token: "t0k"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func podJSON(name, rv string) string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"namespace":"ns","resourceVersion":%q},"spec":{"containers":[]}}`, name, rv)
}

// TestWatchPodResumes drives WatchPod through what a real server does now and then: a
// watch it ends (resumed from the last resourceVersion), a 410 Gone (listed again), a
// bookmark, an event of another object, and the DELETED event.
func TestWatchPodResumes(t *testing.T) {
	var mu sync.Mutex
	var lists, watches []string // resourceVersion asked by each
	c := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		if r.URL.Path != "/api/v1/namespaces/ns/pods" || q.Get("fieldSelector") != "metadata.name=p" || r.Header.Get("Authorization") != "Bearer t0k" {
			http.Error(w, "unexpected "+r.URL.String(), http.StatusBadRequest)
			return
		}
		if q.Get("watch") != "true" {
			lists = append(lists, q.Get("resourceVersion"))
			rv := map[int]string{1: "5", 2: "9"}[len(lists)]
			fmt.Fprintf(w, `{"kind":"PodList","metadata":{"resourceVersion":%q},"items":[%s]}`, rv, podJSON("p", rv))
			return
		}
		watches = append(watches, q.Get("resourceVersion"))
		switch len(watches) {
		case 1: // one event, then the server ends the watch
			fmt.Fprintf(w, `{"type":"MODIFIED","object":%s}`+"\n", podJSON("p", "6"))
		case 2:
			fmt.Fprint(w, `{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}`)
		case 3:
			fmt.Fprintf(w, `{"type":"BOOKMARK","object":%s}`, podJSON("", "10"))
			fmt.Fprintf(w, `{"type":"MODIFIED","object":%s}`, podJSON("q", "11"))
			fmt.Fprintf(w, `{"type":"DELETED","object":%s}`, podJSON("p", "12"))
		}
	})
	var seen []string
	err := c.WatchPod(context.Background(), "ns", "p", func(p *Pod) (bool, error) {
		seen = append(seen, p.Metadata.ResourceVersion)
		return false, nil
	})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("WatchPod = %v, want ErrNotFound after DELETED", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"5", "6", "9"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("fn saw resourceVersions %v, want %v", seen, want)
	}
	if want := []string{"", ""}; !reflect.DeepEqual(lists, want) {
		t.Errorf("lists from %q, want %q", lists, want)
	}
	if want := []string{"5", "6", "9"}; !reflect.DeepEqual(watches, want) {
		t.Errorf("watches from %q, want %q", watches, want)
	}
}

func TestWatchPodStops(t *testing.T) {
	var calls atomic.Int32
	c := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Query().Get("watch") == "true" {
			fmt.Fprintf(w, `{"type":"MODIFIED","object":%s}`, podJSON("p", "2"))
			time.Sleep(50 * time.Millisecond)
			return
		}
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"1"},"items":[%s]}`, podJSON("p", "1"))
	})
	if err := c.WatchPod(context.Background(), "ns", "p", func(*Pod) (bool, error) { return true, nil }); err != nil || calls.Load() != 1 {
		t.Errorf("done at once: %v after %d requests; want nil after the list alone", err, calls.Load())
	}
	boom := errors.New("boom")
	n := 0
	err := c.WatchPod(context.Background(), "ns", "p", func(*Pod) (bool, error) {
		if n++; n == 2 {
			return false, boom
		}
		return false, nil
	})
	if err != boom {
		t.Errorf("fn's error: WatchPod = %v, want it as is", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.WatchPod(ctx, "ns", "p", func(*Pod) (bool, error) { return false, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ctx ends: WatchPod = %v", err)
	}
	if err := c.WatchPod(ctx, "ns", "../p", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad name: %v", err)
	}
}

// TestWatchPodForbidden: a failure that retrying cannot mend is returned, not retried.
func TestWatchPodForbidden(t *testing.T) {
	var calls atomic.Int32
	c := fakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "code": 403, "reason": "Forbidden", "message": "pods is forbidden"})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.WatchPod(ctx, "ns", "p", func(*Pod) (bool, error) { return false, nil })
	if !errors.Is(err, errdefs.ErrPermissionDenied) || calls.Load() != 1 || strings.Contains(err.Error(), "t0k") {
		t.Errorf("WatchPod = %v after %d requests", err, calls.Load())
	}
}
