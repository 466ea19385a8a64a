package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
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

// TestE2BMayWrite: through the E2B API a caller may build over, tag, untag or delete only
// templates the E2B builder made (never a built-in, an operator's template, or an E2B
// mapping name), and of those only its own (owner label), unless it is an admin key or the
// operator; a template without an owner is the operator's.
func TestE2BMayWrite(t *testing.T) {
	aliases := map[string]string{"base": "debian"}
	keyA := sandbox.Caller{APIKey: "key-aaaa"}
	keyB := sandbox.Caller{APIKey: "key-bbbb"}
	admin := sandbox.Caller{APIKey: "key-cccc", Admin: true}
	op := sandbox.Caller{Operator: true}
	owned := func(name, source, owner string) *v1.Template {
		return &v1.Template{Name: name, Source: source, Labels: map[string]string{build.LabelE2BOwner: owner}}
	}
	for _, c := range []struct {
		name     string
		existing *v1.Template
		caller   sandbox.Caller
		ok       bool
	}{
		{"new-one", nil, keyB, true},
		{"mine", owned("mine", "e2b template", "key-aaaa"), keyA, true},
		{"mine.v1", owned("mine.v1", "e2b tag of mine", "key-aaaa"), keyA, true},
		{"mine", owned("mine", "e2b template", "key-aaaa"), keyB, false},
		{"mine.v1", owned("mine.v1", "e2b tag of mine", "key-aaaa"), keyB, false},
		{"mine", owned("mine", "e2b template", "key-aaaa"), admin, true},
		{"mine", owned("mine", "e2b template", "key-aaaa"), op, true},
		{"unowned", &v1.Template{Name: "unowned", Source: "e2b template"}, keyA, false},
		{"unowned", &v1.Template{Name: "unowned", Source: "e2b template"}, sandbox.Caller{}, false},
		{"ops", owned("ops", "e2b steps s.yaml", "operator"), keyA, false},
		{"ops", owned("ops", "e2b steps s.yaml", "operator"), admin, true},
		{"ops", owned("ops", "e2b steps s.yaml", "operator"), op, true},
		{"base", nil, op, false},
		{"host", &v1.Template{Name: "host", Source: "host", Builtin: true}, admin, false},
		{"debian", &v1.Template{Name: "debian", Source: "debootstrap bookworm"}, op, false},
		{"df", owned("df", "dockerfile Dockerfile", "key-aaaa"), keyA, false},
		{"sneaky", owned("sneaky", "e2bX", "key-aaaa"), keyA, false},
	} {
		err := e2bMayWrite(c.name, c.existing, aliases, c.caller)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%s (%+v) by %+v: %v, want ok=%v", c.name, c.existing, c.caller, err, c.ok)
		}
	}
	for _, c := range []struct {
		existing *v1.Template
		caller   sandbox.Caller
		want     string
	}{
		{nil, keyA, "key-aaaa"},
		{nil, op, "operator"},
		{owned("mine", "e2b template", "key-aaaa"), admin, "key-aaaa"},
		{owned("mine", "e2b template", "key-aaaa"), op, "key-aaaa"},
		{&v1.Template{Name: "old", Source: "e2b template"}, admin, "operator"},
	} {
		if got := e2bBuildOwner(c.existing, c.caller); got != c.want {
			t.Errorf("e2bBuildOwner(%+v, %+v) = %q, want %q", c.existing, c.caller, got, c.want)
		}
	}
}

func TestE2BNames(t *testing.T) {
	for ref, want := range map[string]string{"app": "app", "app:v1": "app.v1", "app:default": "app", "snap-1": "snap-1"} {
		if got := e2bTaggedName(ref); got != want {
			t.Errorf("e2bTaggedName(%q) = %q, want %q", ref, got, want)
		}
	}
	for msg, want := range map[string]int{"step 3/9: RUN x": 3, "step 10/12: using cached layer abc": 10, "  output": 0, "step x/2: y": 0, "template t is ready": 0} {
		n, _, ok := e2bStepOf(msg)
		if n != want || ok != (want > 0) {
			t.Errorf("e2bStepOf(%q) = %d %v, want %d", msg, n, ok, want)
		}
	}
}

// fakeE2BTemplates records uploads and builds.
type fakeE2BTemplates struct {
	mu       sync.Mutex
	files    map[string][]byte
	fail     error // of Build
	progress []string
}

func (f *fakeE2BTemplates) FilesPresent(scope, h string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.files[scope+"/"+h]
	return ok
}

func (f *fakeE2BTemplates) PutFiles(_ context.Context, scope, h string, r io.Reader, max int64) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[scope+"/"+h] = b
	return nil
}

func (f *fakeE2BTemplates) Build(_ context.Context, _, name string, _ *build.E2BTemplate, progress func(string)) (v1.Template, *v1.BuildReport, error) {
	for _, p := range f.progress {
		progress(p)
	}
	return v1.Template{Name: name}, &v1.BuildReport{}, f.fail
}

func (f *fakeE2BTemplates) Start(context.Context, string, map[string]string, time.Duration) error {
	return nil
}
func (f *fakeE2BTemplates) Tag(context.Context, string, string) error { return nil }
func (f *fakeE2BTemplates) BuildSteps(context.Context, v1.StepsRequest, func(string)) (v1.Template, *v1.BuildReport, error) {
	return v1.Template{}, nil, nil
}

type noTemplates struct{ Templates }

func (noTemplates) List(context.Context) ([]v1.Template, error) { return nil, nil }

