package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512M", 512 << 20, true},
		{"2G", 2 << 30, true},
		{"2GiB", 2 << 30, true},
		{"100MB", 100 << 20, true},
		{"1.5G", 3 << 29, true},
		{"1048576", 1 << 20, true},
		{"64k", 64 << 10, true},
		{" 1T ", 1 << 40, true},
		{"", 0, false},
		{"-1G", 0, false},
		{"G", 0, false},
		{"12X", 0, false},
		{"1.5", 0, false},
		{"NaN", 0, false},
		{"1e3M", 0, false},
		{"99999999999T", 0, false},
		{"1..2M", 0, false},
	} {
		got, err := parseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512M", "2GiB", "1.5G", "0", "-1", "1e9", "9223372036854775807", "K"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("parseSize(%q) = %d: negative without error", s, n)
		}
	})
}

func TestParseDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"90", 90 * time.Second, true},
		{"90s", 90 * time.Second, true},
		{"1h30m", 90 * time.Minute, true},
		{"-5m", 0, false},
		{"-5", 0, false},
		{"soon", 0, false},
		{"99999999999999999", 0, false},
	} {
		got, err := parseDuration(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestShellLine(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"make test && echo ok"}, "make test && echo ok"},
		{[]string{"echo", "a b", "it's"}, `echo 'a b' 'it'\''s'`},
		{[]string{"ls", "-la", "/tmp"}, "ls -la /tmp"},
		{[]string{"printf", ""}, "printf ''"},
	} {
		if got := shellLine(c.in); got != c.want {
			t.Errorf("shellLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSplitRemote(t *testing.T) {
	for _, c := range []struct {
		in       string
		id, path string
		ok       bool
	}{
		{"sb-0123456789ab:/etc/hosts", "sb-0123456789ab", "/etc/hosts", true},
		{"sb-0123456789ab:rel/x", "sb-0123456789ab", "rel/x", true},
		{"./sb-x:y", "", "./sb-x:y", false},
		{"/tmp/a:b", "", "/tmp/a:b", false},
		{"file.txt", "", "file.txt", false},
	} {
		id, path, ok := splitRemote(c.in)
		if id != c.id || path != c.path || ok != c.ok {
			t.Errorf("splitRemote(%q) = %q %q %v", c.in, id, path, ok)
		}
	}
}

func TestParseCredentials(t *testing.T) {
	got, err := parseCredentials([]string{"GH_TOKEN@api.github.com,uploads.github.com"}, []string{"OPENAI@api.openai.com=Authorization: Bearer {{value}}"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Secret != "GH_TOKEN" || len(got[0].Hosts) != 2 || got[1].Header != "Authorization" || got[1].Template != "Bearer {{value}}" {
		t.Errorf("got %+v", got)
	}
	for _, bad := range [][2][]string{
		{{"GH_TOKEN"}, nil},
		{{"@host"}, nil},
		{nil, {"X@h.test"}},
		{nil, {"X@h.test=Authorization Bearer {{value}}"}},
		{nil, {"X@h.test=Authorization: Bearer"}},
	} {
		if _, err := parseCredentials(bad[0], bad[1]); err == nil {
			t.Errorf("parseCredentials(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// TestParseCredentialPlaceholderHeader: --credential NAME@HOST=HEADER names the header
// the placeholder is swapped in.
func TestParseCredentialPlaceholderHeader(t *testing.T) {
	got, err := parseCredentials([]string{"ANTHROPIC@api.anthropic.com/v1/=x-api-key", "GH@github.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].PlaceholderHeader != "x-api-key" || got[0].PathPrefix != "/v1/" || strings.Join(got[0].Hosts, ",") != "api.anthropic.com" || got[1].PlaceholderHeader != "" {
		t.Errorf("got %+v", got)
	}
	for _, bad := range []string{"K@a.test=", "K@a.test=X-Key: {{value}}", "K@a.test=X Key"} {
		if _, err := parseCredentials([]string{bad}, nil); err == nil {
			t.Errorf("parseCredentials(%q) accepted", bad)
		}
	}
}

func TestGitHubFlags(t *testing.T) {
	got, err := githubFlags{token: "GH@github.com,api.github.com", repos: []string{"widget", "gadget"}, perms: []string{"contents=write", "pull_requests:write"}}.credential()
	if err != nil {
		t.Fatal(err)
	}
	if got.Secret != "GH" || len(got.Hosts) != 2 || got.GitHub == nil || len(got.GitHub.Repositories) != 2 ||
		got.GitHub.Permissions["contents"] != "write" || got.GitHub.Permissions["pull_requests"] != "write" {
		t.Errorf("credential = %+v", got)
	}
	if got, err := (githubFlags{}).credential(); got != nil || err != nil {
		t.Errorf("no flags: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		f    githubFlags
		want string
	}{
		{githubFlags{repos: []string{"w"}}, "give one"},
		{githubFlags{token: "GH"}, "want NAME@"},
		{githubFlags{token: "GH@github.com"}, "needs --github-repo"},
		{githubFlags{token: "GH@github.com", repos: []string{"w"}, perms: []string{"contents"}}, "want PERMISSION=LEVEL"},
	} {
		if _, err := tc.f.credential(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", tc.f, err, tc.want)
		}
	}
}

func TestHTTPFlag(t *testing.T) {
	p := policyFlags{http: []string{"api.test GET /repos/acme/"}, allow: []string{"registries"}}
	got, err := p.spec(policy.StartCreate)
	if err != nil {
		t.Fatal(err)
	}
	if r := got.Phases["run"]; len(r.HTTP) != 1 || r.HTTP[0] != "api.test GET /repos/acme/" || len(r.Allow) != 1 {
		t.Errorf("spec = %+v", got)
	}
	if _, err := (&policyFlags{http: []string{"api.test get"}}).spec(policy.StartCreate); err == nil || !strings.Contains(err.Error(), "not an HTTP method") {
		t.Errorf("bad --http: %v", err)
	}
	if _, err := (&policyFlags{http: []string{"api.test"}, file: "x.yaml"}).spec(policy.StartCreate); err == nil || !strings.Contains(err.Error(), "--http") {
		t.Errorf("--http with --policy: %v", err)
	}
}

func TestParseCredentialPathPrefix(t *testing.T) {
	got, err := parseCredentials([]string{"GH@api.github.com/repos/acme/"}, []string{"K@http://a.test,b.test/v1/=X-Key: {{value}}"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].PathPrefix != "/repos/acme/" || strings.Join(got[0].Hosts, ",") != "api.github.com" ||
		got[1].PathPrefix != "/v1/" || strings.Join(got[1].Hosts, ",") != "a.test,b.test" || got[1].Header != "X-Key" ||
		got[0].PlainHTTP || !got[1].PlainHTTP {
		t.Errorf("got %+v", got)
	}
}

// TestPolicyFlagsPhase: the phase the CLI asks for, per command. A phases file that names
// none starts in "run" at create and run (without --setup), in "setup" with --setup, and
// policy set leaves it to the daemon (which keeps the sandbox's current phase).
func TestPolicyFlagsPhase(t *testing.T) {
	dir := t.TempDir()
	file := func(name, yaml string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	phased := file("phased.yaml", "phases:\n  setup: {allow: [x.test]}\n  run: {net: deny-all}\n")
	named := file("named.yaml", "phases:\n  setup: {allow: [x.test]}\n  run: {net: deny-all}\n  hold: {}\nphase: hold\n")
	runOnly := file("run.yaml", "phases:\n  run: {allow: [x.test]}\n")
	ambiguous := file("ambiguous.yaml", "phases:\n  a: {}\n  b: {}\n")
	for _, tc := range []struct {
		name  string
		flags policyFlags
		start policy.Start
		want  string // the phase, or the error
		err   bool
	}{
		{"create: phases file", policyFlags{file: phased}, policy.StartCreate, "run", false},
		{"setup: phases file", policyFlags{file: phased}, policy.StartSetup, "setup", false},
		{"policy set: phases file", policyFlags{file: phased}, policy.StartReplace, "", false},
		{"create: named phase", policyFlags{file: named}, policy.StartCreate, "hold", false},
		{"setup: named phase", policyFlags{file: named}, policy.StartSetup, "setup", false},
		{"policy set: named phase", policyFlags{file: named}, policy.StartReplace, "hold", false},
		{"setup: file without setup phase", policyFlags{file: runOnly}, policy.StartSetup, "setup", false},
		{"create: flags", policyFlags{allow: []string{"x.test"}}, policy.StartCreate, "run", false},
		{"setup: no flags", policyFlags{}, policy.StartSetup, "setup", false},
		{"create: ambiguous", policyFlags{file: ambiguous}, policy.StartCreate, "ambiguous among a, b", true},
		{"policy set: ambiguous is the daemon's call", policyFlags{file: ambiguous}, policy.StartReplace, "", false},
	} {
		got, err := tc.flags.spec(tc.start)
		switch {
		case tc.err:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case got.Phase != tc.want:
			t.Errorf("%s: phase %q, want %q", tc.name, got.Phase, tc.want)
		}
	}
	// --setup adds a read-only registries setup phase where the file has none.
	got, err := (&policyFlags{file: runOnly}).spec(policy.StartSetup)
	if err != nil || strings.Join(got.Phases["setup"].Allow, ",") != "registries" || len(got.Phases["run"].Allow) != 1 {
		t.Errorf("--setup with a run-only file: %+v, %v", got, err)
	}
}
