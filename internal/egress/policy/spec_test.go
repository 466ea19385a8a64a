package policy

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestDenyAllAndSingle(t *testing.T) {
	c, err := CompileSpec(DenyAll())
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.Phase("run")
	if !ok || c.Initial() != "run" || !slices.Equal(c.Phases(), []string{"run"}) {
		t.Fatalf("DenyAll compiled to phases %v, initial %q", c.Phases(), c.Initial())
	}
	if d := p.Decide(named("example.com", 443)); d.Allow || d.Rule != "net deny-all" {
		t.Errorf("DenyAll: %+v", d)
	}
	s := Single(Rules{Allow: []string{"example.com"}})
	if s.Phase != "run" || !reflect.DeepEqual(s.Phases["run"], Rules{Allow: []string{"example.com"}}) {
		t.Errorf("Single = %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("Single(...).Validate: %v", err)
	}
}

func TestSpecJSON(t *testing.T) {
	in := `{"phases":{"setup":{"allow":["registries"]},"run":{"net":"deny-all"}},"phase":"setup","sets":{"registries":["m.internal"]}}`
	var s Spec
	if err := json.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"phases":{"run":{"net":"deny-all"},"setup":{"allow":["registries"]}},"phase":"setup","sets":{"registries":["m.internal"]}}` {
		t.Errorf("JSON = %s", out)
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		err  string
	}{
		{"no phases", Spec{Phase: "run"}, "phases: at least one phase is required"},
		{"unknown phase", Spec{Phases: map[string]Rules{"run": {}}, Phase: "setup"}, `phase "setup": no such phase (have run)`},
		{"bad phase name", Spec{Phases: map[string]Rules{"Run Now": {}}, Phase: "Run Now"}, `phases: "Run Now" is not a valid phase name`},
		{"bad rule in phase", Spec{Phases: map[string]Rules{"run": {}, "setup": {Allow: []string{"x.test:http"}}}, Phase: "run"},
			`phase "setup": allow rule "x.test:http": port "http" is not a number`},
		{"bad net in phase", Spec{Phases: map[string]Rules{"run": {Net: "none"}}, Phase: "run"}, `phase "run": net "none"`},
		{"deny-all with allow", Spec{Phases: map[string]Rules{"run": {Net: NetDenyAll, Allow: []string{"registries"}}}, Phase: "run"},
			`phase "run": net deny-all takes no allow rules`},
		{"bad set", Spec{Phases: map[string]Rules{"run": {}}, Phase: "run", Sets: map[string][]string{"s": {"*"}}}, `sets: "s": member "*"`},
	}
	// Validate leaves an empty phase to the entry point; CompileSpec needs one.
	noPhase := Spec{Phases: map[string]Rules{"a": {}, "b": {}}}
	if err := noPhase.Validate(); err != nil {
		t.Errorf("Validate without a phase: %v", err)
	}
	if _, err := CompileSpec(noPhase); err == nil || !strings.Contains(err.Error(), "phase: not set; name one of a, b") {
		t.Errorf("CompileSpec without a phase: %v", err)
	}
	for _, tt := range tests {
		err := tt.spec.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: Validate() = %v; want error containing %q", tt.name, err, tt.err)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v is not ErrInvalidArgument", tt.name, err)
		}
	}
}

func TestParseFile(t *testing.T) {
	tests := []struct {
		name   string
		yaml   string
		phase  string
		phases map[string]string // phase → String() of its policy
		sets   map[string][]string
	}{
		{
			name: "single form",
			yaml: `
# comment
net: deny-all
deny: ["evil.example.com"]
`,
			phase:  "run",
			phases: map[string]string{"run": "deny-all; deny evil.example.com"},
		},
		{
			name: "single form with sets",
			yaml: `
allow: [registries, "api.github.com:443", "*.example.com", "10.1.0.0/16:5432"]
deny: ["evil.example.com"]
sets:
  registries: [my-mirror.internal]
`,
			phase:  "run",
			phases: map[string]string{"run": "allow registries, api.github.com:443, *.example.com, 10.1.0.0/16:5432; deny evil.example.com"},
			sets:   map[string][]string{"registries": {"my-mirror.internal"}},
		},
		{
			name:   "single form explicit phase run",
			yaml:   "phase: run\nallow: [x.test]\n",
			phase:  "run",
			phases: map[string]string{"run": "allow x.test"},
		},
		{
			name: "phases with explicit phase",
			yaml: `
phases:
  setup: {allow: [registries]}
  run:   {net: deny-all}
phase: run
`,
			phase:  "run",
			phases: map[string]string{"setup": "allow registries", "run": "deny-all"},
		},
		{
			name:   "phases without phase start in run, not setup",
			yaml:   "phases:\n  setup: {allow: [registries]}\n  run: {net: deny-all}\n",
			phase:  "run",
			phases: map[string]string{"setup": "allow registries", "run": "deny-all"},
		},
		{
			name:   "phases default run",
			yaml:   "phases:\n  build: {net: allow-all}\n  run: {net: deny-all}\n",
			phase:  "run",
			phases: map[string]string{"build": "allow-all", "run": "deny-all"},
		},
		{
			name:   "phases default only",
			yaml:   "phases:\n  build: {net: allow-all}\n",
			phase:  "build",
			phases: map[string]string{"build": "allow-all"},
		},
		{
			name:   "null lists",
			yaml:   "allow:\ndeny: ~\n",
			phase:  "run",
			phases: map[string]string{"run": "deny-all"},
		},
		{
			name:   "anchors and aliases",
			yaml:   "phases:\n  setup: {allow: &common [x.test, registries]}\n  run: {allow: *common, deny: [evil.test]}\n",
			phase:  "run",
			phases: map[string]string{"setup": "allow x.test, registries", "run": "allow x.test, registries; deny evil.test"},
		},
		{
			name:   "phase with null rules",
			yaml:   "phases:\n  run:\n",
			phase:  "run",
			phases: map[string]string{"run": "deny-all"},
		},
		{
			name:   "phases with user set",
			yaml:   "phases:\n  run: {allow: [gh]}\nsets:\n  gh: [github.com]\n",
			phase:  "run",
			phases: map[string]string{"run": "allow gh"},
			sets:   map[string][]string{"gh": {"github.com"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseFile([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if named := !strings.Contains(tt.yaml, "phases:") || strings.Contains(tt.yaml, "\nphase:"); !named && s.Phase != "" {
				t.Errorf("Phase = %q; a phases file without phase leaves it to the entry point", s.Phase)
			}
			if s, err = s.WithStartPhase(StartCreate, ""); err != nil {
				t.Fatal(err)
			}
			if s.Phase != tt.phase {
				t.Errorf("Phase = %q; want %q", s.Phase, tt.phase)
			}
			if !reflect.DeepEqual(s.Sets, tt.sets) {
				t.Errorf("Sets = %v; want %v", s.Sets, tt.sets)
			}
			c, err := CompileSpec(s)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, name := range c.Phases() {
				p, _ := c.Phase(name)
				got[name] = p.String()
			}
			if !reflect.DeepEqual(got, tt.phases) {
				t.Errorf("phases = %v; want %v", got, tt.phases)
			}
		})
	}
}

func TestParseFileErrors(t *testing.T) {
	tests := []struct {
		name, yaml, err string
	}{
		{"empty", "", "policy file is empty"},
		{"only comments", "# nothing\n", "policy file is empty"},
		{"unknown field", "net: deny-all\nalow: [x.test]\n", `line 2: unknown field "alow"`},
		{"unknown field in phase", "phases:\n  run:\n    net: deny-all\n    allowed: [x]\n", `line 4: unknown field "allowed"`},
		{"duplicate key", "net: deny-all\nnet: allow-all\n", `line 2: mapping key "net" already defined at line 1`},
		{"wrong type", "allow: registries\n", "line 1: want a list of rules"},
		{"wrong set type", "sets:\n  a: x.test\n", "line 2: want a list of rules"},
		{"wrong phase type", "phases:\n  run: [x]\n", "into a phase"},
		{"syntax", "allow: [x.test\n", "line"},
		{"two documents", "net: deny-all\n---\nnet: allow-all\n", "more than one YAML document"},
		{"mixed", "allow: [x.test]\nphases:\n  run: {}\n", "cannot be combined with phases"},
		{"mixed net", "net: deny-all\nphases:\n  run: {}\n", "cannot be combined with phases"},
		{"empty phases", "phases: {}\n", "at least one phase"},
		{"unknown phase", "phases:\n  run: {}\nphase: setup\n", `phase "setup": no such phase`},
		{"single form other phase", "phase: setup\nallow: [x.test]\n", `phase "setup": a policy without phases has only phase "run"`},
		{"bad rule", "allow: [\"https://x.test\"]\n", `phase "run": allow rule "https://x.test"`},
		{"bad rule in phases", "phases:\n  setup: {deny: [\"x.test:0\"]}\n", `phase "setup": deny rule "x.test:0"`},
		{"deny-all with allow", "net: deny-all\nallow: [x.test]\n", "net deny-all takes no allow rules"},
		{"bad net", "net: none\n", `net "none"`},
		{"nested set", "sets:\n  a: [registries]\n", `member "registries" is a set`},
		{"bad set name", "sets:\n  a.b: [x.test]\n", `"a.b" is not a valid set name`},
		{"null rule", "allow: [~]\n", "line 1: a rule must be a string"},
		{"null set member", "sets:\n  a: [x.test, null]\n", "line 2: a rule must be a string"},
		{"mapping rule", "deny:\n  - x.test\n  - {a: b}\n", "line 3: a rule must be a string"},
		{"empty rule", "allow: [\"\"]\n", "empty rule"},
		{"numeric rule", "allow: [443]\n", "IP address"},
		{"not a mapping", "- x.test\n", "cannot unmarshal"},
	}
	for _, tt := range tests {
		_, err := ParseFile([]byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: ParseFile error = %v; want it to contain %q", tt.name, err, tt.err)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v is not ErrInvalidArgument", tt.name, err)
		}
		if strings.Contains(err.Error(), "policy.") {
			t.Errorf("%s: error names a Go type: %v", tt.name, err)
		}
	}
}

// TestStartPhase: the phase a sandbox is in once a policy is applied, per entry point.
// The main command runs in "run" unless a setup command runs first or a phase is named.
func TestStartPhase(t *testing.T) {
	phases := func(names ...string) map[string]Rules {
		m := map[string]Rules{}
		for _, n := range names {
			m[n] = Rules{}
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		spec    Spec
		start   Start
		current string
		want    string // or the error's text
		err     bool
	}{
		{name: "create: setup and run", spec: Spec{Phases: phases("setup", "run")}, start: StartCreate, want: "run"},
		{name: "create: only setup", spec: Spec{Phases: phases("setup")}, start: StartCreate, want: "setup"},
		{name: "create: one other phase", spec: Spec{Phases: phases("build")}, start: StartCreate, want: "build"},
		{name: "create: named setup", spec: Spec{Phases: phases("setup", "run"), Phase: "setup"}, start: StartCreate, want: "setup"},
		{name: "create: named other", spec: Spec{Phases: phases("setup", "run", "x"), Phase: "x"}, start: StartCreate, want: "x"},
		{name: "create: named unknown", spec: Spec{Phases: phases("run"), Phase: "setup"}, start: StartCreate, err: true, want: `phase "setup": no such phase (have run)`},
		{name: "create: ambiguous", spec: Spec{Phases: phases("setup", "build")}, start: StartCreate, err: true, want: "ambiguous among build, setup"},
		{name: "create: no phases", spec: Spec{}, start: StartCreate, err: true, want: "at least one phase"},
		{name: "create: current ignored", spec: Spec{Phases: phases("setup", "run")}, start: StartCreate, current: "setup", want: "run"},

		{name: "setup: setup and run", spec: Spec{Phases: phases("setup", "run")}, start: StartSetup, want: "setup"},
		{name: "setup: overrides a named phase", spec: Spec{Phases: phases("setup", "run"), Phase: "run"}, start: StartSetup, want: "setup"},
		{name: "setup: no run", spec: Spec{Phases: phases("setup", "build")}, start: StartSetup, err: true, want: `needs a policy with "setup" and "run" phases (have build, setup)`},
		{name: "setup: no setup", spec: Spec{Phases: phases("run")}, start: StartSetup, err: true, want: `needs a policy with "setup" and "run"`},

		{name: "replace: keeps current", spec: Spec{Phases: phases("setup", "run")}, start: StartReplace, current: "setup", want: "setup"},
		{name: "replace: keeps current other", spec: Spec{Phases: phases("build", "run")}, start: StartReplace, current: "build", want: "build"},
		{name: "replace: current gone, run", spec: Spec{Phases: phases("setup", "run")}, start: StartReplace, current: "closed", want: "run"},
		{name: "replace: current gone, only phase", spec: Spec{Phases: phases("setup")}, start: StartReplace, current: "run", want: "setup"},
		{name: "replace: named wins", spec: Spec{Phases: phases("setup", "run"), Phase: "run"}, start: StartReplace, current: "setup", want: "run"},
		{name: "replace: current gone, ambiguous", spec: Spec{Phases: phases("a", "b")}, start: StartReplace, current: "run", err: true, want: "ambiguous among a, b"},
		{name: "replace: no current", spec: Spec{Phases: phases("setup", "run")}, start: StartReplace, want: "run"},
	} {
		got, err := tc.spec.StartPhase(tc.start, tc.current)
		switch {
		case tc.err && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: StartPhase = %q, %v; want an error containing %q", tc.name, got, err, tc.want)
		case tc.err && !errors.Is(err, errdefs.ErrInvalidArgument):
			t.Errorf("%s: %v is not ErrInvalidArgument", tc.name, err)
		case !tc.err && (err != nil || got != tc.want):
			t.Errorf("%s: StartPhase = %q, %v; want %q", tc.name, got, err, tc.want)
		}
		if !tc.err {
			s, err := tc.spec.WithStartPhase(tc.start, tc.current)
			if err != nil || s.Phase != tc.want {
				t.Errorf("%s: WithStartPhase = %q, %v", tc.name, s.Phase, err)
			}
			if _, err := CompileSpec(s); err != nil {
				t.Errorf("%s: the chosen phase does not compile: %v", tc.name, err)
			}
		}
	}
}
