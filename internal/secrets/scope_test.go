package secrets

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

// TestScopeSealed: a secret's scope is stored with it, authenticated with the value: an
// edit of the data file that changes, adds or removes a scope makes the value fail to
// decrypt.
func TestScopeSealed(t *testing.T) {
	s, dir := newStore(t)
	if err := s.Put("API_TOKEN", NewValue("value-1"), nil, &Scope{Hosts: []string{"API.test", "*.Example.org:8443", "api.test"}, Methods: []string{"GET"}, PathPrefix: "/v1/", Headers: []string{"x-api-key", "X-API-KEY"}}); err != nil {
		t.Fatal(err)
	}
	want := &Scope{Hosts: []string{"api.test", "*.example.org:8443"}, Methods: []string{"GET"}, PathPrefix: "/v1/", Headers: []string{"X-Api-Key"}}
	if info, err := s.Stat("API_TOKEN"); err != nil || !reflect.DeepEqual(info.Scope, want) {
		t.Fatalf("Stat = %+v, %v; want the scope normalized: %+v", info.Scope, err, want)
	}
	if err := s.Set("LEGACY", NewValue("value-2")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(e *entry)
	}{
		{"a host added", func(e *entry) { e.Scope.Hosts = append(e.Scope.Hosts, "evil.test") }},
		{"a host widened", func(e *entry) { e.Scope.Hosts[0] = "*.test" }},
		{"plain HTTP allowed", func(e *entry) { e.Scope.PlainHTTP = true }},
		{"methods dropped", func(e *entry) { e.Scope.Methods = nil }},
		{"prefix dropped", func(e *entry) { e.Scope.PathPrefix = "" }},
		{"a header added", func(e *entry) { e.Scope.Headers = append(e.Scope.Headers, "User-Agent") }},
		{"a header replaced", func(e *entry) { e.Scope.Headers = []string{"Referer"} }},
		{"headers dropped (Authorization)", func(e *entry) { e.Scope.Headers = nil }},
		{"scope removed", func(e *entry) { e.Scope = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			editData(t, dir, func(f *file) {
				e := f.Secrets["API_TOKEN"]
				sc := *want
				sc.Hosts = append([]string(nil), want.Hosts...)
				sc.Headers = append([]string(nil), want.Headers...)
				e.Scope = &sc
				tc.edit(&e)
				f.Secrets["API_TOKEN"] = e
			})
			if _, err := s.Stat("API_TOKEN"); err == nil || !strings.Contains(err.Error(), "does not decrypt") {
				t.Fatalf("Stat after the edit: %v", err)
			}
			if _, err := s.Get("API_TOKEN"); err == nil {
				t.Fatal("Get after the edit succeeded")
			}
		})
	}
	// Restore the sealed scope: it decrypts again.
	editData(t, dir, func(f *file) {
		e := f.Secrets["API_TOKEN"]
		sc := *want
		e.Scope = &sc
		f.Secrets["API_TOKEN"] = e
	})
	if got := mustGet(t, s, "API_TOKEN"); got != "value-1" {
		t.Fatal(got)
	}
	// A scope given to a secret stored without one, in the file, does not decrypt either.
	editData(t, dir, func(f *file) {
		e := f.Secrets["LEGACY"]
		e.Scope = &Scope{Hosts: []string{"evil.test"}}
		f.Secrets["LEGACY"] = e
	})
	if _, err := s.Stat("LEGACY"); err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Fatalf("Stat of a secret given a scope in the file: %v", err)
	}
}

