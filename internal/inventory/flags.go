package inventory

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/tiers"
)

// Severities, most severe first (severityRank).
const (
	High   = "high"
	Medium = "medium"
	Low    = "low"
)

func severityRank(s string) int {
	switch s {
	case High:
		return 0
	case Medium:
		return 1
	}
	return 2
}

// wideBits: a CIDR rule with a prefix shorter than this is "large" (more than 65,536
// addresses).
const wideBits = 16

// privateRanges are the IPv4 ranges that reach the host's own network, link-local
// metadata services or loopback rather than the internet. A fresh slice each call.
func privateRanges() []struct {
	prefix netip.Prefix
	what   string
} {
	p := netip.MustParsePrefix
	return []struct {
		prefix netip.Prefix
		what   string
	}{
		{p("10.0.0.0/8"), "private network (RFC 1918)"},
		{p("172.16.0.0/12"), "private network (RFC 1918)"},
		{p("192.168.0.0/16"), "private network (RFC 1918)"},
		{p("100.64.0.0/10"), "carrier-grade NAT / shared address space"},
		{p("169.254.0.0/16"), "link-local, including cloud metadata services (169.254.169.254)"},
		{p("127.0.0.0/8"), "loopback"},
		{p("0.0.0.0/8"), "this network"},
	}
}

// RuleFlags are the flags of one rule of a phase (allow, http or ask; deny rules narrow
// access and have none). Pure.
func RuleFlags(e policy.Entry) []v1.InventoryFlag {
	if e.Verb == "deny" {
		return nil
	}
	sev := func(s string) string { // an ask rule needs a person's yes: one step milder
		if e.Verb != "ask" {
			return s
		}
		if s == High {
			return Medium
		}
		return Low
	}
	how := e.Verb
	if e.HTTP && len(e.Methods) > 0 {
		how += " (methods " + strings.Join(e.Methods, ",") + ")"
	}
	var out []v1.InventoryFlag
	switch e.Kind {
	case "wildcard":
		if isICANNSuffix(e.Host) {
			out = append(out, v1.InventoryFlag{Kind: "tld-wildcard", Severity: sev(High), Rule: e.Text,
				Detail: fmt.Sprintf("%s rule %s reaches every domain registered under .%s", how, e.Text, e.Host)})
		} else if d, ok := sharedOver(e.Host); ok {
			out = append(out, v1.InventoryFlag{Kind: "shared-wildcard", Severity: sev(High), Rule: e.Text,
				Detail: fmt.Sprintf("%s rule %s reaches every tenant of %s (%s), anyone's included: a way to send data out", how, e.Text, d.Suffix, d.What)})
		}
	case "name":
		if d, ok := sharedExact(e.Host); ok {
			out = append(out, v1.InventoryFlag{Kind: "shared-host", Severity: sev(Medium), Rule: e.Text,
				Detail: fmt.Sprintf("%s rule %s reaches every tenant by path (%s), anyone's included", how, e.Text, d.What)})
		}
	case "cidr":
		pfx, err := netip.ParsePrefix(e.CIDR)
		if err != nil {
			break
		}
		if pfx.Bits() < wideBits {
			out = append(out, v1.InventoryFlag{Kind: "wide-cidr", Severity: sev(High), Rule: e.Text,
				Detail: fmt.Sprintf("%s rule %s covers %s addresses", how, e.CIDR, addrCount(pfx))})
		}
		for _, r := range privateRanges() {
			if pfx.Overlaps(r.prefix) {
				out = append(out, v1.InventoryFlag{Kind: "private-cidr", Severity: sev(High), Rule: e.Text,
					Detail: fmt.Sprintf("%s rule %s reaches %s %s", how, e.CIDR, r.prefix, r.what)})
			}
		}
	}
	return out
}

func addrCount(p netip.Prefix) string {
	n := uint64(1) << (32 - p.Bits())
	return fmt.Sprintf("%d", n)
}

