package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Spec is a sandbox's whole egress policy: named phases and the current one.
type Spec struct {
	Phases map[string]Rules `json:"phases" yaml:"phases"`
	// Phase is the current phase; it must name one of Phases.
	Phase string `json:"phase" yaml:"phase"`
	// Sets are user-defined named sets of rule strings; one named like a built-in set
	// extends it.
	Sets map[string][]string `json:"sets,omitempty" yaml:"sets,omitempty"`
	// AskAll holds every connection that no rule allows or denies for a person's decision
	// instead of refusing it (`moat create --ask`), in every phase but a net deny-all one.
	AskAll bool `json:"ask_all,omitempty" yaml:"ask_all,omitempty"`
	// AskWait is how long a connection is held at most, as a Go duration ("90s", "2m");
	// "" is the daemon's default (2m). See AskWaitDuration.
	AskWait string `json:"ask_wait,omitempty" yaml:"ask_wait,omitempty"`
}

// The phase a single-phase policy has, and where a sandbox's main command runs.
const defaultPhase = "run"

// The phase a setup command runs in (StartSetup).
const setupPhase = "setup"

// DenyAll returns the policy that allows nothing: one phase "run" with net deny-all.
func DenyAll() Spec { return Single(Rules{Net: NetDenyAll}) }

// Single returns a one-phase policy whose phase is "run".
func Single(r Rules) Spec {
	return Spec{Phases: map[string]Rules{defaultPhase: r}, Phase: defaultPhase}
}

// HasHTTPRules reports whether a phase of s has HTTP rules, its own or those of a set it
// allows (such as "registries").
func (s Spec) HasHTTPRules() bool {
	sets, err := resolveSets(s.Sets)
	for _, r := range s.Phases {
		if len(r.HTTP) > 0 {
			return true
		}
		if err != nil {
			continue // does not compile: nothing will be inspected
		}
		for _, entry := range r.Allow {
			for _, m := range sets[strings.ToLower(strings.TrimSpace(entry))] {
				if m.http != nil {
					return true
				}
			}
		}
	}
	return false
}

// Validate reports the first thing CompileSpec would reject, except that an empty Phase is
// allowed: the entry point that applies the policy chooses it (StartPhase).
func (s Spec) Validate() error {
	if s.Phase == "" && len(s.Phases) > 0 {
		s.Phase = slices.Min(slices.Collect(maps.Keys(s.Phases)))
	}
	_, err := CompileSpec(s)
	return err
}

// Start is where a policy is applied. It decides the phase a policy that names none
// starts in (Spec.StartPhase).
type Start uint8

const (
	// StartCreate: a new sandbox whose commands run at once (the API's create, `moat
	// create`, `moat run` without --setup).
	StartCreate Start = iota
	// StartSetup: a new sandbox that first runs a setup command and then switches to
	// "run" (`moat run --setup`).
	StartSetup
	// StartReplace: a new policy for a sandbox that has one (PUT /v1/sandboxes/{id}/policy
	// without a phase, `moat policy set` without --phase).
	StartReplace
)

// StartPhase returns the phase a sandbox is in once s is applied at start; current is
// the sandbox's phase before (StartReplace only). The first rule that answers decides:
//
//  1. StartSetup: "setup"; s must have a "setup" and a "run" phase.
//  2. The phase s names (s.Phase), which must be one of its phases.
//  3. StartReplace: current, if s has a phase of that name.
//  4. "run", if s has it.
//  5. s's only phase.
//
// Otherwise the phase is ambiguous and StartPhase returns an error of class
// errdefs.ErrInvalidArgument. So the main command of a sandbox runs in "run" unless
// someone asked for another phase: "setup" is only ever entered by a setup command or by
// naming it. StartPhase is pure.
func (s Spec) StartPhase(start Start, current string) (string, error) {
	has := func(name string) bool { _, ok := s.Phases[name]; return ok }
	names := slices.Sorted(maps.Keys(s.Phases))
	switch {
	case len(names) == 0:
		return "", invalidf("phases: at least one phase is required")
	case start == StartSetup:
		if !has(setupPhase) || !has(defaultPhase) {
			return "", invalidf("a setup command needs a policy with %q and %q phases (have %s)", setupPhase, defaultPhase, strings.Join(names, ", "))
		}
		return setupPhase, nil
	case s.Phase != "":
		if !has(s.Phase) {
			return "", invalidf("phase %q: no such phase (have %s)", s.Phase, strings.Join(names, ", "))
		}
		return s.Phase, nil
	case start == StartReplace && current != "" && has(current):
		return current, nil
	case has(defaultPhase):
		return defaultPhase, nil
	case len(names) == 1:
		return names[0], nil
	}
	return "", invalidf("phase: not set and ambiguous among %s (no %q phase); name the phase", strings.Join(names, ", "), defaultPhase)
}

