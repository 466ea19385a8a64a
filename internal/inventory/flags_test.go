package inventory

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/tiers"
)

func kinds(fs []v1.InventoryFlag) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, f.Kind+"/"+f.Severity)
	}
	return out
}

// TestRuleFlags: which single rules widen access, and which do not.
func TestRuleFlags(t *testing.T) {
	for _, tc := range []struct {
		verb, rule string
		want       []string
	}{
		{"allow", "*.s3.amazonaws.com", []string{"shared-wildcard/high"}},
		{"allow", "*.S3.AmazonAWS.com:443", []string{"shared-wildcard/high"}},
		{"allow", "*.amazonaws.com", []string{"shared-wildcard/high"}}, // covers *.s3.amazonaws.com
		{"allow", "*.github.io", []string{"shared-wildcard/high"}},
		{"allow", "*.githubusercontent.com", []string{"shared-wildcard/high"}},
		{"allow", "*.herokuapp.com", []string{"shared-wildcard/high"}},
		{"allow", "*.vercel.app", []string{"shared-wildcard/high"}},
		{"allow", "*.netlify.app", []string{"shared-wildcard/high"}},
		{"allow", "*.cloudfront.net", []string{"shared-wildcard/high"}},
		{"allow", "*.blob.core.windows.net", []string{"shared-wildcard/high"}},
		{"allow", "*.appspot.com", []string{"shared-wildcard/high"}},
		{"allow", "*.workers.dev", []string{"shared-wildcard/high"}},
		{"allow", "*.pages.dev", []string{"shared-wildcard/high"}},
		{"allow", "*.blogspot.com", []string{"shared-wildcard/high"}}, // not in moat's table: from the embedded Public Suffix List
		{"allow", "*.com", []string{"tld-wildcard/high"}},
		{"allow", "*.co.uk", []string{"tld-wildcard/high"}},
		{"ask", "*.github.io", []string{"shared-wildcard/medium"}},
		{"allow", "s3.amazonaws.com", []string{"shared-host/medium"}},
		{"allow", "raw.githubusercontent.com:443", []string{"shared-host/medium"}},
		{"allow", "10.0.0.0/8", []string{"wide-cidr/high", "private-cidr/high"}},
		{"allow", "0.0.0.0/0", []string{"wide-cidr/high", "private-cidr/high", "private-cidr/high", "private-cidr/high", "private-cidr/high", "private-cidr/high", "private-cidr/high", "private-cidr/high"}},
		{"allow", "169.254.169.254", []string{"private-cidr/high"}},
		{"allow", "192.168.1.0/24", []string{"private-cidr/high"}},
		{"allow", "8.0.0.0/8", []string{"wide-cidr/high"}},
		{"ask", "8.0.0.0/8", []string{"wide-cidr/medium"}},
		// narrow: no flags
		{"allow", "api.github.com", nil},
		{"allow", "*.mybucket.s3.amazonaws.com", nil},
		{"allow", "mybucket.s3.amazonaws.com:443", nil},
		{"allow", "*.example.com", nil},
		{"allow", "*.corp.internal", nil},
		{"allow", "93.184.216.0/24", nil},
		{"deny", "*.s3.amazonaws.com", nil},
		{"deny", "0.0.0.0/0", nil},
	} {
		var r policy.Rules
		switch tc.verb {
		case "allow":
			r.Allow = []string{tc.rule}
		case "ask":
			r.Ask = []string{tc.rule}
		case "deny":
			r.Deny = []string{tc.rule}
		}
		es, err := policy.Describe(r, nil)
		if err != nil || len(es) != 1 {
			t.Fatalf("%s %s: %v %v", tc.verb, tc.rule, es, err)
		}
		got := kinds(RuleFlags(es[0]))
		if !slices.Equal(got, append([]string{}, tc.want...)) {
			t.Errorf("%s %s: flags %v, want %v", tc.verb, tc.rule, got, tc.want)
		}
	}
}

// TestDescribeExpandsSets: a set is listed member by member, its HTTP members with
// their methods and prefixes, and a set member over a shared domain is flagged.
func TestDescribeExpandsSets(t *testing.T) {
	r := policy.Rules{Allow: []string{"registries", "mine"}, HTTP: []string{"api.example.com:443 GET,POST /v1/"}}
	es, err := policy.Describe(r, map[string][]string{"mine": {"*.github.io", "pypi.org"}})
	if err != nil {
		t.Fatal(err)
	}
	var npm, gh, http *policy.Entry
	for i, e := range es {
		switch {
		case e.Set == "registries" && e.Host == "registry.npmjs.org":
			npm = &es[i]
		case e.Set == "mine" && e.Kind == "wildcard":
			gh = &es[i]
		case e.Verb == "http":
			http = &es[i]
		}
	}
	if npm == nil || !npm.HTTP || !slices.Equal(npm.Methods, []string{"GET", "HEAD"}) || npm.Ports != "443" {
		t.Errorf("registries member: %+v", npm)
	}
	if gh == nil || len(RuleFlags(*gh)) != 1 {
		t.Errorf("set member *.github.io: %+v", gh)
	}
	if http == nil || http.PathPrefix != "/v1/" || !slices.Equal(http.Methods, []string{"GET", "POST"}) {
		t.Errorf("http rule: %+v", http)
	}
	if _, err := policy.Describe(policy.Rules{Allow: []string{"*"}}, nil); err == nil {
		t.Error("Describe accepted the rule *")
	}
}

func TestCredentialFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    v1.Credential
		want []string
	}{
		{"narrow", v1.Credential{Secret: "gh", Hosts: []string{"api.github.com"}, Methods: []string{"GET"}}, []string{}},
		{"any method", v1.Credential{Secret: "gh", Hosts: []string{"api.github.com"}}, []string{"credential-any-method/medium"}},
		{"shared wildcard host", v1.Credential{Secret: "aws", Hosts: []string{"*.s3.amazonaws.com"}, Methods: []string{"GET"}}, []string{"credential-shared-host/high"}},
		{"path-shared host", v1.Credential{Secret: "gcs", Hosts: []string{"storage.googleapis.com:443"}, Methods: []string{"PUT"}}, []string{"credential-shared-host/high"}},
		{"plain http", v1.Credential{Secret: "x", Hosts: []string{"a.example"}, Methods: []string{"GET"}, PlainHTTP: true}, []string{"credential-plain-http/medium"}},
		{"github write", v1.Credential{Secret: "app", Hosts: []string{"api.github.com"}, Methods: []string{"GET"},
			GitHub: &v1.GitHubScope{Repositories: []string{"r"}, Permissions: map[string]string{"contents": "write", "issues": "read"}}}, []string{"github-write/low"}},
	} {
		if got := kinds(CredentialFlags(tc.c)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUserFlags(t *testing.T) {
	creds := []v1.Credential{{Secret: "gh"}}
	users := []v1.User{{Name: "a"}, {Name: "b", Sudo: true}, {Name: "c", Sudo: true, Egress: &v1.UserEgress{Allow: []string{"x.example"}}}, {Name: "d", Egress: &v1.UserEgress{}}}
	got := kinds(UserFlags(users, creds))
	want := []string{"sudo-with-credentials/medium", "sudo-with-credentials/medium", "sudo-bypasses-user-egress/medium"}
	if !slices.Equal(got, want) {
		t.Errorf("%v, want %v", got, want)
	}
	if got := UserFlags(users[:1], creds); len(got) != 0 {
		t.Errorf("no sudo: %v", got)
	}
	if got := kinds(UserFlags(users[1:2], nil)); len(got) != 0 {
		t.Errorf("sudo without credentials: %v", got)
	}
}

func TestTierFlags(t *testing.T) {
	read := tiers.Builtins()[0]
	edit := tiers.Builtins()[1]
	operate := tiers.Builtins()[3]
	sb := func(run v1.PolicyRules, creds []v1.Credential, push, protected string) v1.Sandbox {
		return v1.Sandbox{Policy: v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": run}}, Credentials: creds, GitPush: push, GitProtected: protected}
	}
	entries := func(s v1.Sandbox) map[string][]policy.Entry {
		out := map[string][]policy.Entry{}
		for n, p := range s.Policy.Phases {
			out[n], _ = policy.Describe(policy.Rules{Net: p.Net, Allow: p.Allow, HTTP: p.HTTP, Deny: p.Deny, Ask: p.Ask}, s.Policy.Sets)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		tier tiers.Tier
		sb   v1.Sandbox
		want int
		has  string
	}{
		{"read as made", read, sb(v1.PolicyRules{HTTP: []string{"api.example.com GET,HEAD"}}, []v1.Credential{{Secret: "s", Methods: []string{"GET"}}}, "none", "refuse"), 0, ""},
		{"read, policy widened to allow-all", read, sb(v1.PolicyRules{Net: "allow-all"}, nil, "none", "refuse"), 1, "allow-all"},
		{"read, plain allow rule", read, sb(v1.PolicyRules{Allow: []string{"api.example.com"}}, nil, "none", "refuse"), 1, "every method"},
		{"read, POST", read, sb(v1.PolicyRules{HTTP: []string{"api.example.com POST"}}, nil, "none", "refuse"), 1, "allows POST"},
		{"read, credential any method", read, sb(v1.PolicyRules{}, []v1.Credential{{Secret: "s"}}, "none", "refuse"), 1, "GET and HEAD"},
		{"read, push", read, sb(v1.PolicyRules{}, nil, "agent-branch", "refuse"), 1, "pushes"},
		{"edit as made", edit, sb(v1.PolicyRules{Allow: []string{"api.example.com"}}, []v1.Credential{{Secret: "s"}}, "agent-branch", "refuse"), 0, ""},
		{"edit, hold", edit, sb(v1.PolicyRules{}, nil, "agent-branch", "hold"), 1, "held"},
		{"operate without approve", operate, sb(v1.PolicyRules{}, []v1.Credential{{Secret: "s"}}, "agent-branch", "hold"), 1, "without approval"},
		{"operate with approve", operate, sb(v1.PolicyRules{}, []v1.Credential{{Secret: "s", Approve: true}}, "agent-branch", "hold"), 0, ""},
	} {
		got := TierFlags(tc.tier, tc.sb, entries(tc.sb))
		if len(got) != tc.want || (tc.has != "" && !strings.Contains(got[0].Detail, tc.has)) {
			t.Errorf("%s: %+v, want %d flags mentioning %q", tc.name, got, tc.want, tc.has)
		}
	}
}

func TestKeyFlags(t *testing.T) {
	if got := kinds(KeyFlags(v1.APIKey{ID: "k", Approver: true})); !slices.Equal(got, []string{"approver-key/low", "no-key-maxima/low"}) {
		t.Error(got)
	}
	if got := KeyFlags(v1.APIKey{ID: "k", Max: v1.KeyMaxima{CPUs: 1}}); len(got) != 0 {
		t.Error(got)
	}
}

// FuzzRuleFlags: any rule text Describe accepts gets flags without a panic, deny rules
// never widen, and a wildcard over a shared domain is always flagged.
func FuzzRuleFlags(f *testing.F) {
	for _, s := range []string{"*.s3.amazonaws.com", "10.0.0.0/8", "api.github.com:443", "*.com", "registries", "0.0.0.0/0:1-65535", "*.github.io:80"} {
		f.Add("allow", s)
		f.Add("deny", s)
		f.Add("ask", s)
	}
	f.Fuzz(func(t *testing.T, verb, rule string) {
		var r policy.Rules
		switch verb {
		case "allow":
			r.Allow = []string{rule}
		case "deny":
			r.Deny = []string{rule}
		case "ask":
			r.Ask = []string{rule}
		default:
			r.HTTP = []string{rule}
		}
		es, err := policy.Describe(r, nil)
		if err != nil {
			return
		}
		if _, cerr := policy.Compile(r, nil); cerr != nil {
			t.Fatalf("Describe accepted %q that Compile rejects: %v", rule, cerr)
		}
		for _, e := range es {
			fs := RuleFlags(e)
			if e.Verb == "deny" && len(fs) > 0 {
				t.Fatalf("deny rule %q flagged: %v", e.Text, fs)
			}
			if e.Verb != "deny" && e.Kind == "wildcard" {
				if _, ok := sharedOver(e.Host); ok && len(fs) == 0 {
					t.Fatalf("wildcard %q over a shared domain not flagged", e.Text)
				}
			}
		}
	})
}

// TestScanSetID: set-id files of a template's layers are listed as paths inside the
// sandbox; an upper layer's file hides the lower one's; sudo and su are flagged.
func TestScanSetID(t *testing.T) {
	upper, lower := t.TempDir(), t.TempDir()
	write := func(dir, rel string, mode os.FileMode) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write(lower, "bin/sudo", 0o755|os.ModeSetuid)
	write(lower, "bin/wall", 0o755|os.ModeSetgid)
	write(lower, "bin/ls", 0o755)
	write(lower, "bin/mount", 0o755|os.ModeSetuid)
	write(upper, "bin/mount", 0o755) // the upper layer's mount is not set-uid
	write(upper, "sbin/su", 0o755|os.ModeSetuid)
	tpl := sandbox.Template{Parts: []sandbox.Part{{Target: "/usr", Layers: []string{upper, lower}}}}
	got, err := ScanSetID(context.Background(), tpl)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/bin/sudo", "/usr/bin/wall", "/usr/sbin/su"}; !slices.Equal(got, want) {
		t.Fatalf("ScanSetID = %v, want %v", got, want)
	}
	fs := TemplateFlags(v1.InventoryTemplate{Scanned: true, DefaultUser: "", SetID: got})
	if k := kinds(fs); !slices.Equal(k, []string{"template-setid-root/low", "template-root-user/low"}) || !strings.Contains(fs[0].Detail, "/usr/bin/sudo, /usr/sbin/su") {
		t.Errorf("template flags %v %+v", k, fs)
	}
	if fs := TemplateFlags(v1.InventoryTemplate{Scanned: true, DefaultUser: "agent", SetID: []string{"/usr/bin/wall"}}); len(fs) != 0 {
		t.Errorf("narrow template flagged: %+v", fs)
	}
	if fs := TemplateFlags(v1.InventoryTemplate{}); len(fs) != 0 {
		t.Errorf("unscanned template flagged: %+v", fs)
	}
}
