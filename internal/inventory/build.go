// Package inventory says what access each sandbox, template and API key actually has, and
// flags what widens it (flags.go). Everything here is pure: the API edge gathers the
// records (internal/apiserver/inventory.go) and Build turns them into a v1.Inventory.
package inventory

import (
	"cmp"
	"slices"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/doctor"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/tiers"
)

// Sandbox is one sandbox as the API reports it, with the API key that created it.
type Sandbox struct {
	API   v1.Sandbox
	Owner string
}

// Input is what Build needs.
type Input struct {
	Now time.Time
	// Operator: the caller is the operator (sees owners and every key); else APIKey is
	// the caller's key id.
	Operator  bool
	APIKey    string
	Sandboxes []Sandbox
	Templates []v1.Template
	Keys      []v1.APIKey
	// Tier returns the tier named name (ok false: unknown, e.g. removed since).
	Tier func(name string) (tiers.Tier, bool)
	// ProtectedPaths are the git gate's protected path globs (every sandbox's).
	ProtectedPaths []string
	Host           *doctor.Report // nil: no host section
	// ScanTemplate, if set, reads a template's default user and set-id programs
	// (ScanSetID); nil: templates are not scanned.
	ScanTemplate func(name string) (defaultUser string, setid []string, err error)
}

// Build assembles the inventory. Pure.
func Build(in Input) v1.Inventory {
	inv := v1.Inventory{GeneratedAt: in.Now.UTC(), Scope: "operator",
		Sandboxes: []v1.InventorySandbox{}, Templates: []v1.InventoryTemplate{}, APIKeys: []v1.InventoryAPIKey{}, Flags: []v1.InventoryFlag{}}
	if !in.Operator {
		inv.Scope, inv.APIKey = "api-key", in.APIKey
	}
	byTemplate, byKey := map[string]int{}, map[string]int{}
	sbs := slices.Clone(in.Sandboxes)
	slices.SortFunc(sbs, func(a, b Sandbox) int { return cmp.Compare(a.API.ID, b.API.ID) })
	for _, sb := range sbs {
		s := SandboxAccess(sb.API, in.ProtectedPaths, in.Tier)
		if in.Operator {
			s.Owner = sb.Owner
		}
		byTemplate[sb.API.Template]++
		byKey[sb.Owner]++
		inv.Sandboxes = append(inv.Sandboxes, s)
		inv.Flags = append(inv.Flags, s.Flags...)
	}
	for _, t := range in.Templates {
		it := v1.InventoryTemplate{Name: t.Name, Source: t.Source, Builtin: t.Builtin, Layers: t.Layers, Sandboxes: byTemplate[t.Name]}
		if in.ScanTemplate != nil {
			user, setid, err := in.ScanTemplate(t.Name)
			if err != nil {
				it.ScanError = err.Error()
			} else {
				it.Scanned, it.DefaultUser, it.SetID = true, user, setid
			}
		}
		inv.Templates = append(inv.Templates, it)
	}
	slices.SortFunc(inv.Templates, func(a, b v1.InventoryTemplate) int { return cmp.Compare(a.Name, b.Name) })
	for _, t := range inv.Templates {
		for _, f := range TemplateFlags(t) {
			f.Subject = "template " + t.Name
			inv.Flags = append(inv.Flags, f)
		}
	}
	for _, k := range in.Keys {
		if !in.Operator && k.ID != in.APIKey {
			continue
		}
		secrets := k.Secrets
		if secrets == nil {
			secrets = []string{}
		}
		inv.APIKeys = append(inv.APIKeys, v1.InventoryAPIKey{ID: k.ID, Secrets: secrets, Approver: k.Approver, Max: k.Max, Sandboxes: byKey[k.ID]})
		for _, f := range KeyFlags(k) {
			f.Subject = "api-key " + k.ID
			inv.Flags = append(inv.Flags, f)
		}
	}
	slices.SortFunc(inv.APIKeys, func(a, b v1.InventoryAPIKey) int { return cmp.Compare(a.ID, b.ID) })
	if in.Host != nil {
		inv.Host = hostSection(*in.Host)
	}
	slices.SortStableFunc(inv.Flags, func(a, b v1.InventoryFlag) int {
		return cmp.Compare(severityRank(a.Severity), severityRank(b.Severity))
	})
	return inv
}