// TestE2BUploadAndBuildStatus: the upload URL works once (a second PUT, an unknown token
// and an expired one are refused, and the receiver stores nothing for them); a failing
// build's status is "error" with the failing step (as E2B numbers it) and its output in
// the reason; logsOffset pages the log.
func TestE2BUploadAndBuildStatus(t *testing.T) {
	fake := &fakeE2BTemplates{files: map[string][]byte{}, fail: errors.New("RUN exited with code 3"),
		progress: []string{"step 1/2: RUN ok", "  fine", "step 1/2: done in 1ms (layer x)", "step 2/2: RUN bad", "  the output", "  more output"}}
	s := New(Deps{Sandboxes: &fakeSandboxes{}, Templates: noTemplates{}, Log: slog.New(slog.DiscardHandler)})
	s.SetE2BTemplates(fake)
	api := httptest.NewServer(s.Handler(keys{"good": true, "other": true}))
	defer api.Close()
	do := func(method, url, key, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	hash := strings.Repeat("ab", 32)
	code, link := do("GET", api.URL+"/templates/t1/files/"+hash, "good", "")
	if code != http.StatusCreated || link["present"] != false || !strings.HasPrefix(link["url"].(string), api.URL+"/e2b/uploads/") {
		t.Fatalf("file link: %d %v", code, link)
	}
	url := link["url"].(string)
	if code, _ := do("PUT", url, "", "first"); code != http.StatusOK {
		t.Fatalf("upload: %d", code)
	}
	if code, _ := do("PUT", url, "", "second"); code != http.StatusForbidden {
		t.Errorf("second use of the upload URL: %d, want 403", code)
	}
	if code, _ := do("PUT", api.URL+"/e2b/uploads/"+strings.Repeat("0", 64), "", "guess"); code != http.StatusForbidden {
		t.Errorf("unknown token: %d, want 403", code)
	}
	// An expired token.
	s.e2bt.mu.Lock()
	s.e2bt.uploads["old"] = e2bUpload{template: "t1", hash: strings.Repeat("cd", 32), expires: time.Now().Add(-time.Second)}
	s.e2bt.mu.Unlock()
	if code, _ := do("PUT", api.URL+"/e2b/uploads/old", "", "late"); code != http.StatusForbidden {
		t.Errorf("expired token: %d, want 403", code)
	}
	fake.mu.Lock()
	scopeGood := e2bUploadScope(sandbox.Caller{APIKey: "key-good"})
	if string(fake.files[scopeGood+"/"+hash]) != "first" || len(fake.files) != 1 {
		t.Errorf("stored uploads: %q", fake.files)
	}
	fake.mu.Unlock()
	if code, link := do("GET", api.URL+"/templates/t1/files/"+hash, "good", ""); code != http.StatusCreated || link["present"] != true {
		t.Errorf("file link after the upload: %d %v", code, link)
	}
	// Another key's files of the same claimed hash are not these: it must upload its own.
	if code, link := do("GET", api.URL+"/templates/t1/files/"+hash, "other", ""); code != http.StatusCreated || link["present"] != false {
		t.Errorf("another key's file link: %d %v", code, link)
	}

	code, req := do("POST", api.URL+"/v3/templates", "good", `{"name":"t1:v2","cpuCount":2,"memoryMB":1024}`)
	if code != http.StatusAccepted || req["templateID"] != "t1" || req["tags"].([]any)[0] != "v2" {
		t.Fatalf("request build: %d %v", code, req)
	}
	bid := req["buildID"].(string)
	steps := `{"fromTemplate":"host","steps":[{"type":"RUN","args":["ok"]},{"type":"RUN","args":["bad"]}]}`
	if code, out := do("POST", api.URL+"/v2/templates/t1/builds/"+bid, "good", steps); code != http.StatusAccepted {
		t.Fatalf("start build: %d %v", code, out)
	}
	if code, _ := do("POST", api.URL+"/v2/templates/t1/builds/"+bid, "other", steps); code != http.StatusNotFound {
		t.Errorf("another key starting the build: %d, want 404", code)
	}
	if code, _ := do("POST", api.URL+"/v2/templates/t1/builds/"+bid, "good", steps); code != http.StatusConflict {
		t.Errorf("second start of the build: %d, want 409", code)
	}
	var st map[string]any
	for deadline := time.Now().Add(5 * time.Second); ; {
		_, st = do("GET", api.URL+"/templates/t1/builds/"+bid+"/status?logsOffset=0", "good", "")
		if st["status"] == "error" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	reason, _ := st["reason"].(map[string]any)
	if st["status"] != "error" || reason == nil || reason["step"] != "2" || !strings.Contains(reason["message"].(string), "code 3\nthe output\nmore output") {
		t.Fatalf("status: %v", st)
	}
	all := len(st["logEntries"].([]any))
	_, st = do("GET", api.URL+"/templates/t1/builds/"+bid+"/status?logsOffset=4", "good", "")
	if n := len(st["logEntries"].([]any)); n != all-4 {
		t.Errorf("logsOffset=4 gave %d entries of %d", n, all)
	}
	// moat template ls shows the failed build (GET /v1/templates).
	req2, _ := http.NewRequest("GET", api.URL+"/v1/templates", nil)
	req2.Header.Set("X-API-KEY", "good")
	resp, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	var list []v1.Template
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list) != 1 || list[0].Name != "t1" || list[0].Source != "e2b build "+bid[:8]+": failed at step 2" {
		t.Errorf("template list: %+v", list)
	}
	if code, _ := do("GET", api.URL+"/templates/t1/builds/"+bid+"/status", "", ""); code != http.StatusUnauthorized {
		t.Errorf("status without a key: %d", code)
	}
}
