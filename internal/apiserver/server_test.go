package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// fakeSandboxes behaves like the manager for two sandboxes: "sb-running" and "sb-stopped",
// both created with the API key the test authenticator calls key-good.
// Its envd transport reaches a real HTTP server standing in for moat-init.
type fakeSandboxes struct {
	envd *httptest.Server
}

func (f *fakeSandboxes) get(id string) (*sandbox.Sandbox, error) {
	switch id {
	case "sb-running":
		return &sandbox.Sandbox{ID: id, State: sandbox.StateRunning, Runtime: "runc", AccessToken: "sandbox-token", Owner: "key-good"}, nil
	case "sb-stopped":
		return &sandbox.Sandbox{ID: id, State: sandbox.StateStopped, Runtime: "runc", AccessToken: "t2", Owner: "key-good"}, nil
	}
	return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}

func (f *fakeSandboxes) Create(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	if o.Runtime == "kata" {
		return nil, fmt.Errorf("runtime %q is not available (available: runc): %w", o.Runtime, errdefs.ErrNotFound)
	}
	return nil, fmt.Errorf("disk on fire")
}
func (f *fakeSandboxes) Get(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return f.get(id)
}
func (f *fakeSandboxes) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	a, _ := f.get("sb-running")
	b, _ := f.get("sb-stopped")
	return []*sandbox.Sandbox{a, b}, nil
}
func (f *fakeSandboxes) Stop(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return f.get(id)
}
func (f *fakeSandboxes) Start(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return nil, fmt.Errorf("sandbox %s is deleting: %w", id, errdefs.ErrConflict)
}
func (f *fakeSandboxes) Pause(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return f.get(id)
}
func (f *fakeSandboxes) Resume(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return f.get(id)
}
func (f *fakeSandboxes) Delete(ctx context.Context, id string) error {
	_, err := f.get(id)
	return err
}
func (f *fakeSandboxes) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	_, err := f.get(id)
	return sandbox.Usage{}, err
}
func (f *fakeSandboxes) DeleteStopped(ctx context.Context, id string) error {
	return f.Delete(ctx, id)
}
func (f *fakeSandboxes) Check(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	return f.get(id)
}
func (f *fakeSandboxes) SetPolicy(ctx context.Context, id string, u sandbox.PolicyUpdate) (*sandbox.Sandbox, int, error) {
	sb, err := f.get(id)
	return sb, 0, err
}
func (f *fakeSandboxes) SetTimeout(ctx context.Context, id string, d time.Duration) (*sandbox.Sandbox, error) {
	return f.get(id)
}
func (f *fakeSandboxes) Metrics(ctx context.Context, id string) (sandbox.Metric, error) {
	_, err := f.get(id)
	return sandbox.Metric{}, err
}
func (f *fakeSandboxes) EnvdTransport() http.RoundTripper {
	return &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("tcp", f.envd.Listener.Addr().String())
	}}
}

type keys map[string]bool

func (k keys) Authenticate(ctx context.Context, key string) (sandbox.Caller, error) {
	if k[key] {
		return sandbox.Caller{APIKey: "key-" + key}, nil
	}
	return sandbox.Caller{}, fmt.Errorf("invalid API key: %w", errdefs.ErrUnauthenticated)
}

func newTestServer(t *testing.T) (*httptest.Server, *httptest.Server, chan http.Header) {
	seen := make(chan http.Header, 10)
	envd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		fmt.Fprintf(w, "%s %s?%s", r.Method, r.URL.Path, r.URL.RawQuery)
	}))
	t.Cleanup(envd.Close)
	s := New(Deps{Sandboxes: &fakeSandboxes{envd: envd}, Log: slog.New(slog.DiscardHandler)})
	api := httptest.NewServer(s.Handler(keys{"good": true}))
	t.Cleanup(api.Close)
	return api, envd, seen
}

