package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/build"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// wakingSandboxes: sandbox sb-idle is stopped (idle) until the first Acquire starts it;
// sb-frozen is paused (idle) and thaws; Create makes a running sandbox of the template
// asked; Delete records.
type wakingSandboxes struct {
	fakeSandboxes
	mu      sync.Mutex
	state   map[string]sandbox.State
	deleted []string
}

func (w *wakingSandboxes) Get(_ context.Context, id string) (*sandbox.Sandbox, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.state[id]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	return &sandbox.Sandbox{ID: id, State: st, StopReason: sandbox.StopIdle, Template: "app"}, nil
}

func (w *wakingSandboxes) Acquire(ctx context.Context, id string) (*sandbox.Sandbox, func(), error) {
	time.Sleep(5 * time.Millisecond) // a start takes a while: concurrent requests overlap
	w.mu.Lock()
	w.state[id] = sandbox.StateRunning
	w.mu.Unlock()
	sb, err := w.Get(ctx, id)
	return sb, func() {}, err
}

func (w *wakingSandboxes) Create(_ context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	return &sandbox.Sandbox{ID: "sb-new", State: sandbox.StateRunning, Template: o.Template}, nil
}

func (w *wakingSandboxes) Delete(_ context.Context, id string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deleted = append(w.deleted, id)
	return nil
}

// startCounter is an E2BTemplates whose Start counts (and fails when fail is set).
type startCounter struct {
	fakeE2BTemplates
	starts atomic.Int32
	fail   error
}

func (c *startCounter) Start(_ context.Context, id string, labels map[string]string, _ time.Duration) error {
	if labels[build.LabelE2BStart] == "" {
		return errors.New("Start without a start command")
	}
	c.starts.Add(1)
	return c.fail
}

// TestTemplateStartPaths: the start command of a sandbox's template runs once when a
// request wakes a sandbox stopped for idleness (five at once: once), not on a thaw of a
// frozen one; and on a native POST /v1/sandboxes, whose failure deletes the sandbox and
// fails the create.
func TestTemplateStartPaths(t *testing.T) {
	sbs := &wakingSandboxes{state: map[string]sandbox.State{"sb-idle": sandbox.StateStopped, "sb-frozen": sandbox.StatePaused}}
	fs := &tmplStore{list: map[string]v1.Template{"app": {Name: "app", Source: "e2b template",
		Labels: map[string]string{build.LabelE2BStart: "serve", build.LabelE2BReady: "check"}}}}
	sc := &startCounter{fakeE2BTemplates: fakeE2BTemplates{files: map[string][]byte{}}}
	s := New(Deps{Sandboxes: sbs, Templates: fs, Log: slog.New(slog.DiscardHandler)})
	s.SetE2BTemplates(sc)
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, release, err := s.acquireStarting(ctx, &sandbox.Sandbox{ID: "sb-idle", State: sandbox.StateStopped, StopReason: sandbox.StopIdle})
			if err != nil || sb.State != sandbox.StateRunning {
				t.Errorf("acquireStarting: %v %+v", err, sb)
				return
			}
			release()
		}()
	}
	wg.Wait()
	if n := sc.starts.Load(); n != 1 {
		t.Errorf("start command ran %d times for one fresh start, want 1", n)
	}
	if _, _, err := s.acquireStarting(ctx, &sandbox.Sandbox{ID: "sb-frozen", State: sandbox.StatePaused, StopReason: sandbox.StopIdle}); err != nil {
		t.Fatal(err)
	}
	if n := sc.starts.Load(); n != 1 {
		t.Errorf("a thaw ran the start command (%d runs)", n)
	}
	s.e2bt.mu.Lock()
	if len(s.e2bt.waking) != 0 {
		t.Errorf("wake locks left: %v", s.e2bt.waking)
	}
	s.e2bt.mu.Unlock()

	api := httptest.NewServer(s.Handler(nil))
	defer api.Close()
	post := func() (int, string) {
		resp, err := http.Post(api.URL+"/v1/sandboxes", "application/json", strings.NewReader(`{"template":"app"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	if code, body := post(); code != http.StatusCreated || sc.starts.Load() != 2 {
		t.Errorf("native create: %d %s, %d start runs (want 2)", code, body, sc.starts.Load())
	}
	sc.fail = fmt.Errorf("ready check did not pass: %w", errdefs.ErrUnavailable)
	if code, body := post(); code != http.StatusServiceUnavailable || !strings.Contains(body, "ready check did not pass") {
		t.Errorf("native create with a failing start command: %d %s, want 503", code, body)
	}
	sbs.mu.Lock()
	if len(sbs.deleted) != 1 || sbs.deleted[0] != "sb-new" {
		t.Errorf("deleted after the failed start: %v", sbs.deleted)
	}
	sbs.mu.Unlock()
}