// PhaseFlags are the flags of one phase: net allow-all, and each rule's. Pure.
func PhaseFlags(phase string, r policy.Rules, entries []policy.Entry) []v1.InventoryFlag {
	var out []v1.InventoryFlag
	if r.Net == policy.NetAllowAll {
		out = append(out, v1.InventoryFlag{Kind: "allow-all", Severity: High, Phase: phase,
			Detail: "net: allow-all — every host and port on the internet (deny rules excepted)"})
	}
	for _, e := range entries {
		for _, f := range RuleFlags(e) {
			f.Phase = phase
			out = append(out, f)
		}
	}
	return out
}

// CredentialFlags are the flags of one credential binding. Pure.
func CredentialFlags(c v1.Credential) []v1.InventoryFlag {
	var out []v1.InventoryFlag
	rule := "credential " + c.Secret
	if len(c.Methods) == 0 {
		out = append(out, v1.InventoryFlag{Kind: "credential-any-method", Severity: Medium, Rule: rule,
			Detail: fmt.Sprintf("secret %s is injected into requests of every method to %s (no methods limit)", c.Secret, strings.Join(c.Hosts, ", "))})
	}
	if c.PlainHTTP {
		out = append(out, v1.InventoryFlag{Kind: "credential-plain-http", Severity: Medium, Rule: rule,
			Detail: fmt.Sprintf("secret %s is also sent over plain HTTP", c.Secret)})
	}
	for _, h := range c.Hosts {
		host, _, _ := strings.Cut(h, ":")
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		var d SharedDomain
		var ok bool
		if parent, wild := strings.CutPrefix(host, "*."); wild {
			d, ok = sharedOver(parent)
		} else {
			d, ok = sharedExact(host)
		}
		if ok {
			out = append(out, v1.InventoryFlag{Kind: "credential-shared-host", Severity: High, Rule: rule,
				Detail: fmt.Sprintf("secret %s is injected into requests to %s, which reaches every tenant of %s (%s): anyone's server may receive it", c.Secret, h, d.Suffix, d.What)})
		}
	}
	if g := c.GitHub; g != nil {
		var writes []string
		for _, p := range slices.Sorted(mapsKeys(g.Permissions)) {
			if v := g.Permissions[p]; v == "write" || v == "admin" {
				writes = append(writes, p+": "+v)
			}
		}
		if len(writes) > 0 {
			out = append(out, v1.InventoryFlag{Kind: "github-write", Severity: Low, Rule: rule,
				Detail: fmt.Sprintf("GitHub tokens for %s may %s", strings.Join(g.Repositories, ", "), strings.Join(writes, ", "))})
		}
	}
	return out
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// UserFlags are the flags of the users of a sandbox: sudo users where the sandbox binds
// secrets (they can become any user, so every binding is theirs), and sudo users with an
// egress of their own (root has the sandbox's egress: sudo steps out of it). Pure.
func UserFlags(users []v1.User, creds []v1.Credential) []v1.InventoryFlag {
	var out []v1.InventoryFlag
	for _, u := range users {
		if !u.Sudo {
			continue
		}
		if len(creds) > 0 {
			names := make([]string, 0, len(creds))
			for _, c := range creds {
				names = append(names, c.Secret)
			}
			out = append(out, v1.InventoryFlag{Kind: "sudo-with-credentials", Severity: Medium, User: u.Name,
				Detail: fmt.Sprintf("user %s has sudo in a sandbox binding secrets (%s): it can use every binding", u.Name, strings.Join(names, ", "))})
		}
		if u.Egress != nil {
			out = append(out, v1.InventoryFlag{Kind: "sudo-bypasses-user-egress", Severity: Medium, User: u.Name,
				Detail: fmt.Sprintf("user %s has an egress of its own but also sudo: as root it has the sandbox's egress", u.Name)})
		}
	}
	return out
}

// AskFlags are the flags of ask mode: connections a person can allow at run time. Pure.
func AskFlags(p v1.Policy) []v1.InventoryFlag {
	var out []v1.InventoryFlag
	if p.AskAll {
		out = append(out, v1.InventoryFlag{Kind: "ask-all", Severity: Medium,
			Detail: "ask mode: any connection no rule allows is held for a person, whose approval can open any host"})
	}
	for _, name := range slices.Sorted(mapsKeysRules(p.Phases)) {
		if r := p.Phases[name]; len(r.Ask) > 0 {
			out = append(out, v1.InventoryFlag{Kind: "ask-rules", Severity: Low, Phase: name,
				Detail: "ask rules: " + strings.Join(r.Ask, ", ") + " are held for a person's approval"})
		}
	}
	return out
}

func mapsKeysRules(m map[string]v1.PolicyRules) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TierFlags compares a sandbox made with tier t to what the tier promises: anything it
// has beyond the tier (its policy changed since, or the tier was redefined) is flagged.
// Pure.
func TierFlags(t tiers.Tier, sb v1.Sandbox, phases map[string][]policy.Entry) []v1.InventoryFlag {
	var out []v1.InventoryFlag
	bad := func(detail string, phase string) {
		out = append(out, v1.InventoryFlag{Kind: "tier-mismatch", Severity: High, Phase: phase, Detail: "tier " + t.Name + ": " + detail})
	}
	// The tier's own rules are the tier's to give.
	own := map[string]bool{}
	if es, err := policy.Describe(policy.Rules{Allow: t.Egress.Allow, HTTP: t.Egress.HTTP}, sb.Policy.Sets); err == nil {
		for _, e := range es {
			own[e.Text] = true
		}
	}
	for _, name := range slices.Sorted(mapsKeysRules(sb.Policy.Phases)) {
		r := sb.Policy.Phases[name]
		if r.Net == policy.NetAllowAll && !t.Egress.AllowAll {
			bad("net allow-all, which the tier does not allow", name)
		}
		if len(t.Egress.Methods) == 0 || name != "run" {
			continue
		}
		for _, e := range phases[name] {
			if e.Verb == "deny" || e.Verb == "ask" || own[e.Text] {
				continue
			}
			if !e.HTTP {
				bad(fmt.Sprintf("rule %s allows every method; the tier limits requests to %s", e.Text, strings.Join(t.Egress.Methods, ",")), name)
				continue
			}
			if len(e.Methods) == 0 {
				bad(fmt.Sprintf("HTTP rule %s allows every method; the tier limits requests to %s", e.Text, strings.Join(t.Egress.Methods, ",")), name)
				continue
			}
			for _, m := range e.Methods {
				if !slices.Contains(t.Egress.Methods, m) {
					bad(fmt.Sprintf("HTTP rule %s allows %s; the tier limits requests to %s", e.Text, m, strings.Join(t.Egress.Methods, ",")), name)
				}
			}
		}
	}
	switch t.Credentials.Mode {
	case tiers.CredNone:
		if len(sb.Credentials) > 0 {
			bad(fmt.Sprintf("%d credential bindings; the tier allows none", len(sb.Credentials)), "")
		}
	case tiers.CredReadOnly:
		for _, c := range sb.Credentials {
			if len(c.Methods) == 0 || slices.ContainsFunc(c.Methods, func(m string) bool { return m != "GET" && m != "HEAD" }) {
				bad(fmt.Sprintf("credential %s is not limited to GET and HEAD", c.Secret), "")
			}
		}
	}
	if t.Credentials.Approve {
		for _, c := range sb.Credentials {
			if !c.Approve {
				bad(fmt.Sprintf("credential %s is used without approval", c.Secret), "")
			}
		}
	}
	if t.Git.Push == tiers.PushNone && sb.GitPush != tiers.PushNone {
		bad("git pushes to the agent branch are allowed; the tier allows none", "")
	}
	if t.Git.Push != tiers.PushNone && t.Git.Protected == tiers.ProtectedRefuse && sb.GitProtected == tiers.ProtectedHold {
		bad("pushes touching protected paths are held for approval; the tier refuses them", "")
	}
	return out
}

// KeyFlags are the flags of an API key. Pure.
func KeyFlags(k v1.APIKey) []v1.InventoryFlag {
	var out []v1.InventoryFlag
	if k.Approver {
		out = append(out, v1.InventoryFlag{Kind: "approver-key", Severity: Low,
			Detail: "may decide other keys' approvals (connections, credential uses, held pushes)"})
	}
	if k.Max == (v1.KeyMaxima{}) {
		out = append(out, v1.InventoryFlag{Kind: "no-key-maxima", Severity: Low,
			Detail: "no maxima of its own: only the daemon's and the host's bound its sandboxes"})
	}
	return out
}