// WithStartPhase returns s with Phase set by StartPhase.
func (s Spec) WithStartPhase(start Start, current string) (Spec, error) {
	p, err := s.StartPhase(start, current)
	if err != nil {
		return s, err
	}
	s.Phase = p
	return s, nil
}

// Compiled is a compiled Spec: every phase's Policy. It is immutable.
type Compiled struct {
	phases  map[string]*Policy
	names   []string
	initial string
	askWait time.Duration
}

// AskWait is the spec's ask_wait (0: the daemon's default).
func (c *Compiled) AskWait() time.Duration { return c.askWait }

// CompileSpec compiles the sets and every phase of s. Phase names are 1-63 of
// [a-z0-9_-] starting with a letter or digit; s.Phase must name a phase.
func CompileSpec(s Spec) (*Compiled, error) {
	if len(s.Phases) == 0 {
		return nil, invalidf("phases: at least one phase is required")
	}
	sets, err := resolveSets(s.Sets)
	if err != nil {
		return nil, err
	}
	wait, err := s.AskWaitDuration()
	if err != nil {
		return nil, err
	}
	c := &Compiled{
		phases:  make(map[string]*Policy, len(s.Phases)),
		names:   slices.Sorted(maps.Keys(s.Phases)),
		initial: s.Phase,
		askWait: wait,
	}
	for _, name := range c.names {
		if !validWord(name) {
			return nil, invalidf("phases: %q is not a valid phase name (lowercase letters, digits, '-' and '_', starting with a letter or digit)", name)
		}
		p, err := compile(s.Phases[name], sets, s.AskAll)
		if err != nil {
			return nil, fmt.Errorf("phase %q: %w", name, err)
		}
		c.phases[name] = p
	}
	switch _, ok := c.phases[s.Phase]; {
	case s.Phase == "":
		return nil, invalidf("phase: not set; name one of %s", strings.Join(c.names, ", "))
	case !ok:
		return nil, invalidf("phase %q: no such phase (have %s)", s.Phase, strings.Join(c.names, ", "))
	}
	return c, nil
}

// Phase returns the compiled policy of the named phase.
func (c *Compiled) Phase(name string) (*Policy, bool) {
	p, ok := c.phases[name]
	return p, ok
}

// Phases returns the phase names, sorted.
func (c *Compiled) Phases() []string { return slices.Clone(c.names) }

// Initial returns the name of the Spec's current phase at compile time.
func (c *Compiled) Initial() string { return c.initial }

// file is the YAML policy file: either the single-phase form (net, allow, deny) or the
// phases form (phases, phase), with sets in both.
type file struct {
	Net     string               `yaml:"net"`
	Allow   ruleList             `yaml:"allow"`
	Deny    ruleList             `yaml:"deny"`
	HTTP    ruleList             `yaml:"http"`
	Ask     ruleList             `yaml:"ask"`
	AskAll  bool                 `yaml:"ask_all"`
	AskWait string               `yaml:"ask_wait"`
	Phases  map[string]filePhase `yaml:"phases"`
	Phase   string               `yaml:"phase"`
	Sets    map[string]ruleList  `yaml:"sets"`
}

