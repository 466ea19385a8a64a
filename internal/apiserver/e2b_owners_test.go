package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/build"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

// ownerKeys authenticates "a", "b" (plain keys) and "admin" (an admin key).
type ownerKeys struct{}

func (ownerKeys) Authenticate(_ context.Context, key string) (sandbox.Caller, error) {
	switch key {
	case "a", "b":
		return sandbox.Caller{APIKey: "key-" + key}, nil
	case "admin":
		return sandbox.Caller{APIKey: "key-admin", Admin: true}, nil
	}
	return sandbox.Caller{}, fmt.Errorf("invalid API key: %w", errdefs.ErrUnauthenticated)
}

// tmplStore is the receiver: the templates, as the daemon's storage would hold them (a
// build writes the labels its translation records, owner included; a tag copies them).
type tmplStore struct {
	Templates
	mu   sync.Mutex
	list map[string]v1.Template
}

// tmplBuilder is the E2B build side writing into a tmplStore.
type tmplBuilder struct {
	fakeE2BTemplates
	*tmplStore
}

func (f *tmplStore) snapshot() map[string]v1.Template {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.list)
}

func (f *tmplStore) List(context.Context) ([]v1.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return nil, nil
}

func (f *tmplStore) Get(_ context.Context, name string) (v1.Template, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.list[name]
	if !ok {
		return v1.Template{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	return t, nil
}

func (b *tmplBuilder) Build(_ context.Context, _, name string, tmpl *build.E2BTemplate, _ func(string)) (v1.Template, *v1.BuildReport, error) {
	_, steps, err := tmpl.Translate()
	if err != nil {
		return v1.Template{}, nil, err
	}
	labels := map[string]string{}
	for _, st := range steps {
		if st.Kind == build.Label {
			for _, v := range st.Vars {
				labels[v.Key] = v.Value
			}
		}
	}
	f := b.tmplStore
	f.mu.Lock()
	defer f.mu.Unlock()
	t := v1.Template{Name: name, Source: "e2b template", Labels: labels, Created: time.Now(), Layers: f.list[name].Layers + 1}
	f.list[name] = t
	return t, &v1.BuildReport{}, nil
}

func (b *tmplBuilder) Tag(_ context.Context, name, tagged string) error {
	f := b.tmplStore
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.list[name]
	t.Name, t.Source = tagged, "e2b tag of "+name
	f.list[tagged] = t
	return nil
}

func (f *tmplStore) Remove(_ context.Context, name string, _ bool) (v1.TemplateRemoval, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.list, name)
	return v1.TemplateRemoval{}, nil
}

func (f *tmplStore) BuildFile(context.Context, v1.DockerfileRequest, func(string)) (v1.Template, *v1.BuildReport, error) {
	return v1.Template{}, nil, nil
}

// TestE2BTemplateOwners: key A builds template app (owner A, recorded by the build);
// key B cannot build over it, tag it, untag its tag or delete it (403 naming the rule;
// the store's templates unchanged) but still finds it; an admin key may rebuild it and A
// stays the owner; A tags and deletes it.
func TestE2BTemplateOwners(t *testing.T) {
	fs := &tmplStore{list: map[string]v1.Template{}}
	s := New(Deps{Sandboxes: &fakeSandboxes{}, Templates: fs, Log: slog.New(slog.DiscardHandler)})
	s.SetE2BTemplates(&tmplBuilder{fakeE2BTemplates{files: map[string][]byte{}}, fs})
	s.SetTemplateAdmin(fs)
	api := httptest.NewServer(s.Handler(ownerKeys{}))
	defer api.Close()
	do := func(method, path, key, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, api.URL+path, strings.NewReader(body))
		req.Header.Set("X-API-KEY", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	buildAs := func(key, name string) int {
		t.Helper()
		code, body := do("POST", "/v3/templates", key, `{"name":"`+name+`"}`)
		if code != http.StatusAccepted {
			return code
		}
		var req struct{ BuildID string }
		_ = json.Unmarshal([]byte(body), &req)
		steps := `{"fromTemplate":"host","steps":[{"type":"RUN","args":["true"]}]}`
		if code, body := do("POST", "/v2/templates/"+name+"/builds/"+req.BuildID, key, steps); code != http.StatusAccepted {
			t.Fatalf("start build: %d %s", code, body)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			_, body := do("GET", "/templates/"+name+"/builds/"+req.BuildID+"/status", key, "")
			if strings.Contains(body, `"status":"ready"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("build of %s by %s: %s", name, key, body)
			}
		}
		return code
	}
	if code := buildAs("a", "app"); code != http.StatusAccepted {
		t.Fatalf("A building app: %d", code)
	}
	if code, body := do("POST", "/templates/tags", "a", `{"target":"app","tags":["v1"]}`); code != http.StatusCreated {
		t.Fatalf("A tagging app: %d %s", code, body)
	}
	before := fs.snapshot()
	if before["app"].Labels[build.LabelE2BOwner] != "key-a" || before["app.v1"].Labels[build.LabelE2BOwner] != "key-a" {
		t.Fatalf("owners recorded: %+v", before)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v3/templates", `{"name":"app"}`},
		{"POST", "/v3/templates", `{"name":"app:v1"}`},
		{"POST", "/v3/templates", `{"name":"other","tags":["x"]}`}, // fine alone; see below
		{"POST", "/templates/tags", `{"target":"app","tags":["v2"]}`},
		{"POST", "/templates/tags", `{"target":"app:v1","tags":["v3"]}`},
		{"DELETE", "/templates/tags", `{"name":"app","tags":["v1"]}`},
		{"DELETE", "/templates/app", ``},
		{"DELETE", "/templates/app:v1", ``},
	} {
		code, body := do(c.method, c.path, "b", c.body)
		if strings.Contains(c.body, "other") {
			if code != http.StatusAccepted {
				t.Errorf("B requesting a new template: %d %s", code, body)
			}
			continue
		}
		if code != http.StatusForbidden || !strings.Contains(body, "belongs to another API key") {
			t.Errorf("B: %s %s %s: %d %s, want 403", c.method, c.path, c.body, code, body)
		}
	}
	if after := fs.snapshot(); !maps.EqualFunc(before, after, func(x, y v1.Template) bool { return x.Layers == y.Layers && maps.Equal(x.Labels, y.Labels) }) {
		t.Errorf("the store changed under key B: before %+v after %+v", before, after)
	}
	if code, body := do("GET", "/templates/aliases/app", "b", ""); code != http.StatusOK {
		t.Errorf("B looking up app: %d %s", code, body)
	}
	if code := buildAs("admin", "app"); code != http.StatusAccepted {
		t.Fatalf("admin rebuilding app: %d", code)
	}
	if got := fs.snapshot()["app"]; got.Layers != 2 || got.Labels[build.LabelE2BOwner] != "key-a" {
		t.Errorf("after the admin's rebuild: %+v, want owner key-a, rebuilt", got)
	}
	if code, body := do("DELETE", "/templates/tags", "a", `{"name":"app","tags":["v1"]}`); code != http.StatusNoContent {
		t.Errorf("A untagging: %d %s", code, body)
	}
	if code, body := do("DELETE", "/templates/app", "a", ""); code != http.StatusNoContent {
		t.Errorf("A deleting app: %d %s", code, body)
	}
	if left := fs.snapshot(); len(left) != 0 {
		t.Errorf("left: %+v", left)
	}
}
