package apiserver

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/egress/policy"
)

func ptr[T any](v T) *T { return &v }

func TestE2BPolicy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		internet *bool
		net      *e2bNetwork
		want     string // policy.String() of the run phase, or "nil" or "error:<field>"
	}{
		{"nothing given: moat's default", nil, nil, "nil"},
		{"internet off", ptr(false), nil, "deny-all"},
		{"internet on", ptr(true), nil, "allow-all"},
		{"internet on, some denied", ptr(true), &e2bNetwork{DenyOut: []string{"evil.test", "10.0.0.0/8"}}, "allow-all; deny evil.test, 10.0.0.0/8"},
		{"denyOut alone: internet minus these, as on E2B", nil, &e2bNetwork{DenyOut: []string{"evil.test"}}, "allow-all; deny evil.test"},
		{"only some allowed", nil, &e2bNetwork{AllowOut: []string{"api.test"}, DenyOut: []string{"0.0.0.0/0"}}, "allow api.test"},
		{"denyOut everything beats internet on", ptr(true), &e2bNetwork{DenyOut: []string{"0.0.0.0/0"}}, "deny-all"},
		{"bad rule", nil, &e2bNetwork{AllowOut: []string{"https://x.test/"}}, "error:network"},
		{"egress proxy refused", nil, &e2bNetwork{EgressProxy: []byte(`{"address":"p:1"}`)}, "error:egressProxy"},
		{"transform rules refused", nil, &e2bNetwork{Rules: []byte(`{"a.test":[]}`)}, "error:rules"},
		{"public traffic refused", nil, &e2bNetwork{AllowPublicTraffic: ptr(true)}, "error:allowPublicTraffic"},
		{"no public traffic is fine", ptr(false), &e2bNetwork{AllowPublicTraffic: ptr(false)}, "deny-all"},
		{"https ports refused", nil, &e2bNetwork{HTTPSPorts: []byte(`[8443]`)}, "error:httpsPorts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := e2bPolicy(tc.internet, tc.net)
			switch {
			case strings.HasPrefix(tc.want, "error:"):
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(tc.want, "error:")) {
					t.Fatalf("err = %v, want one naming %s", err, tc.want)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tc.want == "nil":
				if spec != nil {
					t.Fatalf("spec = %+v, want none", spec)
				}
				return
			}
			comp, err := policy.CompileSpec(*spec)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := comp.Phase(spec.Phase)
			if got := p.String(); got != tc.want {
				t.Errorf("policy = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseE2BMetadata(t *testing.T) {
	// What the SDK sends for {"k 1": "v&=1", "x": "y"} (observed on the wire), after the
	// query parameter's own decoding.
	q, err := url.ParseQuery("metadata=k%2525201%3Dv%252526%25253D1%26x%3Dy")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseE2BMetadata(q.Get("metadata"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["k 1"] != "v&=1" || got["x"] != "y" {
		t.Errorf("got %q", got)
	}
	if _, err := parseE2BMetadata("%zz"); err == nil {
		t.Error("a bad escape was accepted")
	}
	if !metadataMatches(map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}) ||
		metadataMatches(map[string]string{"a": "1"}, map[string]string{"a": "1", "b": "2"}) {
		t.Error("metadataMatches")
	}
}

func FuzzParseE2BMetadata(f *testing.F) {
	f.Add("k%25201%3Dv%2526%253D1%26x%3Dy")
	f.Add("a%3Db")
	f.Fuzz(func(t *testing.T, raw string) {
		m, err := parseE2BMetadata(raw)
		if err == nil && raw == "" && m != nil {
			t.Fatal("empty filter is not nil")
		}
		// Round trip: a parsed filter encoded the SDK's way parses back the same.
		if err != nil || len(m) == 0 {
			return
		}
		var parts []string
		for k, v := range m {
			parts = append(parts, url.QueryEscape(k)+"="+url.QueryEscape(v))
		}
		back, err := parseE2BMetadata(url.QueryEscape(strings.Join(parts, "&")))
		if err != nil || len(back) != len(m) {
			t.Fatalf("round trip of %q: %q, %v", m, back, err)
		}
		for k, v := range m {
			if back[k] != v {
				t.Fatalf("round trip of %q: %q", m, back)
			}
		}
	})
}

// buildingTemplates has no templates and builds one only when released.
type buildingTemplates struct {
	builds  chan string
	release chan struct{}
	built   atomic.Bool
}

func (b *buildingTemplates) List(ctx context.Context) ([]v1.Template, error) {
	if b.built.Load() {
		return []v1.Template{{Name: "debian"}}, nil
	}
	return nil, nil
}

func (b *buildingTemplates) Build(ctx context.Context, req v1.TemplateRequest, progress func(string)) (v1.Template, error) {
	b.builds <- req.Name
	progress("debootstrap: fetching packages")
	<-b.release
	b.built.Store(true)
	return v1.Template{Name: req.Name}, nil
}

func (b *buildingTemplates) Import(context.Context, v1.TemplateRequest, func(string)) (v1.Template, error) {
	return v1.Template{}, nil
}

func (b *buildingTemplates) Pull(context.Context, v1.TemplateRequest, func(string)) (v1.Template, error) {
	return v1.Template{}, nil
}

// TestE2BBaseBuiltOnFirstUse: `base` maps to the Debian template; while it is not built,
// creates start one build and answer 503 (the SDK's ServiceBusyError) with its progress;
// an unknown template is a 404 naming the known ones.
func TestE2BBaseBuiltOnFirstUse(t *testing.T) {
	tpl := &buildingTemplates{builds: make(chan string, 4), release: make(chan struct{})}
	s := New(Deps{Sandboxes: &fakeSandboxes{}, Templates: tpl, Log: slog.New(slog.DiscardHandler)})
	api := httptest.NewServer(s.Handler(keys{"good": true}))
	defer api.Close()
	create := func(tmpl string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v2/sandboxes", strings.NewReader(`{"templateID":"`+tmpl+`"}`))
		req.Header.Set("X-API-KEY", "good")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := create("base"); code != http.StatusServiceUnavailable || !strings.Contains(body, "building it now") || !strings.Contains(body, `"code":503`) {
		t.Errorf("first create: %d %s", code, body)
	}
	if name := <-tpl.builds; name != "debian" {
		t.Errorf("built %q", name)
	}
	if code, body := create("base"); code != http.StatusServiceUnavailable || !strings.Contains(body, "debootstrap: fetching packages") {
		t.Errorf("create during the build: %d %s", code, body)
	}
	close(tpl.release)
	select {
	case name := <-tpl.builds:
		t.Errorf("a second build of %s started", name)
	case <-time.After(100 * time.Millisecond):
	}
	if code, body := create("nonexistent"); code != http.StatusNotFound || !strings.Contains(body, `"code":404`) || !strings.Contains(body, "base") {
		t.Errorf("unknown template: %d %s", code, body)
	}
}
