package apiserver

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/tiers"
)

// recordingSandboxes is fakeSandboxes whose Create returns a sandbox made of the options
// it was given.
type recordingSandboxes struct {
	fakeSandboxes
	got []sandbox.CreateOptions
}

func (f *recordingSandboxes) Create(_ context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	f.got = append(f.got, o)
	return &sandbox.Sandbox{ID: "sb-new", State: sandbox.StateRunning, Policy: o.Policy, Credentials: o.Credentials,
		Tier: o.Tier, GitPush: o.GitPush, GitProtected: o.GitProtected}, nil
}

// TestTierRoutes: the tiers are listed and shown (an operator tier beside the built-ins);
// a create with a tier gets the tier's settings and shows them; a create asking beyond
// its tier, or naming no known tier, is a 400 naming the field and nothing is created.
func TestTierRoutes(t *testing.T) {
	fake := &recordingSandboxes{}
	s := New(Deps{Sandboxes: fake, Log: slog.New(slog.DiscardHandler)})
	set, err := tiers.NewSet([]tiers.Tier{{Name: "docs", Credentials: tiers.Credentials{Mode: tiers.CredNone}, Git: tiers.Git{Push: tiers.PushNone}}})
	if err != nil {
		t.Fatal(err)
	}
	s.SetTiers(set)
	api := httptest.NewServer(s.Handler(nil))
	t.Cleanup(api.Close)
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, api.URL+path, strings.NewReader(body))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	code, body := do("GET", "/v1/tiers", "")
	var list []v1.Tier
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list) != 5 || list[0].Name != "read" || !list[0].Builtin || list[4].Name != "docs" || list[4].Builtin {
		t.Fatalf("GET /v1/tiers: %d %s", code, body)
	}
	code, body = do("GET", "/v1/tiers/operate", "")
	var op v1.Tier
	if code != 200 || json.Unmarshal([]byte(body), &op) != nil || !op.Credentials.Approve || op.Git.Protected != "hold" {
		t.Fatalf("GET /v1/tiers/operate: %d %s", code, body)
	}
	if code, body = do("GET", "/v1/tiers/nope", ""); code != 404 {
		t.Errorf("GET /v1/tiers/nope: %d %s", code, body)
	}

	code, body = do("POST", "/v1/sandboxes", `{"tier":"read","policy":{"phase":"run","phases":{"run":{"allow":["api.test"]}}},"credentials":[{"secret":"T","hosts":["api.test"]}]}`)
	var sb v1.Sandbox
	if code != 201 || json.Unmarshal([]byte(body), &sb) != nil {
		t.Fatalf("create with tier read: %d %s", code, body)
	}
	if sb.Tier != "read" || sb.GitPush != "none" || strings.Join(sb.Policy.Phases["run"].HTTP, ";") != "api.test GET,HEAD" || strings.Join(sb.Credentials[0].Methods, ",") != "GET,HEAD" {
		t.Errorf("the sandbox of tier read: %s", body)
	}
	n := len(fake.got)
	for _, c := range []struct{ body, want string }{
		{`{"tier":"read","credentials":[{"secret":"T","hosts":["api.test"],"methods":["POST"]}]}`, "tier read: credentials: T: this tier lets credentials into GET and HEAD requests only; POST can write"},
		{`{"tier":"edit","git_protected":"hold"}`, "tier edit: git_protected"},
		{`{"tier":"nope"}`, `tier \"nope\": no such tier (have read, edit, integrate, operate, docs`},
	} {
		code, body := do("POST", "/v1/sandboxes", c.body)
		if code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("create %s: %d %s, want 400 with %q", c.body, code, body, c.want)
		}
	}
	if len(fake.got) != n {
		t.Errorf("a refused create reached the manager: %+v", fake.got[n:])
	}
}

// TestE2BTierMetadata: E2B create metadata moat.tier selects a tier; its conflicts are
// 400s in E2B's error shape and nothing is created.
func TestE2BTierMetadata(t *testing.T) {
	fake := &recordingSandboxes{}
	tpl := &buildingTemplates{}
	tpl.built.Store(true)
	s := New(Deps{Sandboxes: fake, Templates: tpl, Log: slog.New(slog.DiscardHandler)})
	api := httptest.NewServer(s.Handler(keys{"good": true}))
	t.Cleanup(api.Close)
	create := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, api.URL+"/v2/sandboxes", strings.NewReader(body))
		req.Header.Set("X-API-KEY", "good")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := create(`{"templateID":"debian","metadata":{"moat.tier":"read"},"network":{"allowOut":["api.test"],"denyOut":["0.0.0.0/0"]}}`)
	if code != 201 || len(fake.got) != 1 {
		t.Fatalf("E2B create with moat.tier read: %d %s", code, body)
	}
	o := fake.got[0]
	if o.Tier != "read" || o.GitPush != "none" || strings.Join(o.Policy.Phases["run"].HTTP, ";") != "api.test GET,HEAD" || o.Metadata["moat.tier"] != "read" {
		t.Errorf("options of the E2B create: tier %q push %q policy %+v metadata %v", o.Tier, o.GitPush, o.Policy, o.Metadata)
	}
	code, body = create(`{"templateID":"debian","metadata":{"moat.tier":"read"},"allow_internet_access":true}`)
	if code != 400 || !strings.Contains(body, `"code":400`) || !strings.Contains(body, "tier read: policy: this tier limits the network") || len(fake.got) != 1 {
		t.Errorf("E2B create of tier read with internet access: %d %s", code, body)
	}
}
