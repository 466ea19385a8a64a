package sandbox

import (
	"strings"
	"testing"
)

// TestMatchesName: a binding names its hosts on every port (the proxy intercepts and
// scrubs there), whatever ports MatchesHost sends the value to.
func TestMatchesName(t *testing.T) {
	c := []Credential{{Secret: "A", Hosts: []string{"a.test:8443", "*.b.test", "C.test"}}}
	if err := validateCredentials(c); err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"a.test": true, "x.b.test": true, "x.y.b.test": true, "c.test": true,
		"b.test": false, "aa.test": false, "a.test.evil": false, "xb.test": false, "": false,
	} {
		if got := c[0].MatchesName(host); got != want {
			t.Errorf("MatchesName(%q) = %v, want %v", host, got, want)
		}
	}
	if c[0].MatchesHost("a.test", 443) || !c[0].MatchesHost("a.test", 8443) {
		t.Error("MatchesHost on a.test")
	}
}

func TestPlaceholderHeader(t *testing.T) {
	ok := []Credential{{Secret: "ANTHROPIC", Hosts: []string{"api.anthropic.com"}, PlaceholderHeader: "x-api-key"}}
	if err := validateCredentials(ok); err != nil || ok[0].Placeholder == "" {
		t.Fatalf("%+v: %v", ok, err)
	}
	for _, tc := range []struct {
		c    Credential
		want string
	}{
		{Credential{Secret: "X", Hosts: []string{"a.test"}, PlaceholderHeader: "Bad Header"}, "not a header"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, PlaceholderHeader: "Host"}, "not a header"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, PlaceholderHeader: "proxy-authorization"}, "not a header"},
		{Credential{Secret: "X", Hosts: []string{"a.test"}, PlaceholderHeader: "X-Key", Header: "X-Key", Template: "{{value}}"}, "placeholder bindings"},
	} {
		if err := validateCredentials([]Credential{tc.c}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.c, err, tc.want)
		}
	}
}
