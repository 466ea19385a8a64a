package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/sdk"
)

// storedSandboxes keeps sandbox records in the real store; Create records the caller as
// owner, as the manager does. Lifecycle operations change the stored record, so a test
// reads what a refused request did (nothing) from the store.
type storedSandboxes struct {
	fakeSandboxes
	st *store.Store
	n  int
	mu sync.Mutex
}

func (s *storedSandboxes) Create(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	s.mu.Lock()
	s.n++
	id := fmt.Sprintf("sb-%012d", s.n)
	s.mu.Unlock()
	now := time.Now().UTC()
	sb := &sandbox.Sandbox{ID: id, State: sandbox.StateRunning, Runtime: "runc", Metadata: o.Metadata,
		AccessToken: "token-of-" + id, Owner: sandbox.CallerFrom(ctx).Owner(), CreatedAt: now, UpdatedAt: now}
	return sb, s.st.Insert(ctx, sb)
}
func (s *storedSandboxes) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.st.Get(ctx, id)
}
func (s *storedSandboxes) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	return s.st.List(ctx)
}
func (s *storedSandboxes) to(ctx context.Context, id string, st sandbox.State) (*sandbox.Sandbox, error) {
	return s.st.Update(ctx, id, func(sb *sandbox.Sandbox) error { sb.State = st; return nil })
}
func (s *storedSandboxes) Stop(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.to(ctx, id, sandbox.StateStopped)
}
func (s *storedSandboxes) Start(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.to(ctx, id, sandbox.StateRunning)
}
func (s *storedSandboxes) Pause(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.to(ctx, id, sandbox.StatePaused)
}
func (s *storedSandboxes) Resume(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.to(ctx, id, sandbox.StateRunning)
}
func (s *storedSandboxes) Delete(ctx context.Context, id string) error {
	return s.st.Delete(ctx, id)
}
func (s *storedSandboxes) Check(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return s.st.Get(ctx, id)
}
func (s *storedSandboxes) SetPolicy(ctx context.Context, id string, u sandbox.PolicyUpdate) (*sandbox.Sandbox, int, error) {
	sb, err := s.st.Update(ctx, id, func(sb *sandbox.Sandbox) error { sb.Policy = u.Spec; return nil })
	return sb, 0, err
}
func (s *storedSandboxes) SetTimeout(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error) {
	return s.st.Update(ctx, id, func(sb *sandbox.Sandbox) error {
		exp := time.Now().Add(d)
		sb.ExpiresAt = &exp
		return nil
	})
}
func (s *storedSandboxes) Metrics(ctx context.Context, id string) (sandbox.Metric, error) {
	_, err := s.st.Get(ctx, id)
	return sandbox.Metric{Time: time.Now()}, err
}

// noEvents serves empty logs.
type noEvents struct{}

func (noEvents) Events(context.Context, string) ([]v1.Event, error) { return []v1.Event{}, nil }
func (noEvents) Egress(context.Context, string, int64, int) ([]v1.EgressEntry, error) {
	return nil, nil
}

