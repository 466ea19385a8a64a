package tiers

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
)

func builtin(t *testing.T, name string) Tier {
	t.Helper()
	s, err := NewSet(nil)
	if err != nil {
		t.Fatal(err)
	}
	tier, err := s.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return tier
}

func run(r policy.Rules) *policy.Spec {
	s := policy.Single(r)
	return &s
}

func TestBuiltinsValid(t *testing.T) {
	for _, tier := range Builtins() {
		if err := tier.Validate(); err != nil {
			t.Errorf("%s: %v", tier.Name, err)
		}
	}
}

// TestApply: what each built-in tier makes of a request, and the conflicts it refuses.
func TestApply(t *testing.T) {
	cases := []struct {
		tier string
		opts sandbox.CreateOptions
		want sandbox.CreateOptions // compared when err is ""
		err  string                // a substring of the error
	}{
		{
			tier: "read",
			opts: sandbox.CreateOptions{
				Policy:      run(policy.Rules{Allow: []string{"docs.test", "api.test:8443"}, HTTP: []string{"git.test /repo/", "x.test GET"}, Deny: []string{"10.0.0.0/8"}}),
				Credentials: []sandbox.Credential{{Secret: "T", Hosts: []string{"api.test"}}},
			},
			want: sandbox.CreateOptions{
				Tier: "read", GitPush: sandbox.GitPushNone,
				Policy: &policy.Spec{Phase: "run", Phases: map[string]policy.Rules{"run": {
					HTTP: []string{"docs.test GET,HEAD", "api.test:8443 GET,HEAD", "git.test GET,HEAD /repo/", "x.test GET"},
					Deny: []string{"10.0.0.0/8"},
				}}},
				Credentials: []sandbox.Credential{{Secret: "T", Hosts: []string{"api.test"}, Methods: []string{"GET", "HEAD"}}},
			},
		},
		{tier: "read", opts: sandbox.CreateOptions{Credentials: []sandbox.Credential{{Secret: "T", Hosts: []string{"api.test"}, Methods: []string{"GET", "POST"}}}}, err: "tier read: credentials: T: this tier lets credentials into GET and HEAD requests only; POST can write"},
		{tier: "read", opts: sandbox.CreateOptions{Credentials: []sandbox.Credential{{Secret: "G", Hosts: []string{"github.com"}, GitHub: &sandbox.GitHubScope{Repositories: []string{"r"}, Permissions: map[string]string{"contents": "write"}}}}}, err: "read-only GitHub tokens; permission contents is \"write\""},
		{tier: "read", opts: sandbox.CreateOptions{Policy: run(policy.Rules{HTTP: []string{"api.test POST /v1/"}})}, err: "policy.http: api.test POST /v1/: this tier limits requests to GET,HEAD; POST is not one of them"},
		{tier: "read", opts: sandbox.CreateOptions{Policy: run(policy.Rules{Net: policy.NetAllowAll})}, err: "net allow-all would open it"},
		{tier: "read", opts: sandbox.CreateOptions{Policy: run(policy.Rules{Allow: []string{"10.1.2.3"}})}, err: "needs a host name, not an address"},
		{tier: "read", opts: sandbox.CreateOptions{Policy: run(policy.Rules{Allow: []string{"registries"}})}, err: "allow the hosts by name rather than the set"},
		{tier: "read", opts: sandbox.CreateOptions{AgentBranchPrefix: "agent/x"}, err: "agent_branch_prefix: this tier allows no push"},
		{tier: "read", opts: sandbox.CreateOptions{GitProtected: sandbox.GitProtectedHold}, err: "git_protected"},
		{
			tier: "read", opts: sandbox.CreateOptions{},
			want: sandbox.CreateOptions{Tier: "read", GitPush: sandbox.GitPushNone, Policy: &policy.Spec{Phase: "run", Phases: map[string]policy.Rules{"run": {Net: policy.NetDenyAll}}}},
		},
		{
			tier: "edit",
			opts: sandbox.CreateOptions{Policy: run(policy.Rules{Allow: []string{"api.test"}, HTTP: []string{"api.test POST /v1/"}}), Credentials: []sandbox.Credential{{Secret: "T", Hosts: []string{"api.test"}}}},
			want: sandbox.CreateOptions{
				Tier: "edit",
				Policy: &policy.Spec{Phase: "setup", Phases: map[string]policy.Rules{
					"run":   {Allow: []string{"api.test"}, HTTP: []string{"api.test POST /v1/"}},
					"setup": {Allow: []string{"api.test", "registries"}, HTTP: []string{"api.test POST /v1/"}},
				}},
				Credentials: []sandbox.Credential{{Secret: "T", Hosts: []string{"api.test"}}},
			},
		},
		{
			// Without hosts: setup has the registries, run nothing.
			tier: "edit", opts: sandbox.CreateOptions{Policy: &policy.Spec{Phase: "run", Phases: map[string]policy.Rules{"run": {}}}},
			want: sandbox.CreateOptions{Tier: "edit", Policy: &policy.Spec{Phase: "setup", Phases: map[string]policy.Rules{
				"run": {Net: policy.NetDenyAll}, "setup": {Allow: []string{"registries"}},
			}}},
		},
		{tier: "edit", opts: sandbox.CreateOptions{GitProtected: sandbox.GitProtectedHold}, err: "tier edit: git_protected: this tier refuses pushes that touch protected paths"},
		{tier: "edit", opts: sandbox.CreateOptions{Policy: &policy.Spec{Phase: "build", Phases: map[string]policy.Rules{"build": {}}}}, err: "policy.phases: this tier makes the phases itself"},
		{
			tier: "integrate", opts: sandbox.CreateOptions{AgentBranchPrefix: "agent/x"},
			want: sandbox.CreateOptions{Tier: "integrate", AgentBranchPrefix: "agent/x", GitProtected: sandbox.GitProtectedHold, Policy: &policy.Spec{Phase: "setup", Phases: map[string]policy.Rules{
				"run": {Net: policy.NetDenyAll}, "setup": {Allow: []string{"registries"}},
			}}},
		},
		{
			// A request may be stricter than its tier: refuse instead of hold.
			tier: "integrate", opts: sandbox.CreateOptions{GitProtected: sandbox.GitProtectedRefuse, Policy: &policy.Spec{Phase: "run", Phases: map[string]policy.Rules{"run": {Allow: []string{"a.test"}}}}},
			want: sandbox.CreateOptions{Tier: "integrate", GitProtected: sandbox.GitProtectedRefuse, Policy: &policy.Spec{Phase: "setup", Phases: map[string]policy.Rules{
				"run": {Allow: []string{"a.test"}}, "setup": {Allow: []string{"a.test", "registries"}},
			}}},
		},
		{
			tier: "operate", opts: sandbox.CreateOptions{Credentials: []sandbox.Credential{{Secret: "PROD", Hosts: []string{"prod.test"}, Methods: []string{"POST"}}}},
			want: sandbox.CreateOptions{Tier: "operate", GitProtected: sandbox.GitProtectedHold,
				Policy:      &policy.Spec{Phase: "setup", Phases: map[string]policy.Rules{"run": {Net: policy.NetDenyAll}, "setup": {Allow: []string{"registries"}}}},
				Credentials: []sandbox.Credential{{Secret: "PROD", Hosts: []string{"prod.test"}, Methods: []string{"POST"}, Approve: true}}},
		},
		{
			// The request's ask mode and ask rules survive the tier: asking lets nothing
			// through by itself, and a phase that only asks is not made deny-all.
			tier: "read", opts: sandbox.CreateOptions{Policy: &policy.Spec{Phase: "run", AskAll: true, AskWait: "30s", Phases: map[string]policy.Rules{"run": {Ask: []string{"docs.test"}}}}},
			want: sandbox.CreateOptions{Tier: "read", GitPush: sandbox.GitPushNone,
				Policy: &policy.Spec{Phase: "run", AskAll: true, AskWait: "30s", Phases: map[string]policy.Rules{"run": {Ask: []string{"docs.test"}}}}},
		},
	}
	for _, c := range cases {
		t.Run(c.tier+"/"+c.err, func(t *testing.T) {
			opts := c.opts
			before := c.opts
			err := Apply(builtin(t, c.tier), &opts)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("Apply: %v, want an invalid-argument error with %q", err, c.err)
				}
				if !reflect.DeepEqual(opts, before) {
					t.Errorf("a refused Apply changed the options: %+v", opts)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(opts, c.want) {
				t.Errorf("Apply:\n got %+v\n  policy %+v\nwant %+v\n  policy %+v", opts, opts.Policy, c.want, c.want.Policy)
			}
		})
	}
}