func call(t *testing.T, method, url, key string, hdr map[string]string) (int, string) {
	req, _ := http.NewRequest(method, url, strings.NewReader(`{}`))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAuthGate(t *testing.T) {
	api, _, _ := newTestServer(t)
	for _, c := range []struct {
		key  string
		want int
	}{{"", 401}, {"bad", 401}, {"good", 200}} {
		if code, body := call(t, "GET", api.URL+"/v1/sandboxes", c.key, nil); code != c.want {
			t.Errorf("key %q: %d %s", c.key, code, body)
		}
	}
	if code, _ := call(t, "POST", api.URL+"/v1/apikeys", "good", nil); code != 403 {
		t.Errorf("key management over TCP: %d", code)
	}
}

func TestErrorMapping(t *testing.T) {
	api, _, _ := newTestServer(t)
	for _, c := range []struct {
		method, path, body string
		status             int
		code, contains     string
	}{
		{"GET", "/v1/sandboxes/sb-nope", "", 404, "not_found", "sb-nope"},
		{"POST", "/v1/sandboxes/sb-running/start", "", 409, "conflict", "deleting"},
		{"GET", "/v1/nothing", "", 404, "not_found", "no route"},
		{"GET", "/v1/sandboxes/sb-stopped/envd/health", "", 409, "conflict", "stopped"},
	} {
		code, body := call(t, c.method, api.URL+c.path, "good", nil)
		var e v1.Error
		_ = json.Unmarshal([]byte(body), &e)
		if code != c.status || e.Code != c.code || !strings.Contains(e.Message, c.contains) {
			t.Errorf("%s %s: %d %s", c.method, c.path, code, body)
		}
	}
	req, _ := http.NewRequest("POST", api.URL+"/v1/sandboxes", strings.NewReader(`{"runtime":"kata"}`))
	req.Header.Set("Authorization", "Bearer good")
	resp, _ := http.DefaultClient.Do(req)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 404 || !strings.Contains(string(b), "available: runc") {
		t.Errorf("unknown runtime: %d %s", resp.StatusCode, b)
	}
	req, _ = http.NewRequest("POST", api.URL+"/v1/sandboxes", strings.NewReader(`{"runtime":"runc","bogus":1}`))
	req.Header.Set("Authorization", "Bearer good")
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 400 {
		t.Errorf("unknown field: %d", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", api.URL+"/v1/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer good")
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 500 {
		t.Errorf("unclassified error: %d", resp.StatusCode)
	}
}

// TestEnvdForward: the sandbox sees its own access token and the chosen user, never the
// client's API key.
func TestEnvdForward(t *testing.T) {
	api, _, seen := newTestServer(t)
	code, body := call(t, "GET", api.URL+"/v1/sandboxes/sb-running/envd/files?path=/a%20b", "good", map[string]string{UserHeader: "root"})
	if code != 200 || body != "GET /files?path=/a%20b" {
		t.Fatalf("forward: %d %q", code, body)
	}
	h := <-seen
	if h.Get("X-Access-Token") != "sandbox-token" {
		t.Errorf("access token not added: %v", h)
	}
	if got := h.Get("Authorization"); got != "Basic cm9vdDo=" {
		t.Errorf("Authorization toward the sandbox = %q (want only the user, never the API key)", got)
	}
	if h.Get(UserHeader) != "" {
		t.Errorf("user header leaked")
	}
	call(t, "GET", api.URL+"/v1/sandboxes/sb-running/envd/health", "good", nil)
	if h := <-seen; h.Get("Authorization") != "" {
		t.Errorf("API key forwarded to the sandbox: %q", h.Get("Authorization"))
	}
}

// TestEnvdForwardFixedLength: an RPC request with a chunked body reaches the sandbox with a
// fixed length (read whole by the daemon); an oversized one is refused.
func TestEnvdForwardFixedLength(t *testing.T) {
	var got []int64
	envd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.ContentLength)
		io.Copy(io.Discard, r.Body)
	}))
	defer envd.Close()
	s := New(Deps{Sandboxes: &fakeSandboxes{envd: envd}, Log: slog.New(slog.DiscardHandler)})
	api := httptest.NewServer(s.Handler(nil))
	defer api.Close()
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"process":{"cmd":"true"}}`))
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", api.URL+"/v1/sandboxes/sb-running/envd/process.Process/Start", pr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 1 || got[0] != int64(len(`{"process":{"cmd":"true"}}`)) {
		t.Errorf("upstream content lengths %v", got)
	}
	big := strings.NewReader(strings.Repeat("x", maxRPCBytes+1))
	req, _ = http.NewRequest("POST", api.URL+"/v1/sandboxes/sb-running/envd/process.Process/Start", big)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || len(got) != 1 {
		t.Errorf("oversized request: %d, upstream saw %d requests", resp.StatusCode, len(got))
	}
}
