package gitgate

import (
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestCompile(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{DefaultPrefix("fix-login"), true},
		{"refs/heads/agent/", true},
		{"refs/heads/bot/x/y/", true},
		{"refs/heads/", false},
		{"refs/heads", false},
		{"refs/heads/agent", false}, // must end with "/": "agent" would cover "agentx"
		{"refs/tags/agent/", false},
		{"refs/notes/agent/", false},
		{"refs/agent/", false},
		{"refs/heads/agent/../main/", false},
		{"refs/heads/agent//", false},
		{"refs/heads/agent/.x/", false},
		{"refs/heads/agent/x.lock/", false},
		{"refs/heads/agent/a b/", false},
		{DefaultPrefix(""), false},
		{DefaultPrefix("x@{1}"), false},
		{"", false},
		{"/", false},
		{"agent/", false},
	} {
		p, err := Compile(PolicySpec{Prefix: tc.prefix})
		if (err == nil) != tc.ok {
			t.Errorf("Compile(%q) = %v, want ok=%v", tc.prefix, err, tc.ok)
			continue
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("Compile(%q) = %v, not ErrInvalidArgument", tc.prefix, err)
		}
		if err == nil && p.Prefix() != tc.prefix {
			t.Errorf("Prefix() = %q", p.Prefix())
		}
	}
}

