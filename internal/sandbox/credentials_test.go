package sandbox

import (
	"strings"
	"testing"
)

func TestValidateCredentials(t *testing.T) {
	ok := []Credential{
		{Secret: "GH_TOKEN", Hosts: []string{"API.GitHub.com."}},
		{Secret: "OPENAI", Hosts: []string{"*.openai.com"}, Header: "Authorization", Template: "Bearer {{value}}"},
	}
	if err := validateCredentials(ok); err != nil {
		t.Fatal(err)
	}
	if ok[0].Hosts[0] != "api.github.com" || !strings.HasPrefix(ok[0].Placeholder, "moat-placeholder-") || ok[1].Placeholder != "" {
		t.Errorf("after validation: %+v", ok)
	}
	if !ok[1].MatchesHost("api.openai.com", 443) || ok[1].MatchesHost("openai.com", 443) || ok[0].MatchesHost("github.com", 443) {
		t.Error("MatchesHost")
	}
	// Ports: 443 unless given; 80 too for plain HTTP bindings.
	ported := []Credential{
		{Secret: "A", Hosts: []string{"a.test:8443", "*.b.test"}},
		{Secret: "B", Hosts: []string{"c.test"}, PlainHTTP: true},
	}
	if err := validateCredentials(ported); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		c    int
		host string
		port uint16
		want bool
	}{
		{0, "a.test", 8443, true}, {0, "a.test", 443, false}, {0, "x.b.test", 443, true}, {0, "x.b.test", 8443, false},
		{1, "c.test", 443, true}, {1, "c.test", 80, true}, {1, "c.test", 8080, false},
		{0, "x.b.test", 80, false},
	} {
		if got := ported[m.c].MatchesHost(m.host, m.port); got != m.want {
			t.Errorf("%v MatchesHost(%s, %d) = %v", ported[m.c].Hosts, m.host, m.port, got)
		}
	}
	for _, tc := range []struct {
		c    Credential
		want string
	}{
		{Credential{Secret: "lower", Hosts: []string{"a.test"}}, "secret name"},
		{Credential{Secret: "X"}, "at least one host"},
		{Credential{Secret: "X", Hosts: []string{"https://a.test"}}, "host"},
		{Credential{Secret: "X", Hosts: []string{"a.test:0"}}, "port"},
		{Credential{Secret: "X", Hosts: []string{"a.test:99999"}}, "port"},
		{Credential{Secret: "PATH", Hosts: []string{"a.test"}}, "needs for itself"},
		{Credential{Secret: "LD_PRELOAD", Hosts: []string{"a.test"}}, "needs for itself"},
		{Credential{Secret: "MOAT_X", Hosts: []string{"a.test"}}, "needs for itself"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, Header: "Bad Header", Template: "{{value}}"}, "header name"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, Header: "Authorization", Template: "Bearer"}, "{{value}}"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, Header: "Authorization", Template: "a\r\nX: {{value}}"}, "one line"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, Template: "{{value}}"}, "needs a header"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, PathPrefix: "v1/"}, "path prefix"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, PathPrefix: "/v1/../admin"}, "path prefix"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, Methods: []string{"get"}}, "not an HTTP method"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, GitHub: &GitHubScope{Repositories: []string{"a/b"}}}, "not a repository name"},
	} {
		if err := validateCredentials([]Credential{tc.c}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.c, err, tc.want)
		}
	}
	twice := []Credential{{Secret: "X", Hosts: []string{"a.test"}}, {Secret: "X", Hosts: []string{"b.test"}}}
	if err := validateCredentials(twice); err == nil {
		t.Error("the same variable bound twice was accepted")
	}
	// A header binding may use a reserved name: nothing goes into the environment.
	if err := validateCredentials([]Credential{{Secret: "PATH", Hosts: []string{"a.test"}, Header: "X-Key", Template: "{{value}}"}}); err != nil {
		t.Errorf("header binding named PATH: %v", err)
	}
}
