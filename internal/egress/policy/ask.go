package policy

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Ask mode. A connection that no allow rule allows and no deny rule denies is held for a
// person's decision instead of refused when an ask rule of its phase covers it
// (Rules.Ask: rule strings as in allow, or sets without HTTP rules) or when the spec asks
// for everything (Spec.AskAll, `moat create --ask`). Decide then answers Ask (never
// Allow); the DNS server answers such names like allowed ones, and the proxy holds the
// connection (internal/egress/proxy). The order of Decide stays: deny rules win, then
// net allow-all, allow rules, ask rules, ask_all, default deny. net deny-all denies
// everything, ask_all included, and takes no ask rules.

// Bounds of Spec.AskWait.
const (
	DefaultAskWait = 2 * time.Minute
	MinAskWait     = time.Second
	MaxAskWait     = 24 * time.Hour
)

// AskWaitDuration parses s.AskWait: 0 for "" (the daemon's default), else a Go duration
// between MinAskWait and MaxAskWait.
func (s Spec) AskWaitDuration() (time.Duration, error) {
	if s.AskWait == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s.AskWait)
	if err != nil {
		return 0, invalidf("ask_wait %q: not a duration (e.g. 90s, 2m)", s.AskWait)
	}
	if d < MinAskWait || d > MaxAskWait {
		return 0, invalidf("ask_wait %s: must be between %s and %s", s.AskWait, MinAskWait, MaxAskWait)
	}
	return d, nil
}

// HasAsk reports whether s holds any connection for approval: ask_all, or an ask rule in
// some phase.
func (s Spec) HasAsk() bool {
	if s.AskAll {
		return true
	}
	for _, r := range s.Phases {
		if len(r.Ask) > 0 {
			return true
		}
	}
	return false
}

// compileAsk compiles a phase's ask rules into p.ask and returns their canonical texts.
func (p *Policy) compileAsk(entries []string, sets map[string][]member, askAll bool) ([]string, error) {
	for _, entry := range entries {
		for _, m := range sets[strings.ToLower(strings.TrimSpace(entry))] {
			if m.http != nil {
				return nil, invalidf("ask rule %q: the set has HTTP rules (%s); ask for its hosts by name instead", entry, m.text)
			}
		}
	}
	asked, err := p.ask.add("ask", entries, sets)
	if err != nil {
		return nil, err
	}
	p.askAll = askAll && p.net != netDenyAll
	return asked, nil
}

// askAll is the decision of Spec.AskAll.
func askAll() Decision {
	return Decision{Ask: true, Rule: "ask-all", Reason: "no rule allows it and the sandbox asks (--ask): held for approval"}
}

// AskRule returns the allow rule an approval for the whole sandbox adds for a connection:
// "NAME:PORT", or "ADDR:PORT" for a direct IPv4 connection (a CIDR rule of one address).
// ok is false when no rule can name it (no name and no IPv4 address, or port 0).
func AskRule(req Request) (rule string, ok bool) {
	if req.Port == 0 {
		return "", false
	}
	port := ":" + strconv.Itoa(int(req.Port))
	if req.Name != "" {
		name, err := NormalizeName(req.Name)
		if err != nil {
			return "", false
		}
		return name + port, true
	}
	if a := req.Addr.Unmap(); a.Is4() {
		return a.String() + port, true
	}
	return "", false
}

// WithAllowRule returns s with rule added to the allow rules of phase (a copy: s's maps
// and slices are not changed). A rule already there is not added twice. The result is
// validated.
func (s Spec) WithAllowRule(phase, rule string) (Spec, error) {
	r, ok := s.Phases[phase]
	if !ok {
		return s, invalidf("phase %q: no such phase", phase)
	}
	parsed, err := parseRule(rule)
	if err != nil {
		return s, invalidf("allow rule %q: %v", rule, err)
	}
	text := parsed.String()
	phases := make(map[string]Rules, len(s.Phases))
	for name, pr := range s.Phases {
		phases[name] = pr
	}
	if !slices.Contains(r.Allow, text) {
		r.Allow = append(slices.Clip(slices.Clone(r.Allow)), text)
	}
	phases[phase] = r
	out := s
	out.Phases = phases
	if err := out.Validate(); err != nil {
		return s, err
	}
	return out, nil
}