// filePhase is Rules as the file spells it.
type filePhase struct {
	Net   string   `yaml:"net"`
	Allow ruleList `yaml:"allow"`
	Deny  ruleList `yaml:"deny"`
	HTTP  ruleList `yaml:"http"`
	Ask   ruleList `yaml:"ask"`
}

// ruleList is a YAML sequence of rule strings. Unlike []string it rejects null and
// non-scalar entries instead of dropping or mangling them.
type ruleList []string

func (l *ruleList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return invalidf("line %d: want a list of rules", n.Line)
	}
	out := make(ruleList, 0, len(n.Content))
	for _, e := range n.Content {
		if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
			return invalidf("line %d: a rule must be a string", e.Line)
		}
		out = append(out, e.Value)
	}
	*l = out
	return nil
}

// ParseFile parses and validates a YAML policy file, in one of two forms:
//
//	# single phase, which becomes phase "run"
//	net: deny-all   # optional
//	allow: [registries, "api.github.com:443"]
//	deny: [evil.example.com]
//	http: ["api.github.com GET,POST /repos/acme/"]
//	sets: {registries: [my-mirror.internal]}
//
//	# phases
//	phases:
//	  setup: {allow: [registries]}
//	  run: {net: deny-all}
//	phase: setup
//
// The single-phase form has phase "run". In the phases form, "phase" is optional: without
// it the returned Spec's Phase is empty and the entry point that applies it chooses
// (Spec.StartPhase: "run" unless a setup command runs first). Unknown fields, duplicate
// keys, more than one YAML document, and mixing top-level net/allow/deny with phases are
// errors.
func ParseFile(data []byte) (Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f file
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return Spec{}, invalidf("policy file is empty")
		}
		return Spec{}, yamlError(err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return Spec{}, yamlError(err)
		}
		return Spec{}, invalidf("line %d: policy file holds more than one YAML document", next.Line)
	}

	s := Spec{Phase: f.Phase, AskAll: f.AskAll, AskWait: f.AskWait}
	if f.Sets != nil {
		s.Sets = make(map[string][]string, len(f.Sets))
		for name, members := range f.Sets {
			s.Sets[name] = members
		}
	}
	if f.Phases == nil {
		if f.Phase != "" && f.Phase != defaultPhase {
			return Spec{}, invalidf("phase %q: a policy without phases has only phase %q", f.Phase, defaultPhase)
		}
		s.Phases = map[string]Rules{defaultPhase: {Net: f.Net, Allow: f.Allow, Deny: f.Deny, HTTP: f.HTTP, Ask: f.Ask}}
		s.Phase = defaultPhase
	} else {
		if f.Net != "" || f.Allow != nil || f.Deny != nil || f.HTTP != nil || f.Ask != nil {
			return Spec{}, invalidf("top-level net, allow, deny, http and ask cannot be combined with phases; move them into a phase")
		}
		s.Phases = make(map[string]Rules, len(f.Phases))
		for name, r := range f.Phases {
			s.Phases[name] = Rules{Net: r.Net, Allow: r.Allow, Deny: r.Deny, HTTP: r.HTTP, Ask: r.Ask}
		}
		if len(s.Phases) == 0 {
			return Spec{}, invalidf("phases: at least one phase is required")
		}
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// yamlError rewrites a yaml error for the person who wrote the file, keeping line
// numbers and dropping Go type names.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return invalidf("%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	// Name this package's Go types the way the file's author knows them.
	goTypes := strings.NewReplacer("policy.filePhase", "a phase", "policy.file", "a policy file")
	msgs := make([]string, 0, len(te.Errors))
	for _, msg := range te.Errors {
		// "line 3: field foo not found in type policy.file"
		if head, _, ok := strings.Cut(msg, " not found in type "); ok {
			if line, field, ok := strings.Cut(head, ": field "); ok {
				msg = fmt.Sprintf("%s: unknown field %q", line, field)
			}
		}
		msgs = append(msgs, goTypes.Replace(msg))
	}
	return invalidf("%s", strings.Join(msgs, "; "))
}