// TestScopeLifecycle: Set keeps a scope and a new name has none; SetScope replaces it and
// keeps the value; repositories only scope App keys; a value that no longer decrypts is
// replaced without its (unverifiable) scope.
func TestScopeLifecycle(t *testing.T) {
	s, dir := newStore(t)
	sc := Scope{Hosts: []string{"api.test"}}
	if err := s.Put("A", NewValue("one"), nil, &sc); err != nil {
		t.Fatal(err)
	}
	if err := s.Set("A", NewValue("two")); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat("A")
	if err != nil || info.Scope == nil || info.Scope.Hosts[0] != "api.test" || mustGet(t, s, "A") != "two" {
		t.Fatalf("after a new value: %+v, %v", info.Scope, err)
	}
	if err := s.Set("NEW", NewValue("x")); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.Stat("NEW"); info.Scope != nil {
		t.Fatalf("a new secret stored without a scope has %+v", info.Scope)
	}
	created := info.Created
	if err := s.SetScope("A", Scope{Hosts: []string{"other.test"}, PlainHTTP: true}); err != nil {
		t.Fatal(err)
	}
	info, err = s.Stat("A")
	if err != nil || info.Scope.Hosts[0] != "other.test" || !info.Scope.PlainHTTP || !info.Created.Equal(created) || mustGet(t, s, "A") != "two" {
		t.Fatalf("after SetScope: %+v, %v", info, err)
	}
	if list, _ := s.List(); len(list) != 2 || list[0].Scope == nil || list[0].Scope.Hosts[0] != "other.test" || list[1].Scope != nil {
		t.Fatalf("List = %+v", list)
	}
	if err := s.SetScope("NOPE", sc); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetScope of an unknown secret: %v", err)
	}
	repos := Scope{Hosts: []string{"github.com"}, Repositories: []string{"widget"}}
	if err := s.SetScope("A", repos); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("repositories for a static secret: %v", err)
	}
	app := GitHubApp{AppID: "1", InstallationID: 2}
	if err := s.Put("APP", NewValue("pem"), &app, &repos); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat("APP"); err != nil || info.GitHubApp == nil || info.Scope.Repositories[0] != "widget" {
		t.Fatalf("App key: %+v, %v", info, err)
	}
	// A static value over the App key would keep a scope it cannot have.
	if err := s.Set("APP", NewValue("static")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a static value keeping an App key's repositories: %v", err)
	}
	for _, bad := range []Scope{{}, {Hosts: []string{"*"}}, {Hosts: []string{"10.0.0.1"}}, {Hosts: []string{"api.test:0"}}, {Hosts: []string{"https://api.test"}},
		{Hosts: []string{"api.test"}, Methods: []string{"get"}}, {Hosts: []string{"api.test"}, PathPrefix: "v1"}, {Hosts: []string{"api.test"}, PathPrefix: "/a/../b"},
		{Hosts: []string{"api.test"}, Headers: []string{"Host"}}, {Hosts: []string{"api.test"}, Headers: []string{"Proxy-Authorization"}}, {Hosts: []string{"api.test"}, Headers: []string{"X Key"}},
		{Hosts: []string{"api.test"}, Headers: []string{""}}, {Hosts: []string{"api.test"}, Headers: []string{"X-Key:"}}} {
		if err := s.SetScope("A", bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("SetScope(%+v): %v, want invalid argument", bad, err)
		}
		if err := s.Put("B", NewValue("x"), nil, &bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Put(%+v): %v, want invalid argument", bad, err)
		}
	}
	// The value of A is damaged in the file: a new value replaces it, without the scope
	// nothing vouches for any more.
	editData(t, dir, func(f *file) {
		e := f.Secrets["A"]
		e.Sealed[len(e.Sealed)-1] ^= 1
		f.Secrets["A"] = e
	})
	if err := s.Set("A", NewValue("three")); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat("A"); err != nil || info.Scope != nil || mustGet(t, s, "A") != "three" {
		t.Fatalf("after replacing a damaged value: %+v, %v", info.Scope, err)
	}
}

// TestAADCompatible: a secret without a scope is sealed with what moat sealed it with
// before scopes existed, so stored secrets still decrypt (and stay without a scope).
func TestAADCompatible(t *testing.T) {
	if got := string(aad("NAME", nil, nil)); got != "NAME" {
		t.Errorf("aad without App or scope = %q", got)
	}
	app := &GitHubApp{AppID: "1", InstallationID: 2}
	j, _ := json.Marshal(app)
	if got := string(aad("NAME", app, nil)); got != "NAME\x00github-app\x00"+string(j) {
		t.Errorf("aad of an App key = %q", got)
	}
	if a, b := aad("NAME", nil, &Scope{Hosts: []string{"a.test"}}), aad("NAME", nil, &Scope{Hosts: []string{"b.test"}}); string(a) == string(b) {
		t.Error("two scopes give the same associated data")
	}
	// A scope without headers (as stored before scopes had them) seals as it did then.
	if got := string(aad("NAME", nil, &Scope{Hosts: []string{"a.test"}})); got != "NAME\x00scope\x00"+`{"hosts":["a.test"]}` {
		t.Errorf("aad of a scope without headers = %q", got)
	}
	if a, b := aad("NAME", nil, &Scope{Hosts: []string{"a.test"}}), aad("NAME", nil, &Scope{Hosts: []string{"a.test"}, Headers: []string{"Authorization"}}); string(a) == string(b) {
		t.Error("a scope's headers are not in its associated data")
	}
}