// TestApplyDoesNotShareRequest: the options Apply returns do not alias the request's
// slices (a read binding's methods are set on a copy).
func TestApplyDoesNotShareRequest(t *testing.T) {
	creds := []sandbox.Credential{{Secret: "T", Hosts: []string{"api.test"}}}
	opts := sandbox.CreateOptions{Credentials: creds}
	if err := Apply(builtin(t, "read"), &opts); err != nil {
		t.Fatal(err)
	}
	if creds[0].Methods != nil {
		t.Errorf("the request's binding was changed: %+v", creds[0])
	}
}

func TestSet(t *testing.T) {
	s, err := NewSet([]Tier{
		{Name: "read", Description: "stricter read", Credentials: Credentials{Mode: CredNone}, Git: Git{Push: PushNone}, Egress: Egress{Methods: []string{"GET"}}},
		{Name: "docs", Credentials: Credentials{Mode: CredNone}, Git: Git{Push: PushNone}, Egress: Egress{Allow: []string{"docs.test"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tier := range s.List() {
		names = append(names, tier.Name)
	}
	if got := strings.Join(names, ","); got != "read,edit,integrate,operate,docs" {
		t.Errorf("List: %s", got)
	}
	if r, _ := s.Get("read"); r.Description != "stricter read" {
		t.Errorf("the file's read did not replace the built-in: %+v", r)
	}
	if _, err := s.Get("nope"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "have read, edit, integrate, operate, docs") {
		t.Errorf("Get(nope): %v", err)
	}
	// Get hands out copies.
	r, _ := s.Get("read")
	r.Egress.Methods[0] = "POST"
	if again, _ := s.Get("read"); again.Egress.Methods[0] != "GET" {
		t.Error("Get shares the tier's slices")
	}
	// A custom tier's own hosts are added to every request.
	docs, _ := s.Get("docs")
	opts := sandbox.CreateOptions{}
	if err := Apply(docs, &opts); err != nil {
		t.Fatal(err)
	}
	if got := opts.Policy.Phases["run"].Allow; !reflect.DeepEqual(got, []string{"docs.test"}) {
		t.Errorf("docs tier's run allow: %v", got)
	}
	// A methods-limited tier that allows a set: the request may not extend that set.
	setTier := Tier{Name: "pkgs", Credentials: Credentials{Mode: CredNone}, Git: Git{Push: PushNone}, Egress: Egress{Methods: []string{"GET"}, Allow: []string{"registries"}}}
	opts = sandbox.CreateOptions{Policy: &policy.Spec{Phase: "run", Phases: map[string]policy.Rules{"run": {}}, Sets: map[string][]string{"registries": {"evil.test *"}}}}
	if err := Apply(setTier, &opts); err == nil || !strings.Contains(err.Error(), "policy.sets: registries: this tier limits requests to GET and allows the set itself") {
		t.Errorf("extending the tier's set: %v", err)
	}
	if _, err := NewSet([]Tier{{Name: "x", Credentials: Credentials{Mode: CredNone}, Git: Git{Push: PushNone}}, {Name: "x", Credentials: Credentials{Mode: CredNone}, Git: Git{Push: PushNone}}}); err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Errorf("a tier defined twice: %v", err)
	}
}

// TestParseFile: a good file, and each kind of bad one with the field it names.
func TestParseFile(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "tiers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := ParseFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "read-docs" || list[1].Name != "deploy" || !list[1].Credentials.Approve || list[1].Egress.Setup == nil {
		t.Errorf("parsed: %+v", list)
	}
	// JSON is accepted too.
	if list, err := ParseFile([]byte(`{"tiers":[{"name":"j","credentials":{"mode":"none"},"git":{"push":"none"}}]}`)); err != nil || list[0].Name != "j" {
		t.Errorf("JSON: %v %+v", err, list)
	}
	bad := []struct{ file, want string }{
		{``, "empty"},
		{`tiers: []`, "no tiers"},
		{"tiers:\n - name: x\n   credentials: {mode: none}\n   git: {push: none}\n   egres: {}\n", "field egres not found"},
		{"tiers:\n - name: X\n   credentials: {mode: none}\n   git: {push: none}\n", `tier 1 ("X"): name: "X" is not a tier name`},
		{"tiers:\n - name: x\n   credentials: {mode: some}\n   git: {push: none}\n", `tier 1 ("x"): credentials.mode: "some" is not none, read-only or as-bound`},
		{"tiers:\n - name: x\n   credentials: {mode: none}\n   git: {push: all}\n", `git.push: "all" is not none or agent-branch`},
		{"tiers:\n - name: x\n   credentials: {mode: none}\n   git: {push: agent-branch}\n", `git.protected: "" is not refuse or hold`},
		{"tiers:\n - name: x\n   credentials: {mode: none}\n   git: {push: none, protected: hold}\n", `git.protected: a tier that allows no push`},
		{"tiers:\n - name: x\n   credentials: {mode: none}\n   git: {push: none}\n   egress: {methods: [get]}\n", `egress.methods: "get" is not an HTTP method`},
		{"tiers:\n - name: x\n   credentials: {mode: none}\n   git: {push: none}\n   egress: {allow: [\"bad host!\"]}\n", `egress: `},
		{"tiers:\n - name: x\n   credentials: {mode: none}\n   git: {push: none}\n   egress: {setup: {http: [\"a.test get\"]}}\n", `egress.setup: `},
		{"tiers:\n - name: x\n   credentials: {mode: none}\n   git: {push: none}\n - name: x\n   credentials: {mode: none}\n   git: {push: none}\n", "defined twice"},
		{"tiers: [{name: x, credentials: {mode: none}, git: {push: none}}]\n---\ntiers: []\n", "more than one YAML document"},
		{"tiers: 3", "cannot unmarshal"},
	}
	for _, c := range bad {
		_, err := ParseFile([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseFile(%q): %v, want an error with %q", c.file, err, c.want)
		}
	}
}

// FuzzParseFile: no input panics; what parses is valid, and applies to an empty request
// without a panic (an error is fine).
func FuzzParseFile(f *testing.F) {
	if good, err := os.ReadFile(filepath.Join("testdata", "tiers.yaml")); err == nil {
		f.Add(good)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := ParseFile(data)
		if err != nil {
			return
		}
		for _, tier := range list {
			if err := tier.Validate(); err != nil {
				t.Fatalf("ParseFile returned an invalid tier: %v", err)
			}
			opts := sandbox.CreateOptions{Policy: run(policy.Rules{Allow: []string{"a.test"}}), Credentials: []sandbox.Credential{{Secret: "T", Hosts: []string{"a.test"}}}}
			if err := Apply(tier, &opts); err == nil && opts.Tier != tier.Name {
				t.Fatalf("Apply did not record the tier: %+v", opts)
			}
		}
	})
}

// TestPolicy: a tiered sandbox's new policy is merged with its tier like its first one;
// asking beyond the tier is refused.
func TestPolicy(t *testing.T) {
	read := builtin(t, "read")
	got, err := Policy(read, policy.Spec{Phases: map[string]policy.Rules{"run": {Allow: []string{"new.test"}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := &policy.Spec{Phases: map[string]policy.Rules{"run": {HTTP: []string{"new.test GET,HEAD"}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read: %+v, want %+v", got, want)
	}
	if _, err := Policy(read, policy.Spec{Phases: map[string]policy.Rules{"run": {Net: policy.NetAllowAll}}}); err == nil || !strings.Contains(err.Error(), "tier read: policy: this tier limits the network") {
		t.Errorf("read, net allow-all: %v", err)
	}
	// edit: the policy as inspected (setup and run), run changed: setup is made again
	// from the new run, and the phase named is kept.
	edit := builtin(t, "edit")
	got, err = Policy(edit, policy.Spec{Phase: "run", Phases: map[string]policy.Rules{
		"run": {Allow: []string{"b.test"}}, "setup": {Allow: []string{"a.test", "registries", "evil.test"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want = &policy.Spec{Phase: "run", Phases: map[string]policy.Rules{"run": {Allow: []string{"b.test"}}, "setup": {Allow: []string{"b.test", "registries"}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("edit: %+v, want %+v", got, want)
	}
}

// TestApplyTierAsk: a tier with ask puts its sandboxes in ask mode, also with no hosts
// (the phase then asks about everything rather than being deny-all).
func TestApplyTierAsk(t *testing.T) {
	tier := builtin(t, "read")
	tier.Name, tier.Ask = "read-ask", true
	var opts sandbox.CreateOptions
	if err := Apply(tier, &opts); err != nil {
		t.Fatal(err)
	}
	want := &policy.Spec{Phase: "run", AskAll: true, Phases: map[string]policy.Rules{"run": {}}}
	if !reflect.DeepEqual(opts.Policy, want) {
		t.Fatalf("policy = %+v, want %+v", opts.Policy, want)
	}
	tier.Ask = false
	opts = sandbox.CreateOptions{}
	if err := Apply(tier, &opts); err != nil {
		t.Fatal(err)
	}
	if opts.Policy.AskAll || opts.Policy.Phases["run"].Net != policy.NetDenyAll {
		t.Fatalf("without ask: policy = %+v, want deny-all without ask", opts.Policy)
	}
}
