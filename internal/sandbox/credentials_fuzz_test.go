package sandbox

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzCredentialBinding: any binding a user sends either fails validation or is bound,
// afterwards, to exactly the host and port it names (443 by default), and to nothing
// else. Seeds live in testdata/fuzz/FuzzCredentialBinding.
func FuzzCredentialBinding(f *testing.F) {
	f.Fuzz(func(t *testing.T, host, prefix string, plain bool) {
		c := []Credential{{Secret: "TOKEN", Hosts: []string{host}, PathPrefix: prefix, PlainHTTP: plain}}
		if err := validateCredentials(c); err != nil {
			return
		}
		norm := c[0].Hosts[0]
		name, portText, hasPort := strings.Cut(norm, ":")
		port := uint16(443)
		if hasPort {
			p, err := strconv.ParseUint(portText, 10, 16)
			if err != nil || p == 0 {
				t.Fatalf("%q normalized to %q: bad port", host, norm)
			}
			port = uint16(p)
		}
		if strings.HasPrefix(name, "*.") {
			name = "x" + name[1:]
		}
		if !c[0].MatchesHost(name, port) {
			t.Fatalf("%q (normalized %q) does not match %s:%d", host, norm, name, port)
		}
		if c[0].MatchesHost(name+"x", port) || c[0].MatchesHost(name, port+1) && port+1 != 80 && port+1 != 443 {
			t.Fatalf("%q matches more than it names", norm)
		}
		if !c[0].MatchesName(name) || c[0].MatchesName(name+"x") {
			t.Fatalf("%q: MatchesName differs from the name it binds", norm)
		}
		if again := []Credential{{Secret: "TOKEN", Hosts: []string{norm}, PathPrefix: prefix}}; validateCredentials(again) != nil || again[0].Hosts[0] != norm {
			t.Fatalf("%q does not validate to itself", norm)
		}
	})
}
