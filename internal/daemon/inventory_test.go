package daemon_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/sdk"
)

// TestInventory: a real daemon with sandboxes (runc) made with various policies,
// credentials, users, tiers and API keys. The inventory lists each one's access (phases,
// rules with sets expanded, credentials, git, users with their own egress), flags the
// wide ones (net allow-all, a *.s3.amazonaws.com wildcard and a credential sent there,
// a sudo user next to secrets, ask mode) and not the narrow ones; an API key sees only
// its own sandboxes and itself; the host section carries the doctor's KVM kind.
func TestInventory(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) { c.Listen = addr })
	ctx := context.Background()
	if err := e.c.SetSecret(ctx, "NARROW", "v-narrow", &v1.SecretScope{Hosts: []string{"api.example.com"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetSecret(ctx, "WIDE", "v-wide", &v1.SecretScope{Hosts: []string{"*.s3.amazonaws.com"}}); err != nil {
		t.Fatal(err)
	}
	keyA, err := e.c.CreateAPIKeyWith(ctx, v1.APIKeyRequest{Secrets: []string{"WIDE"}, Max: &v1.KeyMaxima{CPUs: 2}})
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := sdk.NewHTTP("http://"+addr, keyA.Key), sdk.NewHTTP("http://"+addr, keyB.Key)
	run := func(r v1.PolicyRules) *v1.Policy {
		return &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": r}}
	}
	all := e.create(v1.CreateSandboxRequest{Runtime: "runc", Name: "all", Policy: run(v1.PolicyRules{Net: "allow-all"})})
	narrow := e.create(v1.CreateSandboxRequest{Runtime: "runc", Name: "narrow",
		Policy: &v1.Policy{Phase: "run", Sets: map[string][]string{"mine": {"docs.example.com:443"}}, Phases: map[string]v1.PolicyRules{
			"run":   {Allow: []string{"api.example.com:443", "mine"}, HTTP: []string{"upload.example.com:443 GET /v1/"}, Deny: []string{"*.s3.amazonaws.com"}},
			"setup": {Allow: []string{"registries"}},
		}},
		Credentials: []v1.Credential{{Secret: "NARROW", Hosts: []string{"api.example.com"}, Methods: []string{"GET"}}},
		Users:       []v1.UserRequest{{Name: "dev"}}})
	if _, err := e.c.SetUserEgress(ctx, narrow.ID, "dev", v1.SetUserEgressRequest{Allow: []string{"api.example.com:443"}, Credentials: []string{"NARROW"}}); err != nil {
		t.Fatal(err)
	}
	read := e.create(v1.CreateSandboxRequest{Runtime: "runc", Name: "read", Tier: "read", Policy: run(v1.PolicyRules{Allow: []string{"api.example.com"}})})
	sudo := e.create(v1.CreateSandboxRequest{Runtime: "runc", Name: "sudo", Ask: true, Policy: run(v1.PolicyRules{Allow: []string{"api.example.com"}}),
		Credentials: []v1.Credential{{Secret: "NARROW", Hosts: []string{"api.example.com"}, Methods: []string{"GET", "HEAD"}}},
		Users:       []v1.UserRequest{{Name: "ops", Sudo: true}}})
	s3, err := a.Create(ctx, v1.CreateSandboxRequest{Runtime: "runc", Name: "s3", MemoryBytes: 512 << 20, DiskBytes: 256 << 20,
		Policy:      run(v1.PolicyRules{Allow: []string{"*.s3.amazonaws.com:443"}}),
		Credentials: []v1.Credential{{Secret: "WIDE", Hosts: []string{"*.s3.amazonaws.com"}}}})
	if err != nil {
		t.Fatal(err)
	}

	inv, err := e.c.Inventory(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Scope != "operator" || len(inv.Sandboxes) != 5 || len(inv.APIKeys) != 2 {
		t.Fatalf("operator inventory: scope %s, %d sandboxes, %d keys", inv.Scope, len(inv.Sandboxes), len(inv.APIKeys))
	}
	byID := map[string]v1.InventorySandbox{}
	for _, s := range inv.Sandboxes {
		byID[s.ID] = s
	}
	flagKinds := func(s v1.InventorySandbox) []string {
		var out []string
		for _, f := range s.Flags {
			out = append(out, f.Kind)
		}
		slices.Sort(out)
		return out
	}
	// Wide ones flagged.
	if got := flagKinds(byID[all.ID]); !slices.Equal(got, []string{"allow-all"}) {
		t.Errorf("allow-all sandbox flags %v", got)
	}
	if got := flagKinds(byID[s3.ID]); !slices.Equal(got, []string{"credential-any-method", "credential-shared-host", "shared-wildcard"}) {
		t.Errorf("s3 sandbox flags %v", got)
	}
	if got := flagKinds(byID[sudo.ID]); !slices.Equal(got, []string{"ask-all", "sudo-with-credentials"}) {
		t.Errorf("sudo/ask sandbox flags %v", got)
	}
	// Narrow ones not.
	for _, id := range []string{narrow.ID, read.ID} {
		if got := byID[id].Flags; len(got) != 0 {
			t.Errorf("narrow sandbox %s flagged: %+v", byID[id].Name, got)
		}
	}
	// The narrow sandbox's access in detail.
	n := byID[narrow.ID]
	if len(n.Phases) != 2 || n.Phases[0].Name != "run" || !n.Phases[0].Current || n.Phases[1].Name != "setup" && n.Phases[1].Name != "run" {
		// phases are sorted by name: run, setup
		t.Errorf("phases %+v", n.Phases)
	}
	var runPhase, setupPhase v1.InventoryPhase
	for _, p := range n.Phases {
		if p.Name == "run" {
			runPhase = p
		} else {
			setupPhase = p
		}
	}
	has := func(rules []v1.InventoryRule, pred func(v1.InventoryRule) bool) bool {
		return slices.ContainsFunc(rules, pred)
	}
	if !has(runPhase.Rules, func(r v1.InventoryRule) bool {
		return r.Verb == "http" && r.Host == "upload.example.com" && slices.Equal(r.Methods, []string{"GET"}) && r.PathPrefix == "/v1/" && r.Ports == "443"
	}) || !has(runPhase.Rules, func(r v1.InventoryRule) bool {
		return r.Verb == "allow" && r.Set == "mine" && r.Host == "docs.example.com"
	}) ||
		!has(runPhase.Rules, func(r v1.InventoryRule) bool { return r.Verb == "deny" && r.Kind == "wildcard" }) {
		t.Errorf("run phase rules %+v", runPhase.Rules)
	}
	if !has(setupPhase.Rules, func(r v1.InventoryRule) bool {
		return r.Set == "registries" && r.Host == "registry.npmjs.org" && slices.Equal(r.Methods, []string{"GET", "HEAD"})
	}) {
		t.Errorf("setup phase: the registries set is not expanded: %+v", setupPhase.Rules)
	}
	if len(n.Credentials) != 1 || n.Credentials[0].Secret != "NARROW" || !slices.Equal(n.Credentials[0].Methods, []string{"GET"}) {
		t.Errorf("credentials %+v", n.Credentials)
	}
	if n.Git.Push != "agent-branch" || n.Git.Protected != "refuse" || n.Git.AgentBranchPrefix == "" || !slices.Contains(n.Git.ProtectedPaths, ".github/workflows/**") && len(n.Git.ProtectedPaths) == 0 {
		t.Errorf("git %+v", n.Git)
	}
	if len(n.Users) != 1 || n.Users[0].Egress == nil || len(n.Users[0].Egress.Rules) != 1 || n.Users[0].Egress.Rules[0].Host != "api.example.com" || !slices.Equal(n.Users[0].Egress.Credentials, []string{"NARROW"}) {
		t.Errorf("users %+v", n.Users)
	}
	if r := byID[read.ID]; r.Tier != "read" || r.Git.Push != "none" {
		t.Errorf("read tier sandbox: tier %q push %q", r.Tier, r.Git.Push)
	}
	if byID[s3.ID].Owner != keyA.ID || byID[all.ID].Owner != "" {
		t.Errorf("owners: s3 %q (want %s), all %q", byID[s3.ID].Owner, keyA.ID, byID[all.ID].Owner)
	}
	// Flags are listed most severe first, over all subjects.
	if len(inv.Flags) == 0 || inv.Flags[0].Severity != "high" || inv.Flags[len(inv.Flags)-1].Severity == "high" {
		t.Errorf("flags order: %+v", inv.Flags)
	}
	// The host section: the doctor's facts, KVM kind included.
	if inv.Host == nil || inv.Host.KVM == nil || len(inv.Host.Runtimes) == 0 {
		t.Fatalf("host %+v", inv.Host)
	}
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil && inv.Host.KVM.Kind != "kvm-pvm" {
		t.Errorf("KVM kind %q on a kvm_pvm host", inv.Host.KVM.Kind)
	}

	// A tiered sandbox whose policy is widened after create is flagged against its tier.
	if _, err := e.c.SetPolicy(ctx, read.ID, v1.SetPolicyRequest{Policy: run(v1.PolicyRules{Allow: []string{"api.example.com"}, HTTP: []string{"api.example.com POST"}})}); err != nil {
		t.Logf("widening the read tier's policy is refused (%v): nothing to flag", err)
	} else {
		inv, err := e.c.Inventory(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range inv.Sandboxes {
			if s.ID == read.ID && !slices.Contains(flagKinds(s), "tier-mismatch") {
				t.Errorf("widened read-tier sandbox not flagged: %+v", s.Flags)
			}
		}
	}

	// API key A: its own sandbox and itself only, no owners.
	invA, err := a.Inventory(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if invA.Scope != "api-key" || invA.APIKey != keyA.ID || len(invA.Sandboxes) != 1 || invA.Sandboxes[0].ID != s3.ID || invA.Sandboxes[0].Owner != "" {
		t.Errorf("key A inventory: %+v", invA)
	}
	if len(invA.APIKeys) != 1 || invA.APIKeys[0].ID != keyA.ID || !slices.Equal(invA.APIKeys[0].Secrets, []string{"WIDE"}) || invA.APIKeys[0].Max.CPUs != 2 || invA.APIKeys[0].Sandboxes != 1 {
		t.Errorf("key A sees keys %+v", invA.APIKeys)
	}
	if invA.Host != nil {
		t.Errorf("host=false still has a host section")
	}
	for _, f := range invA.Flags {
		if f.Subject != "sandbox "+s3.ID && f.Subject != "api-key "+keyA.ID {
			t.Errorf("key A sees a flag of %s", f.Subject)
		}
	}
	// Template scans: the operator's only; the host template's set-uid programs are found.
	if _, err := a.InventoryWith(ctx, false, true); err == nil || !strings.Contains(err.Error(), "operator") {
		t.Errorf("key A scanning templates: %v, want permission denied", err)
	}
	scanned, err := e.c.InventoryWith(ctx, false, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range scanned.Templates {
		if tpl.Name != "host" {
			continue
		}
		if !tpl.Scanned || tpl.ScanError != "" {
			t.Errorf("host template not scanned: %+v", tpl)
		}
		if fi, err := os.Stat("/usr/bin/sudo"); err == nil && fi.Mode()&os.ModeSetuid != 0 && !slices.Contains(tpl.SetID, "/usr/bin/sudo") {
			t.Errorf("host template set-id programs %v lack /usr/bin/sudo", tpl.SetID)
		}
	}
	invB, err := b.Inventory(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(invB.Sandboxes) != 0 || len(invB.APIKeys) != 1 || invB.APIKeys[0].ID != keyB.ID {
		t.Errorf("key B inventory: %d sandboxes, keys %+v", len(invB.Sandboxes), invB.APIKeys)
	}
}