// TestSandboxOwnership: over TCP an API key sees and acts on only the sandboxes it created:
// another key's sandbox and the operator's answer every route that names a sandbox, native
// and E2B, with the 404 of a sandbox that does not exist, and are missing from its lists;
// nothing reaches those sandboxes' moat-init and their records stay as they were. The key
// uses its own; the operator (unix socket) uses all, a deleted key's included.
func TestSandboxOwnership(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var (
		mu   sync.Mutex
		seen []string // "sandbox path" of every request that reached a moat-init
	)
	envd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+" "+r.URL.Path)
		mu.Unlock()
		fmt.Fprint(w, "{}")
	}))
	defer envd.Close()
	reached := func(id string) []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.DeleteFunc(slices.Clone(seen), func(s string) bool { return !strings.HasPrefix(s, id+" ") })
	}
	sbs := &storedSandboxes{fakeSandboxes: fakeSandboxes{envd: envd}, st: st}
	s := New(Deps{Sandboxes: sbs, Events: noEvents{}, Keys: storeKeys{st}, Log: slog.New(slog.DiscardHandler)})
	chs := &fakeChanges{}
	s.SetChanges(chs)
	unix := httptest.NewServer(s.Handler(nil))
	defer unix.Close()
	tcp := httptest.NewServer(s.Handler(st))
	defer tcp.Close()

	ctx := context.Background()
	op := sdk.NewHTTP(unix.URL, "")
	keyA, err := op.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := op.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(c *sdk.Client) string {
		sb, err := c.Create(ctx, v1.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID
	}
	ofA, ofOp := mk(sdk.NewHTTP(tcp.URL, keyA.Key)), mk(op)
	if sb, _ := st.Get(ctx, ofA); sb.Owner != keyA.ID {
		t.Fatalf("key A's sandbox is owned by %q, want %s", sb.Owner, keyA.ID)
	}
	if sb, _ := st.Get(ctx, ofOp); sb.Owner != "" {
		t.Fatalf("the operator's sandbox is owned by %q", sb.Owner)
	}

	// Every route of the table that names a sandbox.
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/%s", ""},
		{"GET", "/v1/sandboxes/%s/events", ""},
		{"GET", "/v1/sandboxes/%s/egress", ""},
		{"PUT", "/v1/sandboxes/%s/policy", `{"phase":"run"}`},
		{"POST", "/v1/sandboxes/%s/envd/process.Process/Start", `{}`},
		{"GET", "/v1/sandboxes/%s/envd/files?path=/etc/passwd", ""},
		{"POST", "/v1/sandboxes/%s/pause", ""},
		{"POST", "/v1/sandboxes/%s/resume", ""},
		{"POST", "/v1/sandboxes/%s/stop", ""},
		{"POST", "/v1/sandboxes/%s/start", ""},
		{"GET", "/sandboxes/%s", ""},
		{"POST", "/sandboxes/%s/connect", `{"timeout":60}`},
		{"POST", "/v2/sandboxes/%s/connect", `{}`},
		{"POST", "/sandboxes/%s/resume", `{}`},
		{"POST", "/sandboxes/%s/timeout", `{"timeout":60}`},
		{"POST", "/sandboxes/%s/refreshes", `{}`},
		{"POST", "/sandboxes/%s/pause", `{}`},
		{"GET", "/sandboxes/%s/metrics", ""},
		{"PUT", "/sandboxes/%s/network", `{"allow_internet_access":true}`},
		{"DELETE", "/sandboxes/%s", ""},
		{"POST", "/sandboxes/%s/snapshots", `{"name":"x"}`},
		{"POST", "/sandboxes/%s/fork", `{"count":1}`},
		{"POST", "/v1/sandboxes/%s/snapshot", `{}`},
		{"POST", "/v1/sandboxes/%s/fork", `{}`},
		{"POST", "/v1/sandboxes/%s/restore", `{"snapshot":"snap-x"}`},
		{"GET", "/v1/sandboxes/%s/changes", ""},
		{"GET", "/v1/sandboxes/%s/changes/ch-0123abcd", ""},
		{"GET", "/v1/sandboxes/%s/changes/ch-0123abcd/patch", ""},
		{"POST", "/v1/sandboxes/%s/changes/ch-0123abcd/approve", `{}`},
		{"POST", "/v1/sandboxes/%s/changes/ch-0123abcd/deny", `{}`},
		{"DELETE", "/v1/sandboxes/%s", ""},
	}
	for _, id := range []string{ofA, ofOp} {
		before, _ := st.Get(ctx, id)
		for _, rt := range routes {
			for _, hdr := range []string{"Authorization", "X-API-KEY"} {
				req, _ := http.NewRequest(rt.method, tcp.URL+fmt.Sprintf(rt.path, id), strings.NewReader(rt.body))
				v := keyB.Key
				if hdr == "Authorization" {
					v = "Bearer " + v
				}
				req.Header.Set(hdr, v)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var body struct {
					Message         string
					EnvdAccessToken string
					SandboxID       string `json:"sandboxID"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != 404 || body.Message != fmt.Sprintf("sandbox %q: not found", id) {
					t.Errorf("key B %s %s: %d %+v, want the 404 of a missing sandbox", rt.method, fmt.Sprintf(rt.path, id), resp.StatusCode, body)
				}
			}
		}
		if r := reached(id); len(r) != 0 {
			t.Errorf("key B's requests reached moat-init of %s: %v", id, r)
		}
		after, err := st.Get(ctx, id)
		if err != nil || after.State != before.State || after.ExpiresAt != nil || after.Policy != nil || !after.UpdatedAt.Equal(before.UpdatedAt) {
			t.Errorf("key B's requests changed %s: %+v (%v)", id, after, err)
		}
	}
	if n := chs.count(); n != 0 {
		t.Errorf("key B's requests reached the change records %d times", n)
	}
	// The 404 is the one of an id nobody has.
	if code, body := call(t, "GET", tcp.URL+"/v1/sandboxes/sb-000000000999", keyB.Key, nil); code != 404 || !strings.Contains(body, `sandbox \"sb-000000000999\": not found`) {
		t.Errorf("missing sandbox: %d %s", code, body)
	}

	listed := func(url, key, path string) []string {
		t.Helper()
		code, body := call(t, "GET", url+path, key, nil)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		var list []struct {
			ID  string `json:"id"`
			E2B string `json:"sandboxID"`
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range list {
			ids = append(ids, x.ID+x.E2B)
		}
		slices.Sort(ids)
		return ids
	}
	for _, path := range []string{"/v1/sandboxes", "/sandboxes", "/v2/sandboxes"} {
		if got := listed(tcp.URL, keyB.Key, path); len(got) != 0 {
			t.Errorf("key B lists %s: %v", path, got)
		}
		if got := listed(tcp.URL, keyA.Key, path); !slices.Equal(got, []string{ofA}) {
			t.Errorf("key A lists %s: %v, want its own", path, got)
		}
		if got := listed(unix.URL, "", path); len(got) != 2 {
			t.Errorf("the operator lists %s: %v, want both", path, got)
		}
	}

	// Key A uses its own sandbox, on both APIs; the E2B connect hands it the access token.
	code, body := call(t, "POST", tcp.URL+"/sandboxes/"+ofA+"/connect", keyA.Key, nil)
	if code != 200 || !strings.Contains(body, `"envdAccessToken":"token-of-`+ofA+`"`) {
		t.Errorf("key A connects to its sandbox: %d %s", code, body)
	}
	if code, body := call(t, "POST", tcp.URL+"/v1/sandboxes/"+ofA+"/envd/process.Process/Start", keyA.Key, nil); code != 200 || len(reached(ofA)) != 1 {
		t.Errorf("key A runs a process: %d %s; moat-init saw %v", code, body, reached(ofA))
	}
	for _, id := range []string{ofA, ofOp} {
		if code, body := call(t, "POST", tcp.URL+"/v1/sandboxes/"+id+"/stop", keyA.Key, nil); (id == ofA) != (code == 200) {
			t.Errorf("key A stops %s: %d %s", id, code, body)
		}
	}
	// A deleted key's sandbox stays, for the operator.
	if err := op.DeleteAPIKey(ctx, keyA.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ofA, ofOp} {
		if _, err := op.Start(ctx, id); err != nil {
			t.Errorf("the operator starts %s: %v", id, err)
		}
		if code, body := call(t, "GET", unix.URL+"/sandboxes/"+id, "", nil); code != 200 || !strings.Contains(body, `"envdAccessToken":"token-of-`+id+`"`) {
			t.Errorf("the operator gets %s: %d %s", id, code, body)
		}
		if code, body := call(t, "POST", unix.URL+"/v1/sandboxes/"+id+"/envd/process.Process/Start", "", nil); code != 200 {
			t.Errorf("the operator runs a process in %s: %d %s", id, code, body)
		}
		if err := op.Delete(ctx, id); err != nil {
			t.Errorf("the operator deletes %s: %v", id, err)
		}
	}
	// The operator still reads a deleted sandbox's events (the audit of its credential use).
	if code, body := call(t, "GET", unix.URL+"/v1/sandboxes/"+ofA+"/events", "", nil); code != 200 {
		t.Errorf("the operator reads the events of deleted %s: %d %s", ofA, code, body)
	}
	if len(reached(ofA)) != 2 || len(reached(ofOp)) != 1 {
		t.Errorf("moat-init saw %v and %v", reached(ofA), reached(ofOp))
	}
}
