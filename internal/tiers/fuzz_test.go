package tiers

import (
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/sandbox"
)

// FuzzApplyRead: whatever rules a request gives (allow and HTTP rules, one per line), a
// read sandbox's policy either is refused or, compiled, lets no host it allows receive a
// POST, and has no allow-all; its bindings are limited to GET and HEAD.
func FuzzApplyRead(f *testing.F) {
	f.Add("api.test\n*.docs.test:8443", "git.test /repo/\nx.test GET,HEAD /a/", "a.test")
	f.Add("10.0.0.0/8", "api.test POST", "")
	f.Add("registries", "api.test *", "b.test:80")
	f.Fuzz(func(t *testing.T, allow, http, credHost string) {
		opts := sandbox.CreateOptions{Policy: run(policy.Rules{Allow: lines(allow), HTTP: lines(http)})}
		if credHost != "" {
			opts.Credentials = []sandbox.Credential{{Secret: "T", Hosts: []string{credHost}}}
		}
		if err := Apply(builtin(t, "read"), &opts); err != nil {
			return
		}
		comp, err := policy.CompileSpec(*opts.Policy)
		if err != nil {
			t.Fatalf("Apply returned a policy that does not compile: %v", err)
		}
		pol, _ := comp.Phase(opts.Policy.Phase)
		r := opts.Policy.Phases[opts.Policy.Phase]
		if r.Net == policy.NetAllowAll || len(r.Allow) > 0 {
			t.Fatalf("read allows beyond HTTP rules: %+v", r)
		}
		for _, h := range r.HTTP {
			name, _, _ := strings.Cut(strings.Fields(h)[0], ":")
			name = strings.TrimPrefix(name, "*.")
			if name == "" {
				continue
			}
			if n, err := policy.NormalizeName("x." + name); err == nil {
				for _, port := range []uint16{80, 443, 8443} {
					if pol.Decide(policy.Request{Name: n, Port: port}).Allow && (!pol.Inspects(n, port) || pol.DecideHTTP(n, port, "POST", "/").Allow) {
						t.Fatalf("read lets a POST to %s:%d (rules %v)", n, port, r.HTTP)
					}
				}
			}
			if n, err := policy.NormalizeName(name); err == nil {
				for _, port := range []uint16{80, 443, 8443} {
					if pol.Decide(policy.Request{Name: n, Port: port}).Allow && (!pol.Inspects(n, port) || pol.DecideHTTP(n, port, "POST", "/").Allow) {
						t.Fatalf("read lets a POST to %s:%d (rules %v)", n, port, r.HTTP)
					}
				}
			}
		}
		for _, c := range opts.Credentials {
			if strings.Join(c.Methods, ",") != "GET,HEAD" {
				t.Fatalf("read binding %+v", c)
			}
		}
	})
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