// SandboxAccess is one sandbox's access and flags. Pure.
func SandboxAccess(sb v1.Sandbox, protected []string, tier func(string) (tiers.Tier, bool)) v1.InventorySandbox {
	s := v1.InventorySandbox{ID: sb.ID, Name: sb.Name, State: sb.State, Runtime: sb.Runtime, Template: sb.Template,
		Tier: sb.Tier, Phase: sb.Policy.Phase, AskAll: sb.Policy.AskAll, AskWait: sb.Policy.AskWait,
		Phases: []v1.InventoryPhase{}, Credentials: []v1.Credential{}, Users: []v1.InventoryUser{}, Flags: []v1.InventoryFlag{}}
	if sb.Credentials != nil {
		s.Credentials = sb.Credentials
	}
	s.Git = v1.InventoryGit{Repo: sb.Repo, AgentBranchPrefix: sb.AgentBranchPrefix, Push: sb.GitPush, Protected: sb.GitProtected,
		ProtectedPaths: append([]string{}, protected...)}
	var flags []v1.InventoryFlag
	entries := map[string][]policy.Entry{}
	names := make([]string, 0, len(sb.Policy.Phases))
	for name := range sb.Policy.Phases {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		pr := sb.Policy.Phases[name]
		r := policy.Rules{Net: pr.Net, Allow: pr.Allow, Deny: pr.Deny, HTTP: pr.HTTP, Ask: pr.Ask}
		ph := v1.InventoryPhase{Name: name, Current: name == sb.Policy.Phase, Net: pr.Net, Rules: []v1.InventoryRule{}}
		if ph.Net == "" {
			ph.Net = "rules"
		}
		es, err := policy.Describe(r, sb.Policy.Sets)
		if err != nil {
			ph.Error = err.Error()
		}
		entries[name] = es
		ph.Rules = rulesOf(es)
		s.Phases = append(s.Phases, ph)
		flags = append(flags, PhaseFlags(name, r, es)...)
	}
	flags = append(flags, AskFlags(sb.Policy)...)
	for _, c := range sb.Credentials {
		flags = append(flags, CredentialFlags(c)...)
	}
	for _, u := range sb.Users {
		iu := v1.InventoryUser{Name: u.Name, UID: u.UID, Sudo: u.Sudo, Groups: u.Groups}
		if u.Egress != nil {
			eg := &v1.InventoryUserEgress{Credentials: u.Egress.Credentials, Rules: []v1.InventoryRule{}}
			es, err := policy.Describe(policy.Rules{Allow: u.Egress.Allow}, sb.Policy.Sets)
			if err != nil {
				eg.Error = err.Error()
			}
			eg.Rules = rulesOf(es)
			for _, e := range es {
				for _, f := range RuleFlags(e) {
					f.User = u.Name
					flags = append(flags, f)
				}
			}
			iu.Egress = eg
		}
		s.Users = append(s.Users, iu)
	}
	flags = append(flags, UserFlags(sb.Users, sb.Credentials)...)
	if sb.Tier != "" && tier != nil {
		if t, ok := tier(sb.Tier); ok {
			flags = append(flags, TierFlags(t, sb, entries)...)
		}
	}
	for i := range flags {
		flags[i].Subject = "sandbox " + sb.ID
	}
	slices.SortStableFunc(flags, func(a, b v1.InventoryFlag) int {
		return cmp.Compare(severityRank(a.Severity), severityRank(b.Severity))
	})
	if flags != nil {
		s.Flags = flags
	}
	return s
}

func rulesOf(es []policy.Entry) []v1.InventoryRule {
	out := make([]v1.InventoryRule, 0, len(es))
	for _, e := range es {
		out = append(out, v1.InventoryRule{Verb: e.Verb, Text: e.Text, Set: e.Set, Kind: e.Kind, Host: e.Host, CIDR: e.CIDR,
			Ports: e.Ports, HTTP: e.HTTP, Methods: e.Methods, PathPrefix: e.PathPrefix})
	}
	return out
}

// hostSection is the doctor's report as the inventory shows it: the same facts, not
// probed again differently.
func hostSection(r doctor.Report) *v1.InventoryHost {
	h := &v1.InventoryHost{Runtimes: []v1.InventoryRuntime{}, Isolation: []v1.InventoryLevel{}, Kernel: []v1.InventoryCheck{}}
	for _, rt := range r.Runtimes {
		h.Runtimes = append(h.Runtimes, v1.InventoryRuntime{Name: rt.Name, Usable: rt.Usable, Version: rt.Version, Isolation: rt.Isolation})
	}
	for _, l := range r.Isolation {
		h.Isolation = append(h.Isolation, v1.InventoryLevel{Name: l.Name, Available: l.Available, Detail: l.Detail})
	}
	for _, k := range r.Kernel {
		h.Kernel = append(h.Kernel, v1.InventoryCheck{Name: k.Name, OK: k.OK, Detail: k.Detail})
	}
	if k := r.KVM; k != nil {
		h.KVM = &v1.InventoryKVM{Kind: k.Kind, Nested: k.Nested, Guest: k.Guest, Hardware: k.Hardware, Detail: k.Detail, Allows: k.Allows}
	}
	return h
}