func TestDecide(t *testing.T) {
	const prefix = "refs/heads/agent/t/"
	strict, err := Compile(PolicySpec{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	force, err := Compile(PolicySpec{Prefix: prefix, AllowForcePush: true})
	if err != nil {
		t.Fatal(err)
	}
	ffOnly := func(ref, old, new string) bool { return old == a1 && new == b1 } // a1 is an ancestor of b1
	create := func(ref string) Command { return Command{z1, a1, ref} }
	update := func(ref, old, new string) Command { return Command{old, new, ref} }
	for _, tc := range []struct {
		name  string
		p     *Policy
		req   Request
		ff    FastForward
		rules []string // per command; "" for allowed
	}{
		{"create under prefix", strict, Request{Commands: []Command{create(prefix + "x")}}, ffOnly, []string{""}},
		{"create deep under prefix", strict, Request{Commands: []Command{create(prefix + "x/y")}}, ffOnly, []string{""}},
		{"fast-forward", strict, Request{Commands: []Command{update(prefix+"x", a1, b1)}}, ffOnly, []string{""}},
		{"non-fast-forward", strict, Request{Commands: []Command{update(prefix+"x", b1, a1)}}, ffOnly, []string{RuleNonFastForward}},
		{"no ff answer", strict, Request{Commands: []Command{update(prefix+"x", a1, b1)}}, nil, []string{RuleNonFastForward}},
		{"forced, allowed", force, Request{Commands: []Command{update(prefix+"x", b1, a1)}}, nil, []string{""}},
		{"delete under prefix", force, Request{Commands: []Command{update(prefix+"x", a1, z1)}}, ffOnly, []string{RuleDelete}},
		{"delete elsewhere", strict, Request{Commands: []Command{update("refs/heads/main", a1, z1)}}, ffOnly, []string{RuleDelete}},
		{"main", strict, Request{Commands: []Command{update("refs/heads/main", a1, b1)}}, ffOnly, []string{RuleOutsidePrefix}},
		{"another agent", strict, Request{Commands: []Command{create("refs/heads/agent/u/x")}}, ffOnly, []string{RuleOutsidePrefix}},
		{"prefix lookalike", strict, Request{Commands: []Command{create("refs/heads/agent/tt/x")}}, ffOnly, []string{RuleOutsidePrefix}},
		{"prefix as a branch", strict, Request{Commands: []Command{create("refs/heads/agent/t")}}, ffOnly, []string{RuleOutsidePrefix}},
		{"tag", force, Request{Commands: []Command{create("refs/tags/v1")}}, ffOnly, []string{RuleTag}},
		{"notes", strict, Request{Commands: []Command{create("refs/notes/commits")}}, ffOnly, []string{RuleOutsidePrefix}},
		{"meta", strict, Request{Commands: []Command{create("refs/meta/config")}}, ffOnly, []string{RuleOutsidePrefix}},
		{"pull", strict, Request{Commands: []Command{create("refs/pull/1/head")}}, ffOnly, []string{RuleOutsidePrefix}},
		{"for review", strict, Request{Commands: []Command{create("refs/for/main")}}, ffOnly, []string{RuleOutsidePrefix}},
		{"remote-tracking namespace", strict, Request{Commands: []Command{create("refs/remotes/origin/agent/t/x")}}, ffOnly, []string{RuleOutsidePrefix}},
		{"all or nothing", strict, Request{Commands: []Command{create(prefix + "x"), create("refs/heads/main")}}, ffOnly,
			[]string{RuleAllOrNothing, RuleOutsidePrefix}},
		{"push cert", force, Request{PushCert: true, Commands: []Command{create(prefix + "x")}}, ffOnly, []string{RulePushCert}},
		{"push options", force, Request{Options: []string{"ci.skip"}, Commands: []Command{create(prefix + "x"), create(prefix + "y")}}, ffOnly,
			[]string{RulePushOptions, RulePushOptions}},
		{"shallow client", strict, Request{Shallow: []string{b1}, Commands: []Command{create(prefix + "x")}}, ffOnly, []string{""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			ff := tc.ff
			if ff != nil {
				ff = func(ref, old, new string) bool {
					asked++
					if !strings.HasPrefix(ref, prefix) || isZeroID(old) || isZeroID(new) {
						t.Errorf("ff asked about %s %s..%s", ref, old, new)
					}
					return tc.ff(ref, old, new)
				}
			}
			d := tc.p.Decide(&tc.req, ff)
			allow := true
			for i, v := range d.Verdicts {
				if v.Command != tc.req.Commands[i] {
					t.Errorf("verdict %d is for %+v", i, v.Command)
				}
				want := tc.rules[i]
				if want == "" {
					if !v.Allow || v.Rule != RuleAgentPrefix || v.Reason != "" {
						t.Errorf("command %d: %+v, want allowed", i, v)
					}
					continue
				}
				allow = false
				if v.Allow || v.Rule != want || v.Reason == "" || strings.ContainsAny(v.Reason, "\n\r") {
					t.Errorf("command %d: %+v, want refused by %s", i, v, want)
				}
			}
			if d.Allow != allow || len(d.Verdicts) != len(tc.req.Commands) {
				t.Errorf("Allow = %v with %d verdicts", d.Allow, len(d.Verdicts))
			}
			if tc.p == force && asked != 0 {
				t.Errorf("ff asked %d times under a force-push policy", asked)
			}
			if r := d.Refused(); !d.Allow && (len(r) == 0 || r[0].Rule == RuleAllOrNothing) {
				t.Errorf("Refused() = %+v: the cause must come first", r)
			}
		})
	}
}

func TestWithProtected(t *testing.T) {
	p, err := Compile(PolicySpec{Prefix: "refs/heads/agent/t/"})
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Commands: []Command{{z1, a1, "refs/heads/agent/t/ci"}, {z1, a1, "refs/heads/agent/t/ok"}}}
	d := p.Decide(req, nil)
	hits := map[string][]Hit{"refs/heads/agent/t/ci": {
		{Path: ".github/workflows/ci.yml", Glob: ".github/workflows/**"},
		{Path: "CODEOWNERS", Glob: "CODEOWNERS"},
	}}
	got := WithProtected(d, hits)
	if !d.Allow || got.Allow {
		t.Fatalf("Allow: before %v, after %v", d.Allow, got.Allow)
	}
	want := `touches protected path ".github/workflows/ci.yml" (protected by ".github/workflows/**") and 1 more`
	if v := got.Verdicts[0]; v.Rule != RuleProtectedPath || v.Reason != want {
		t.Errorf("verdict %+v", v)
	}
	if v := got.Verdicts[1]; v.Allow || v.Rule != RuleAllOrNothing {
		t.Errorf("verdict %+v", v)
	}
	if r := got.Refused(); r[0].Rule != RuleProtectedPath {
		t.Errorf("Refused() = %+v", r)
	}
	// No hits: unchanged. Refused commands keep their verdict.
	if again := WithProtected(d, nil); !again.Allow {
		t.Errorf("no hits: %+v", again)
	}
	main := p.Decide(&Request{Commands: []Command{{a1, b1, "refs/heads/main"}}}, nil)
	if v := WithProtected(main, map[string][]Hit{"refs/heads/main": hits["refs/heads/agent/t/ci"]}).Verdicts[0]; v.Rule != RuleOutsidePrefix {
		t.Errorf("refused verdict replaced: %+v", v)
	}
	// A path that is not ASCII is quoted as ASCII.
	odd := WithProtected(d, map[string][]Hit{"refs/heads/agent/t/ok": {{Path: ".moat/caf\u00e9\n", Glob: ".moat/**"}}})
	if r := odd.Verdicts[1].Reason; hasNonASCII(r) || strings.ContainsAny(r, "\n") {
		t.Errorf("reason %q", r)
	}
}
