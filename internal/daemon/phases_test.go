package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
)

// TestPhasesWithoutSetup: a policy with setup and run phases that names no phase puts a
// new sandbox in "run" (where its main command runs), and a replacement policy that
// names none keeps the sandbox's phase if it has it, else "run" — never "setup" by
// default. Each verdict is read at the upstream (allowed.test is allowed only in setup)
// and in the egress log.
func TestPhasesWithoutSetup(t *testing.T) {
	in := newInternet(t)
	e := newEnvWith(t, in.configure)
	ctx := context.Background()
	phased := func(extra ...string) *v1.Policy {
		p := &v1.Policy{Phases: map[string]v1.PolicyRules{"setup": {Allow: []string{"allowed.test"}}, "run": {}}}
		for _, name := range extra {
			p.Phases[name] = v1.PolicyRules{}
		}
		return p
	}
	sb := e.create(v1.CreateSandboxRequest{Policy: phased()})
	if sb.Policy.Phase != "run" {
		t.Errorf("created in phase %q, want run", sb.Policy.Phase)
	}
	reach := func(path string) bool {
		t.Helper()
		r := e.sh(sb.ID, "", fmt.Sprintf("curl -sS --max-time 5 http://allowed.test:%d/%s", in.httpPort, path))
		reached := in.log.contains("path=/" + path)
		if reached != (r.code == 0) {
			t.Errorf("%s: curl exit %d but the upstream log says reached=%v", path, r.code, reached)
		}
		return reached
	}
	blockedIn := func(phase string) {
		t.Helper()
		e.expectBlocked(sb.ID, "allowed.test in "+phase, func(x v1.EgressEntry) bool {
			return x.Name == "allowed.test" && x.Phase == phase
		})
	}
	phaseOf := func(res *v1.SetPolicyResponse, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return res.Sandbox.Policy.Phase
	}

	// Created without a phase: run, so the setup-only host is out of reach.
	if reach("created") {
		t.Error("a sandbox created with a phased policy and no phase reached a setup-only host")
	}
	blockedIn("run")

	// The same policy again, without a phase: the sandbox stays in run.
	if got := phaseOf(e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: phased()})); got != "run" {
		t.Errorf("policy replaced in run: phase %q", got)
	}
	if reach("replaced-in-run") {
		t.Error("after replacing the policy in run, a setup-only host was reached")
	}

	// Asked for by name, setup reaches the host (the control), and a replacement policy
	// that has setup keeps it.
	if got := phaseOf(e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Phase: "setup"})); got != "setup" {
		t.Errorf("switch to setup: phase %q", got)
	}
	if !reach("in-setup") {
		t.Fatal("the setup phase does not reach allowed.test: the test proves nothing")
	}
	if got := phaseOf(e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: phased()})); got != "setup" {
		t.Errorf("policy replaced in setup: phase %q, want setup kept", got)
	}

	// From a phase the new policy lacks: run, not setup.
	if got := phaseOf(e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: phased("hold"), Phase: "hold"})); got != "hold" {
		t.Errorf("switch to hold: phase %q", got)
	}
	if got := phaseOf(e.c.SetPolicy(ctx, sb.ID, v1.SetPolicyRequest{Policy: phased()})); got != "run" {
		t.Errorf("policy replaced in a phase it lacks: phase %q, want run", got)
	}
	if reach("replaced-from-hold") {
		t.Error("a policy replaced from a phase it lacks started in setup")
	}

	// An ambiguous policy (no run phase, several phases, none named) is refused at create.
	if _, err := e.c.Create(ctx, v1.CreateSandboxRequest{Policy: &v1.Policy{Phases: map[string]v1.PolicyRules{"setup": {}, "build": {}}}}); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("an ambiguous policy: %v", err)
	}
}
