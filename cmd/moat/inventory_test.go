package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestCLIInventory: moat inventory --json is the v1.Inventory document (a sandbox with a
// *.s3.amazonaws.com wildcard flagged, a narrow one not); the table groups sandboxes,
// templates, keys, host and flags; --flags prints only the flags; moat doctor names this
// host's KVM kind (KVM-PVM here).
func TestCLIInventory(t *testing.T) {
	c := newCLI(t)
	wide, e, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--name", "wide", "--allow", "*.s3.amazonaws.com:443")
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	wide = strings.TrimSpace(wide)
	narrow, e, code := c.run("", "create", "--memory", "256M", "--disk", "128M", "--name", "narrow", "--allow", "api.example.com:443")
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	narrow = strings.TrimSpace(narrow)
	out, e, code := c.run("", "inventory", "--json", "--no-host")
	var inv v1.Inventory
	if code != 0 || json.Unmarshal([]byte(out), &inv) != nil {
		t.Fatalf("inventory --json: %d %s %s", code, out, e)
	}
	flagged := map[string][]string{}
	for _, f := range inv.Flags {
		flagged[f.Subject] = append(flagged[f.Subject], f.Kind+" "+f.Rule)
	}
	if got := flagged["sandbox "+wide]; len(got) != 1 || got[0] != "shared-wildcard *.s3.amazonaws.com:443" {
		t.Errorf("wide sandbox flags %v", got)
	}
	if got := flagged["sandbox "+narrow]; len(got) != 0 {
		t.Errorf("narrow sandbox flagged: %v", got)
	}
	if len(inv.Sandboxes) != 2 || inv.Host != nil || inv.Scope != "operator" {
		t.Errorf("inventory: %d sandboxes, host %v, scope %s", len(inv.Sandboxes), inv.Host, inv.Scope)
	}
	out, _, code = c.run("", "inventory")
	for _, want := range []string{"SANDBOXES (2)", "phase run (current)", "*.s3.amazonaws.com:443", "TEMPLATES", "API KEYS (0)", "HOST", "FLAGS (1)", "HIGH", "shared-wildcard", "KVM"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inventory table lacks %q:\n%s", want, out)
		}
	}
	out, _, code = c.run("", "inventory", "--flags")
	if code != 0 || !strings.HasPrefix(out, "FLAGS (1)") || strings.Contains(out, "SANDBOXES") || !strings.Contains(out, "sandbox "+wide) {
		t.Errorf("inventory --flags:\n%s", out)
	}
	if _, e, code := c.run("", "inventory", "extra"); code == 0 || !strings.Contains(e, "unknown command") && !strings.Contains(e, "accepts 0 arg") {
		t.Errorf("inventory with an argument: %d %s", code, e)
	}
	out, _, _ = c.run("", "doctor")
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil && !strings.Contains(out, "KVM-PVM: paravirtual KVM (kvm_pvm), not VT-x/AMD-V") {
		t.Errorf("doctor on a kvm_pvm host does not name KVM-PVM:\n%s", out)
	}
}
