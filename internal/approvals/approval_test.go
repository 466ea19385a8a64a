package approvals

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestDecideTable(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	base := Approval{ID: "ap-000000000001", Kind: KindTool, Sandbox: "sb-1", State: Pending, Deadline: now.Add(time.Minute),
		NotBy: []string{"key:key-agent"}, Action: []byte(`{"tool":"rm"}`)}
	op := Decider{Operator: true}
	approver := Decider{Key: "key-human", Approver: true}
	with := func(f func(*Approval)) Approval { a := base; f(&a); return a }
	cases := []struct {
		name    string
		a       Approval
		dec     Decision
		at      time.Time
		want    error
		state   string
		scope   string
		decider string
	}{
		{"operator approves", base, Decision{Approve: true, By: op}, now, nil, Approved, ScopeOnce, "operator"},
		{"operator denies", base, Decision{By: op, Reason: "no"}, now, nil, Denied, "", "operator"},
		{"approver key approves", base, Decision{Approve: true, By: approver}, now, nil, Approved, ScopeOnce, "key:key-human"},
		{"the asking key may not", base, Decision{Approve: true, By: Decider{Key: "key-agent", Approver: true}}, now, errdefs.ErrPermissionDenied, "", "", ""},
		{"a key without approver may not", base, Decision{Approve: true, By: Decider{Key: "key-other"}}, now, errdefs.ErrPermissionDenied, "", "", ""},
		{"nobody may not", base, Decision{Approve: true}, now, errdefs.ErrPermissionDenied, "", "", ""},
		{"decided already", with(func(a *Approval) { a.State = Denied }), Decision{Approve: true, By: op}, now, errdefs.ErrConflict, "", "", ""},
		{"expired already", with(func(a *Approval) { a.State = Expired }), Decision{Approve: true, By: op}, now, errdefs.ErrConflict, "", "", ""},
		{"at its deadline", base, Decision{Approve: true, By: op}, now.Add(time.Minute), errdefs.ErrConflict, "", "", ""},
		{"just before its deadline", base, Decision{Approve: true, By: op}, now.Add(time.Minute - time.Nanosecond), nil, Approved, ScopeOnce, "operator"},
		{"tool with scope sandbox", base, Decision{Approve: true, By: op, Scope: ScopeSandbox}, now, nil, Approved, ScopeSandbox, "operator"},
		{"push with scope sandbox", with(func(a *Approval) { a.Kind = KindPush }), Decision{Approve: true, By: op, Scope: ScopeSandbox}, now, errdefs.ErrInvalidArgument, "", "", ""},
		{"network with scope sandbox", with(func(a *Approval) { a.Kind = KindNetwork }), Decision{Approve: true, By: op, Scope: ScopeSandbox}, now, nil, Approved, ScopeSandbox, "operator"},
		{"a denial with a scope", with(func(a *Approval) { a.Kind = KindNetwork }), Decision{By: op, Scope: ScopeSandbox}, now, errdefs.ErrInvalidArgument, "", "", ""},
		{"unknown scope", base, Decision{Approve: true, By: op, Scope: "forever"}, now, errdefs.ErrInvalidArgument, "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decide(c.a, c.dec, c.at)
			if c.want != nil {
				if !errors.Is(err, c.want) {
					t.Fatalf("err %v, want %v", err, c.want)
				}
				if got.State != c.a.State {
					t.Fatalf("a refused decision changed the state to %s", got.State)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.State != c.state || got.Scope != c.scope || got.DecidedBy != c.decider || got.DecidedAt == nil || got.Reason != c.dec.Reason {
				t.Fatalf("got %+v", got)
			}
			if c.a.State != Pending {
				t.Fatal("the input was changed")
			}
		})
	}
}

func TestExpireAndClose(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	a := Approval{ID: "ap-000000000001", State: Pending, Deadline: now.Add(time.Minute)}
	if _, ok := Expire(a, now, "r", false); ok {
		t.Fatal("expired before its deadline")
	}
	if e, ok := Expire(a, now.Add(time.Minute), "r", false); !ok || e.State != Expired || e.Reason != "r" {
		t.Fatalf("not expired at its deadline: %+v", e)
	}
	if e, ok := Expire(a, now, "gone", true); !ok || e.State != Expired {
		t.Fatalf("forced expiry: %+v", e)
	}
	d := a
	d.State = Approved
	if _, ok := Expire(d, now.Add(time.Hour), "r", true); ok {
		t.Fatal("a decided approval expired")
	}
	if c, ok := Close(a, true, "operator", "fine", now); !ok || c.State != Approved || c.DecidedBy != "operator" {
		t.Fatalf("close: %+v", c)
	}
	if c, ok := Close(a, false, "key:k", "", now); !ok || c.State != Denied {
		t.Fatalf("close denied: %+v", c)
	}
	if _, ok := Close(d, false, "x", "", now); ok {
		t.Fatal("closed a decided approval")
	}
}

// TestStanding: a tool approved for the sandbox (scope sandbox) approves later calls of
// the same tool by the same user in the same sandbox, whatever their arguments; nothing
// else does.
func TestStanding(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	rule := Approval{ID: "ap-00000000000a", Kind: KindTool, Sandbox: "sb-1", User: "agent", State: Approved, Scope: ScopeSandbox,
		DecidedBy: "key:key-human", Action: []byte(`{"tool":"pytest","arguments":["-x"]}`)}
	ask := Approval{Kind: KindTool, Sandbox: "sb-1", User: "agent", State: Pending, Action: []byte(`{"tool":"pytest","arguments":["-k","slow"]}`)}
	got, ok := Standing([]Approval{rule}, ask, now)
	if !ok || got.State != Approved || got.Scope != ScopeSandbox || got.DecidedBy != "key:key-human" || got.DecidedAt == nil || got.Reason == "" {
		t.Fatalf("standing: %v %+v", ok, got)
	}
	with := func(f func(*Approval)) Approval { r := rule; f(&r); return r }
	for name, prior := range map[string]Approval{
		"once":          with(func(r *Approval) { r.Scope = ScopeOnce }),
		"denied":        with(func(r *Approval) { r.State, r.Scope = Denied, "" }),
		"other tool":    with(func(r *Approval) { r.Action = []byte(`{"tool":"rm"}`) }),
		"other user":    with(func(r *Approval) { r.User = "root" }),
		"other sandbox": with(func(r *Approval) { r.Sandbox = "sb-2" }),
		"network":       with(func(r *Approval) { r.Kind = KindNetwork }),
	} {
		if got, ok := Standing([]Approval{prior}, ask, now); ok || got.State != Pending {
			t.Errorf("%s: approved %+v", name, got)
		}
	}
}

func TestCheckID(t *testing.T) {
	if err := CheckID(NewID()); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "ap-", "ap-00000000000g", "ch-000000000000", "ap-0000000000000", "../ap-000000000000"} {
		if err := CheckID(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestSignVerify(t *testing.T) {
	secret := []byte("s3cret")
	body := []byte(`{"event":"created","approval":{"id":"ap-000000000001"}}`)
	now := time.Unix(1_800_000_000, 0)
	ts := now.Unix()
	sig := Sign(secret, ts, body)
	tsText := "1800000000"
	if err := Verify(secret, tsText, sig, body, now, DefaultTolerance); err != nil {
		t.Fatalf("a good delivery: %v", err)
	}
	if err := Verify(secret, tsText, "v0=abc, "+sig, body, now, DefaultTolerance); err != nil {
		t.Fatalf("a good signature among others: %v", err)
	}
	tampered := append([]byte{}, body...)
	tampered[len(tampered)-3] = '2'
	for name, err := range map[string]error{
		"tampered body":   Verify(secret, tsText, sig, tampered, now, DefaultTolerance),
		"wrong secret":    Verify([]byte("other"), tsText, sig, body, now, DefaultTolerance),
		"stale timestamp": Verify(secret, tsText, sig, body, now.Add(DefaultTolerance+time.Second), DefaultTolerance),
		"future":          Verify(secret, tsText, sig, body, now.Add(-DefaultTolerance-time.Second), DefaultTolerance),
		"moved timestamp": Verify(secret, "1800000001", sig, body, now, DefaultTolerance),
		"bad timestamp":   Verify(secret, "x", sig, body, now, DefaultTolerance),
		"no signature":    Verify(secret, tsText, "", body, now, DefaultTolerance),
	} {
		if err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

// FuzzVerify: Verify never panics, and accepts only the delivery signed with the secret:
// any other body, timestamp or signature header is refused.
func FuzzVerify(f *testing.F) {
	secret := []byte("fuzz-secret-0123456789")
	now := time.Unix(1_800_000_000, 0)
	good := []byte(`{"event":"created"}`)
	f.Add("1800000000", Sign(secret, now.Unix(), good), good)
	f.Add("1800000000", "v1=", []byte{})
	f.Add("-1", "v1=00,v1=ff", []byte("x"))
	f.Add("99999999999999999999", ",,,", []byte(nil))
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		err := Verify(secret, ts, sig, body, now, DefaultTolerance)
		if err != nil {
			return
		}
		n, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil {
			t.Fatalf("accepted timestamp %q", ts)
		}
		want := Sign(secret, n, body)
		found := false
		for _, s := range strings.Split(sig, ",") {
			found = found || strings.TrimSpace(s) == want
		}
		if !found {
			t.Fatalf("accepted signature %q for body %q at %s", sig, body, ts)
		}
	})
}
