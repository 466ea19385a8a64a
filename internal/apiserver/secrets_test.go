package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/sdk"
)

// memSecrets is an in-memory secret store with the real store's rules.
type memSecrets struct {
	mu   sync.Mutex
	vals map[string]secrets.Value
	info map[string]v1.SecretInfo
}

func newMemSecrets() *memSecrets {
	return &memSecrets{vals: map[string]secrets.Value{}, info: map[string]v1.SecretInfo{}}
}

func (m *memSecrets) SetSecret(ctx context.Context, name string, v secrets.Value, _ *v1.GitHubApp, scope *v1.SecretScope) error {
	if err := secrets.CheckName(name); err != nil {
		return err
	}
	if v.Empty() || len(v.Reveal()) > secrets.MaxValueBytes {
		return fmt.Errorf("secret %s: the value is empty or too large: %w", name, errdefs.ErrInvalidArgument)
	}
	sc, err := memScope(scope)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now().UTC()
	in, ok := m.info[name]
	if !ok {
		in = v1.SecretInfo{Name: name, Created: now}
	}
	if sc != nil {
		in.Scope = sc
	}
	in.Updated = now
	m.info[name], m.vals[name] = in, v
	return nil
}

func (m *memSecrets) SetSecretScope(ctx context.Context, name string, scope v1.SecretScope) error {
	sc, err := memScope(&scope)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	in, ok := m.info[name]
	if !ok {
		return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	in.Scope = sc
	m.info[name] = in
	return nil
}

// memScope checks a scope as the real store does.
func memScope(in *v1.SecretScope) (*v1.SecretScope, error) {
	if in == nil {
		return nil, nil
	}
	n, err := secrets.Scope{Hosts: in.Hosts, Methods: in.Methods, PathPrefix: in.PathPrefix, PlainHTTP: in.PlainHTTP, Repositories: in.Repositories, Headers: in.Headers}.Normalize()
	if err != nil {
		return nil, err
	}
	return &v1.SecretScope{Hosts: n.Hosts, Methods: n.Methods, PathPrefix: n.PathPrefix, PlainHTTP: n.PlainHTTP, Repositories: n.Repositories, Headers: n.Headers}, nil
}

func (m *memSecrets) ListSecrets(ctx context.Context) ([]v1.SecretInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []v1.SecretInfo
	for _, in := range m.info {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *memSecrets) DeleteSecret(ctx context.Context, name string) error {
	if err := secrets.CheckName(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.info[name]; !ok {
		return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	delete(m.info, name)
	delete(m.vals, name)
	return nil
}

func (m *memSecrets) value(name string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vals[name]
	return v.Reveal(), ok
}

// secretsServer serves the API with sec on a unix-socket handler (no auth) and a TCP
// handler (API key "good"); the daemon's log goes to the returned buffer.
func secretsServer(t *testing.T, sec Secrets) (unix, tcp *httptest.Server, log *secretLog) {
	log = &secretLog{}
	s := New(Deps{Sandboxes: &fakeSandboxes{}, Secrets: sec, Log: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	unix = httptest.NewServer(s.Handler(nil))
	t.Cleanup(unix.Close)
	tcp = httptest.NewServer(s.Handler(keys{"good": true}))
	t.Cleanup(tcp.Close)
	return unix, tcp, log
}

type secretLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *secretLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *secretLog) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func secretCall(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSecretRoutes(t *testing.T) {
	sec := newMemSecrets()
	api, _, log := secretsServer(t, sec)

	if code, body := secretCall(t, "GET", api.URL+"/v1/secrets", "", ""); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("empty list: %d %s", code, body)
	}
	if code, body := secretCall(t, "PUT", api.URL+"/v1/secrets/GITHUB_TOKEN", "", `{"value":"ghp_first"}`); code != 204 || body != "" {
		t.Fatalf("PUT: %d %s", code, body)
	}
	// Replace; JSON escapes decode to the bytes they stand for.
	if code, body := secretCall(t, "PUT", api.URL+"/v1/secrets/GITHUB_TOKEN", "", `{"value":"ghp_\u00e9\n\"x"}`); code != 204 {
		t.Fatalf("PUT again: %d %s", code, body)
	}
	if v, _ := sec.value("GITHUB_TOKEN"); v != "ghp_é\n\"x" {
		t.Fatalf("stored %q", v)
	}
	_, _ = secretCall(t, "PUT", api.URL+"/v1/secrets/A_KEY", "", `{"value":"other-value"}`)

	code, body := secretCall(t, "GET", api.URL+"/v1/secrets", "", "")
	var list []v1.SecretInfo
	if err := json.Unmarshal([]byte(body), &list); err != nil || code != 200 || len(list) != 2 || list[0].Name != "A_KEY" || list[1].Name != "GITHUB_TOKEN" || list[1].Created.IsZero() {
		t.Fatalf("list: %d %s", code, body)
	}
	if strings.Contains(body, "ghp_") || strings.Contains(body, "other-value") || strings.Contains(body, "value") {
		t.Fatalf("the list shows values: %s", body)
	}

	if code, body := secretCall(t, "DELETE", api.URL+"/v1/secrets/GITHUB_TOKEN", "", ""); code != 204 {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if code, body := secretCall(t, "DELETE", api.URL+"/v1/secrets/GITHUB_TOKEN", "", ""); code != 404 || !strings.Contains(body, `"not_found"`) {
		t.Fatalf("DELETE again: %d %s", code, body)
	}
	if code, body := secretCall(t, "DELETE", api.URL+"/v1/secrets/bad-name", "", ""); code != 400 {
		t.Fatalf("DELETE of an invalid name: %d %s", code, body)
	}
	if _, ok := sec.value("GITHUB_TOKEN"); ok {
		t.Fatal("still stored after DELETE")
	}
	if l := log.String(); strings.Contains(l, "ghp_") || strings.Contains(l, "other-value") {
		t.Fatalf("the daemon log holds a value: %s", l)
	}
}

// TestSetSecretBadInput: every refusal is a 400 whose message (and the daemon's log) holds
// nothing of what was sent.
func TestSetSecretBadInput(t *testing.T) {
	const canary = "Sup3rS3cret"
	sec := newMemSecrets()
	api, _, log := secretsServer(t, sec)
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"truncated", "/v1/secrets/A", `{"value": "` + canary, "want one JSON object"},
		{"bad escape", "/v1/secrets/A", `{"value": "` + canary + `\q"}`, "want one JSON object"},
		{"bad character", "/v1/secrets/A", `{"value": ` + canary + `}`, "want one JSON object"},
		{"not a string", "/v1/secrets/A", `{"value": 1` + "2" + `}`, "want one JSON object"},
		{"unknown field", "/v1/secrets/A", `{"` + canary + `": "x"}`, "want one JSON object"},
		{"two objects", "/v1/secrets/A", `{"value": "x"} {"value": "` + canary + `"}`, "want one JSON object"},
		{"trailing garbage", "/v1/secrets/A", `{"value": "x"} ` + canary, "want one JSON object"},
		{"array", "/v1/secrets/A", `["` + canary + `"]`, "want one JSON object"},
		{"empty body", "/v1/secrets/A", ``, "want one JSON object"},
		{"empty value", "/v1/secrets/A", `{"value": ""}`, "empty"},
		{"no value", "/v1/secrets/A", `{}`, "empty"},
		{"value too large", "/v1/secrets/A", `{"value": "` + strings.Repeat(canary, secrets.MaxValueBytes/len(canary)+1) + `"}`, "too large"},
		{"body too large", "/v1/secrets/A", `{"value": "` + strings.Repeat(canary, maxSecretBody/len(canary)+1) + `"}`, "request body larger than"},
		{"name looks like a value", "/v1/secrets/" + strings.ToLower(canary), `{"value": "x"}`, secrets.NameRule},
		{"name too long", "/v1/secrets/" + strings.Repeat("A", 65), `{"value": "` + canary + `"}`, secrets.NameRule},
	} {
		code, body := secretCall(t, "PUT", api.URL+tc.path, "", tc.body)
		var e v1.Error
		if err := json.Unmarshal([]byte(body), &e); err != nil || code != 400 || e.Code != "invalid_argument" || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.name, code, body, tc.want)
		}
		if strings.Contains(strings.ToLower(body), strings.ToLower(canary)) {
			t.Errorf("%s: the answer echoes the input: %s", tc.name, body)
		}
	}
	if list, _ := sec.ListSecrets(context.Background()); len(list) != 0 {
		t.Fatalf("stored: %v", list)
	}
	if strings.Contains(strings.ToLower(log.String()), strings.ToLower(canary)) {
		t.Fatalf("the daemon log holds the input: %s", log.String())
	}

	// The largest value, sent entirely as \u escapes, fits.
	big := strings.Repeat(`\u0001`, secrets.MaxValueBytes)
	if code, body := secretCall(t, "PUT", api.URL+"/v1/secrets/BIG", "", `{ "value" : "`+big+`" }`); code != 204 {
		t.Fatalf("largest value: %d %s", code, body)
	}
	if v, _ := sec.value("BIG"); len(v) != secrets.MaxValueBytes {
		t.Fatalf("largest value stored as %d bytes", len(v))
	}
}

// TestSecretsUnixSocketOnly: a TCP client, even with a valid API key, can neither set, list
// nor delete secrets.
func TestSecretsUnixSocketOnly(t *testing.T) {
	sec := newMemSecrets()
	_ = sec.SetSecret(context.Background(), "KEEP", secrets.NewValue("v"), nil, nil)
	_, tcp, _ := secretsServer(t, sec)
	for _, key := range []string{"good", "", "bad"} {
		for _, req := range [][3]string{
			{"GET", "/v1/secrets", ""},
			{"PUT", "/v1/secrets/NEW", `{"value":"x"}`},
			{"PUT", "/v1/secrets/KEEP", `{"value":"x"}`},
			{"DELETE", "/v1/secrets/KEEP", ""},
			{"PUT", "/v1/secrets/KEEP/scope", `{"hosts":["evil.test"]}`},
		} {
			code, body := secretCall(t, req[0], tcp.URL+req[1], key, req[2])
			want := 401 // no key or a bad one
			if key == "good" {
				want = 403 // a valid key, on a route for the unix socket only
			}
			if code != want || strings.Contains(body, "KEEP") {
				t.Errorf("TCP %s %s (key %q): %d %s", req[0], req[1], key, code, body)
			}
		}
	}
	if v, ok := sec.value("KEEP"); !ok || v != "v" {
		t.Fatal("a TCP client changed a secret")
	}
	if list, _ := sec.ListSecrets(context.Background()); list[0].Scope != nil {
		t.Fatalf("a TCP client gave a secret a scope: %+v", list[0].Scope)
	}
	if _, ok := sec.value("NEW"); ok {
		t.Fatal("a TCP client made a secret")
	}
}

// TestSecretsSDK: the Go SDK against these handlers.
func TestSecretsSDK(t *testing.T) {
	sec := newMemSecrets()
	api, _, _ := secretsServer(t, sec)
	c := sdk.NewHTTP(api.URL, "")
	ctx := context.Background()
	if list, err := c.Secrets(ctx); err != nil || len(list) != 0 || list == nil {
		t.Fatalf("Secrets: %#v, %v", list, err)
	}
	if err := c.SetSecret(ctx, "NPM_TOKEN", "npm_/?#%value", &v1.SecretScope{Hosts: []string{"registry.npmjs.org"}}); err != nil {
		t.Fatal(err)
	}
	if v, _ := sec.value("NPM_TOKEN"); v != "npm_/?#%value" {
		t.Fatalf("stored %q", v)
	}
	if list, err := c.Secrets(ctx); err != nil || len(list) != 1 || list[0].Name != "NPM_TOKEN" || list[0].Scope == nil || list[0].Scope.Hosts[0] != "registry.npmjs.org" {
		t.Fatalf("Secrets: %+v, %v", list, err)
	}
	// A new value without a scope keeps the scope; SetSecretScope replaces it.
	if err := c.SetSecret(ctx, "NPM_TOKEN", "npm_second", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.SetSecretScope(ctx, "NPM_TOKEN", v1.SecretScope{Hosts: []string{"*.NPMJS.org:8443"}, Methods: []string{"GET"}, PathPrefix: "/v1/"}); err != nil {
		t.Fatal(err)
	}
	list, _ := c.Secrets(ctx)
	if sc := list[0].Scope; sc == nil || strings.Join(sc.Hosts, ",") != "*.npmjs.org:8443" || strings.Join(sc.Methods, ",") != "GET" || sc.PathPrefix != "/v1/" {
		t.Fatalf("scope after SetSecretScope: %+v", list[0].Scope)
	}
	if v, _ := sec.value("NPM_TOKEN"); v != "npm_second" {
		t.Fatalf("SetSecretScope changed the value to %q", v)
	}
	for _, bad := range []v1.SecretScope{{}, {Hosts: []string{"https://x.test/"}}, {Hosts: []string{"*"}}, {Hosts: []string{"x.test"}, Methods: []string{"get"}}, {Hosts: []string{"x.test"}, PathPrefix: "/a/../b"}} {
		if err := c.SetSecretScope(ctx, "NPM_TOKEN", bad); !errors.Is(err, sdk.ErrInvalidArgument) {
			t.Errorf("SetSecretScope(%+v): %v, want invalid argument", bad, err)
		}
	}
	if err := c.SetSecretScope(ctx, "NOPE", v1.SecretScope{Hosts: []string{"x.test"}}); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("SetSecretScope of an unknown secret: %v", err)
	}
	if err := c.SetSecret(ctx, "../apikeys", "x", nil); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("SetSecret with a path in the name: %v", err)
	}
	if err := c.SetSecret(ctx, "EMPTY", "", nil); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Fatalf("SetSecret of an empty value: %v", err)
	}
	if err := c.DeleteSecret(ctx, "NPM_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSecret(ctx, "NPM_TOKEN"); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("DeleteSecret again: %v", err)
	}
}
