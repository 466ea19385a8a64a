package sandbox

import (
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

// fromSnapshot: the snapshot's filesystem always wins (template, drive size, no repo from
// the request); what the request leaves unset comes from the snapshot, what it sets stays.
func TestFromSnapshot(t *testing.T) {
	pol := &policy.Spec{Phase: "build"}
	sn := &Snapshot{Template: "debian", TemplateAlias: "base", Runtime: "runsc", User: "dev", SizeBytes: 2 << 30,
		Limits: Limits{MemoryBytes: 1 << 30, CPUs: 2, Pids: 500, DiskBytes: 2 << 30, IOBps: 7, IOIops: 9}, Policy: pol}
	for _, tc := range []struct {
		name string
		in   CreateOptions
		want func(t *testing.T, o CreateOptions)
	}{
		{"empty request takes the snapshot's", CreateOptions{}, func(t *testing.T, o CreateOptions) {
			if o.Template != "debian" || o.TemplateAlias != "base" || o.Runtime != "runsc" || o.User != "dev" {
				t.Errorf("%+v", o)
			}
			if o.Limits != sn.Limits {
				t.Errorf("limits %+v, want %+v", o.Limits, sn.Limits)
			}
			if o.Policy == nil || o.Policy.Phase != "build" || o.Policy == pol {
				t.Errorf("policy %+v: want a copy of the snapshot's", o.Policy)
			}
		}},
		{"request's own choices stay; filesystem is the snapshot's", CreateOptions{Template: "host", Repo: "/x", Runtime: "runc", User: "u",
			Limits: Limits{MemoryBytes: 5 << 20, DiskBytes: 64 << 20}}, func(t *testing.T, o CreateOptions) {
			if o.Template != "debian" || o.Repo != "" || o.Limits.DiskBytes != 2<<30 {
				t.Errorf("filesystem not the snapshot's: %+v", o)
			}
			if o.Runtime != "runc" || o.User != "u" || o.Limits.MemoryBytes != 5<<20 || o.Limits.CPUs != 2 {
				t.Errorf("request's choices lost: %+v", o)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.want(t, fromSnapshot(tc.in, sn)) })
	}
}

// forkOptions: everything of the parent's settings, nothing of its identity — no
// placeholder (validation issues each fork its own), and no slice or policy shared with the
// parent's record or another fork's options.
func TestForkOptions(t *testing.T) {
	p := &Sandbox{ID: "sb-parent", Runtime: "runc", Template: "host", User: "user", Env: map[string]string{"A": "1"},
		Limits: Limits{MemoryBytes: 1 << 30, Pids: 100}, Policy: &policy.Spec{Phase: "run"}, OnTimeout: OnTimeoutPause,
		Credentials: []Credential{{Secret: "TOKEN", Hosts: []string{"api.test"}, Placeholder: "moat-placeholder-parent"}},
		AccessToken: "parent-token", Slot: 3, AgentBranchPrefix: "refs/heads/agent/x/", GitProtected: GitProtectedHold,
		IdleAfter: 0, DeleteAfter: 48 * time.Hour, AutoResume: true, Archive: true}
	a, b := forkOptions(p), forkOptions(p)
	// Lifecycle: the parent's periods as set, an idle period of 0 (an E2B sandbox's) kept off
	// rather than taking the daemon's default.
	if a.Idle == nil || *a.Idle != 0 || a.DeleteAfter == nil || *a.DeleteAfter != 48*time.Hour || !a.AutoResume || !a.Archive {
		t.Errorf("fork lifecycle: idle %v, delete after %v, auto-resume %v, archive %v: want the parent's (0, 48h, true, true)",
			a.Idle, a.DeleteAfter, a.AutoResume, a.Archive)
	}
	if a.Runtime != "runc" || a.Template != "host" || a.User != "user" || a.Limits != p.Limits || a.OnTimeout != OnTimeoutPause ||
		a.Env["A"] != "1" || a.Policy.Phase != "run" || a.GitProtected != GitProtectedHold || a.AgentBranchPrefix != p.AgentBranchPrefix {
		t.Errorf("fork options lost a setting: %+v", a)
	}
	if len(a.Credentials) != 1 || a.Credentials[0].Secret != "TOKEN" || a.Credentials[0].Placeholder != "" {
		t.Errorf("credentials %+v: want the binding without its placeholder", a.Credentials)
	}
	a.Credentials[0].Placeholder = "set by validate"
	if b.Credentials[0].Placeholder != "" || p.Credentials[0].Placeholder != "moat-placeholder-parent" {
		t.Error("two forks' options (or the parent's record) share their credential bindings")
	}
	if a.Policy == p.Policy || a.Policy == b.Policy {
		t.Error("fork options share the parent's policy")
	}
}

// mayUseSnapshot: the operator any; an API key only the snapshots of its own sandboxes
// (never the operator's, whose Owner is "").
func TestMayUseSnapshot(t *testing.T) {
	own := &Snapshot{Owner: "key-a"}
	op := &Snapshot{Owner: ""}
	for _, tc := range []struct {
		c    Caller
		sn   *Snapshot
		want bool
	}{
		{Caller{Operator: true}, own, true},
		{Caller{Operator: true}, op, true},
		{Caller{APIKey: "key-a"}, own, true},
		{Caller{APIKey: "key-b"}, own, false},
		{Caller{APIKey: "key-a"}, op, false},
		{Caller{}, op, false},
	} {
		if got := mayUseSnapshot(tc.c, tc.sn); got != tc.want {
			t.Errorf("mayUseSnapshot(%+v, owner %q) = %v, want %v", tc.c, tc.sn.Owner, got, tc.want)
		}
	}
}
