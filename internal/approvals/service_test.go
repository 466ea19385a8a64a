package approvals_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/approvals"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/internal/testutil"
)

func openStore(t testing.TB, dir string) *store.Store {
	st, err := store.Open(filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) notify(event string, a approvals.Approval) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event+" "+a.ID+" "+a.State)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func newService(t testing.TB, st approvals.Store, opt approvals.Options) *approvals.Service {
	opt.Store = st
	s := approvals.New(opt)
	if err := s.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func tool(sandbox, askedBy, owner string) approvals.Approval {
	return approvals.Approval{Kind: approvals.KindTool, Sandbox: sandbox, AskedBy: askedBy, Owner: owner,
		Action: json.RawMessage(`{"tool":"shell","arguments":{"cmd":"rm -rf /tmp/x"}}`), Summary: "run rm"}
}

// TestServiceDecideWakesWaiter: a waiter long-polling an approval returns with the
// decision as soon as it is made, not at its wait; the notifier hears created and decided.
func TestServiceDecideWakesWaiter(t *testing.T) {
	ctx := context.Background()
	var rec recorder
	s := newService(t, openStore(t, t.TempDir()), approvals.Options{Notify: rec.notify})
	a, err := s.Create(ctx, tool("sb-1", "key:key-agent", "key-agent"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a.State != approvals.Pending || !slices.Equal(a.NotBy, []string{"key:key-agent"}) {
		t.Fatalf("created %+v", a)
	}
	got := make(chan approvals.Approval, 1)
	go func() {
		w, err := s.Wait(ctx, a.ID, time.Hour)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	testutil.WaitFor(t, 10*time.Second, "the waiter", func() bool { return s.HasWaiter(a.ID) })
	// The agent's own key may not approve it, even as an approver.
	if _, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Key: "key-agent", Approver: true}}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("the asking key deciding: %v", err)
	}
	d, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Key: "key-human", Approver: true}, Reason: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-got:
		if w.State != approvals.Approved || w.DecidedBy != "key:key-human" || w.Reason != "ok" || d.State != approvals.Approved {
			t.Fatalf("waiter got %+v", w)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the decision")
	}
	if _, err := s.Decide(ctx, a.ID, approvals.Decision{By: approvals.Decider{Operator: true}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("deciding twice: %v", err)
	}
	want := []string{"created " + a.ID + " pending", "decided " + a.ID + " approved"}
	if ev := rec.list(); !slices.Equal(ev, want) {
		t.Fatalf("events %v, want %v", ev, want)
	}
	list, err := s.List(ctx, approvals.Filter{State: approvals.Approved, Sandbox: "sb-1", Kind: approvals.KindTool})
	if err != nil || len(list) != 1 || list[0].ID != a.ID {
		t.Fatalf("list: %v %+v", err, list)
	}
	if list, _ := s.List(ctx, approvals.Filter{State: approvals.Pending}); len(list) != 0 {
		t.Fatalf("pending: %+v", list)
	}
	if _, err := s.List(ctx, approvals.Filter{State: "maybe"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("bad filter: %v", err)
	}
}

// TestServiceDeadline: nobody decides: the approval expires at its deadline by its timer,
// waiters wake, and a late decision is refused.
func TestServiceDeadline(t *testing.T) {
	ctx := context.Background()
	var rec recorder
	s := newService(t, openStore(t, t.TempDir()), approvals.Options{Notify: rec.notify})
	a, err := s.Create(ctx, tool("sb-1", "operator", ""), 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Wait(ctx, a.ID, time.Minute)
	if err != nil || w.State != approvals.Expired || w.Reason == "" {
		t.Fatalf("after the deadline: %v %+v", err, w)
	}
	if _, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Operator: true}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("late decision: %v", err)
	}
	if ev := rec.list(); len(ev) != 2 || ev[1] != "expired "+a.ID+" expired" {
		t.Fatalf("events %v", ev)
	}
}

// TestServiceRecover: after a restart (a new Service on the same database) pending
// network and credential approvals are expired (their connection is gone), a tool call
// stays pending and can still be decided, and one whose deadline passed meanwhile expires.
func TestServiceRecover(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st1, err := store.Open(filepath.Join(dir, "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	s1 := approvals.New(approvals.Options{Store: st1})
	toolA, _ := s1.Create(ctx, tool("sb-1", "key:k", "k"), time.Hour)
	short, _ := s1.Create(ctx, tool("sb-1", "key:k", "k"), 100*time.Millisecond)
	netA, err := s1.Create(ctx, approvals.Approval{Kind: approvals.KindNetwork, Sandbox: "sb-1", AskedBy: approvals.BySandbox,
		Action: json.RawMessage(`{"host":"example.com","port":443}`)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s1.Close() // like a daemon killed: no expiry ran
	st1.Close()
	time.Sleep(150 * time.Millisecond) // the short one's deadline passes while no daemon runs

	s2 := newService(t, openStore(t, dir), approvals.Options{})
	if a, _ := s2.Get(ctx, netA.ID); a.State != approvals.Expired || a.Reason == "" {
		t.Fatalf("network approval after restart: %+v", a)
	}
	if a, _ := s2.Wait(ctx, short.ID, 10*time.Second); a.State != approvals.Expired {
		t.Fatalf("approval past its deadline after restart: %+v", a)
	}
	if a, _ := s2.Get(ctx, toolA.ID); a.State != approvals.Pending {
		t.Fatalf("tool approval after restart: %+v", a)
	}
	if a, err := s2.Decide(ctx, toolA.ID, approvals.Decision{By: approvals.Decider{Operator: true}, Reason: "later"}); err != nil || a.State != approvals.Denied {
		t.Fatalf("deciding after restart: %v %+v", err, a)
	}
}

// TestServiceStanding: a tool approved with scope sandbox makes the next call of that tool
// in that sandbox approved at create, with no timer and a created event saying approved.
func TestServiceStanding(t *testing.T) {
	ctx := context.Background()
	var rec recorder
	s := newService(t, openStore(t, t.TempDir()), approvals.Options{Notify: rec.notify})
	a, _ := s.Create(ctx, tool("sb-1", "key:k", "k"), time.Hour)
	if _, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Operator: true}, Scope: approvals.ScopeSandbox}); err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, tool("sb-1", "key:k", "k"), time.Hour)
	if err != nil || b.State != approvals.Approved || b.DecidedBy != "operator" || !strings.Contains(b.Reason, a.ID) {
		t.Fatalf("second call: %v %+v", err, b)
	}
	if c, _ := s.Create(ctx, tool("sb-2", "key:k", "k"), time.Hour); c.State != approvals.Pending {
		t.Fatalf("another sandbox: %+v", c)
	}
	if ev := rec.list(); ev[len(ev)-2] != "created "+b.ID+" approved" {
		t.Fatalf("events %v", ev)
	}
}

// TestExpireGone: the pending approvals of a deleted sandbox expire; others stay.
func TestExpireGone(t *testing.T) {
	ctx := context.Background()
	s := newService(t, openStore(t, t.TempDir()), approvals.Options{})
	gone, _ := s.Create(ctx, tool("sb-gone", "key:k", "k"), time.Hour)
	kept, _ := s.Create(ctx, tool("sb-kept", "key:k", "k"), time.Hour)
	n, err := s.ExpireGone(ctx, func(id string) bool { return id == "sb-gone" })
	if err != nil || n != 1 {
		t.Fatalf("expired %d: %v", n, err)
	}
	if a, _ := s.Get(ctx, gone.ID); a.State != approvals.Expired || a.Reason != "its sandbox was deleted" {
		t.Fatalf("gone: %+v", a)
	}
	if a, _ := s.Get(ctx, kept.ID); a.State != approvals.Pending {
		t.Fatalf("kept: %+v", a)
	}
}

// TestAsker: the egress proxy's questions become approvals; two connections asking the
// same question share one; approval answers with the scope, denial answers denied, and a
// question nobody answers in time is an error.
func TestAsker(t *testing.T) {
	ctx := context.Background()
	s := newService(t, openStore(t, t.TempDir()), approvals.Options{
		Owner: func(context.Context, string) (string, error) { return "key-owner", nil },
	})
	q := egress.Question{Kind: egress.AskNetwork, Sandbox: "sb-1", User: "agent", Name: "example.com", Addr: netip.MustParseAddr("192.0.2.1"), Port: 443, Wait: time.Minute}
	type res struct {
		a   egress.Answer
		err error
	}
	out := make(chan res, 2)
	for range 2 {
		go func() { a, err := s.Asker().Ask(ctx, q); out <- res{a, err} }()
	}
	var pending []approvals.Approval
	testutil.WaitFor(t, 10*time.Second, "one pending approval with two waiters", func() bool {
		pending, _ = s.List(ctx, approvals.Filter{State: approvals.Pending})
		return len(pending) == 1 && s.AskWaiting() == 2
	})
	a := pending[0]
	if a.Kind != approvals.KindNetwork || a.User != "agent" || !slices.Contains(a.NotBy, "key:key-owner") || a.AskedBy != approvals.BySandbox {
		t.Fatalf("approval %+v", a)
	}
	var na approvals.NetworkAction
	if err := json.Unmarshal(a.Action, &na); err != nil || na.Host != "example.com" || na.Addr != "192.0.2.1" || na.Port != 443 {
		t.Fatalf("action %s", a.Action)
	}
	if _, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Key: "key-owner", Approver: true}}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("the owner approving its own sandbox's connection: %v", err)
	}
	if _, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Operator: true}, Scope: approvals.ScopeSandbox}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := <-out
		if r.err != nil || !r.a.Approved || r.a.Scope != egress.ScopeSandbox || r.a.ApprovalID != a.ID || r.a.By != "operator" {
			t.Fatalf("answer %+v %v", r.a, r.err)
		}
	}
	if all, _ := s.List(ctx, approvals.Filter{}); len(all) != 1 {
		t.Fatalf("two connections made %d approvals", len(all))
	}

	// Denied.
	q.Kind, q.Method, q.Path, q.Secret = egress.AskCredential, "POST", "/repos/x", "gh-token"
	go func() { a, err := s.Asker().Ask(ctx, q); out <- res{a, err} }()
	testutil.WaitFor(t, 10*time.Second, "the credential approval", func() bool {
		pending, _ = s.List(ctx, approvals.Filter{State: approvals.Pending})
		return len(pending) == 1
	})
	var ca approvals.CredentialAction
	if err := json.Unmarshal(pending[0].Action, &ca); err != nil || ca.Secret != "gh-token" || ca.Method != "POST" || ca.Path != "/repos/x" {
		t.Fatalf("credential action %s", pending[0].Action)
	}
	if _, err := s.Decide(ctx, pending[0].ID, approvals.Decision{By: approvals.Decider{Operator: true}, Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	if r := <-out; r.err != nil || r.a.Approved || r.a.Reason != "no" {
		t.Fatalf("denied answer %+v %v", r.a, r.err)
	}

	// Nobody answers: an error, and the approval expires.
	q.Wait = 100 * time.Millisecond
	if _, err := s.Asker().Ask(ctx, q); err == nil {
		t.Fatal("an unanswered question answered")
	}
	if p, _ := s.List(ctx, approvals.Filter{State: approvals.Pending}); len(p) != 0 {
		t.Fatalf("left pending: %+v", p)
	}
	// The held connection goes (ctx ends): the question expires at once.
	cctx, cancel := context.WithCancel(ctx)
	q.Wait = time.Hour
	go func() { a, err := s.Asker().Ask(cctx, q); out <- res{a, err} }()
	testutil.WaitFor(t, 10*time.Second, "the approval", func() bool {
		pending, _ = s.List(ctx, approvals.Filter{State: approvals.Pending})
		return len(pending) == 1
	})
	cancel()
	if r := <-out; r.err == nil {
		t.Fatal("a cancelled question answered")
	}
	if a, _ := s.Get(ctx, pending[0].ID); a.State != approvals.Expired {
		t.Fatalf("after the connection went: %+v", a)
	}
}

type fakeChanges struct {
	s        *approvals.Service
	mu       sync.Mutex
	decided  []string
	failNext error
}

func (f *fakeChanges) ApproveChange(ctx context.Context, sandbox, cid, by, reason string) error {
	f.mu.Lock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		f.mu.Unlock()
		return err
	}
	f.decided = append(f.decided, "approve "+cid+" "+by)
	f.mu.Unlock()
	f.s.ChangeDecided(ctx, sandbox, cid, true, by, reason) // as the egress hook does
	return nil
}

func (f *fakeChanges) DenyChange(sandbox, cid, by, reason string) error {
	f.mu.Lock()
	f.decided = append(f.decided, "deny "+cid+" "+by)
	f.mu.Unlock()
	f.s.ChangeDecided(context.Background(), sandbox, cid, false, by, reason)
	return nil
}

// TestPushApprovals: deciding a push approval decides its change (and a change that
// cannot be applied leaves the approval pending); deciding the change elsewhere closes it.
func TestPushApprovals(t *testing.T) {
	ctx := context.Background()
	fc := &fakeChanges{}
	var rec recorder
	s := newService(t, openStore(t, t.TempDir()), approvals.Options{Changes: fc, Notify: rec.notify})
	fc.s = s
	push := func(cid string) approvals.Approval {
		a, err := s.Create(ctx, approvals.Approval{Kind: approvals.KindPush, Sandbox: "sb-1", AskedBy: approvals.ByGitGate,
			Action: json.RawMessage(`{"change":"` + cid + `","remote":"h:443/r","refs":["refs/heads/main"]}`)}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := push("ch-00000001")
	fc.failNext = errdefs.ErrConflict
	if _, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Operator: true}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("apply failing: %v", err)
	}
	if g, _ := s.Get(ctx, a.ID); g.State != approvals.Pending {
		t.Fatalf("after a failed apply: %+v", g)
	}
	d, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Operator: true}, Reason: "lgtm"})
	if err != nil || d.State != approvals.Approved {
		t.Fatalf("approve: %v %+v", err, d)
	}
	b := push("ch-00000002")
	s.ChangeDecided(ctx, "sb-1", "ch-00000002", false, "operator", "via moat change deny")
	if g, _ := s.Get(ctx, b.ID); g.State != approvals.Denied || g.Reason != "via moat change deny" {
		t.Fatalf("closed by the change: %+v", g)
	}
	if !slices.Equal(fc.decided, []string{"approve ch-00000001 operator"}) {
		t.Fatalf("changes decided: %v", fc.decided)
	}
	ev := rec.list()
	sort.Strings(ev)
	if n := len(ev); n != 4 {
		t.Fatalf("events %v", ev)
	}
}

// TestWebhookDelivery: a delivery is signed so that Verify accepts it, and a receiver
// failing at first gets it again (back-off) until it answers 2xx.
func TestWebhookDelivery(t *testing.T) {
	secret := []byte("hook-secret")
	var mu sync.Mutex
	var got []approvals.Payload
	attempts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/x" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if err := approvals.Verify(secret, r.Header.Get(approvals.HeaderTimestamp), r.Header.Get(approvals.HeaderSignature), body, time.Now(), approvals.DefaultTolerance); err != nil {
			t.Errorf("verify: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		attempts++
		if attempts < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var p approvals.Payload
		_ = json.Unmarshal(body, &p)
		got = append(got, p)
	}))
	defer srv.Close()
	failed := make(chan error, 1)
	wh := &approvals.Webhook{URL: srv.URL, Secret: secret, Backoff: 10 * time.Millisecond,
		Failed: func(a approvals.Approval, event string, err error) { failed <- err }}
	wh.Notify("created", approvals.Approval{ID: "ap-000000000001", State: approvals.Pending})
	wh.Close(time.Minute)
	mu.Lock()
	ok := len(got) == 1 && got[0].Event == "created" && got[0].Approval.ID == "ap-000000000001" && attempts == 3
	mu.Unlock()
	if !ok {
		t.Fatalf("deliveries %+v after %d attempts", got, attempts)
	}
	// A receiver that always fails: bounded attempts, then Failed.
	wh2 := &approvals.Webhook{URL: srv.URL + "/x", Secret: []byte("wrong"), Attempts: 3, Backoff: time.Millisecond,
		Failed: func(a approvals.Approval, event string, err error) { failed <- err }}
	wh2.Notify("decided", approvals.Approval{ID: "ap-000000000002"})
	wh2.Close(time.Minute)
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("no error")
		}
	default:
		t.Fatal("a failed delivery was not reported")
	}
}

// BenchmarkDecideToWait: the time from a decision to a long-polling waiter returning
// with it (target ≤ 50 ms), median reported.
func BenchmarkDecideToWait(b *testing.B) {
	ctx := context.Background()
	s := newService(b, openStore(b, b.TempDir()), approvals.Options{})
	lat := make([]time.Duration, 0, b.N)
	base := make([]time.Duration, 0, b.N) // the decision alone (its SQLite commit): the baseline
	for range b.N {
		a, err := s.Create(ctx, tool("sb-1", "key:k", "k"), time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		woke := make(chan time.Time, 1)
		go func() {
			if _, err := s.Wait(ctx, a.ID, time.Hour); err != nil {
				b.Error(err)
			}
			woke <- time.Now()
		}()
		for !s.HasWaiter(a.ID) {
			time.Sleep(50 * time.Microsecond)
		}
		t0 := time.Now()
		if _, err := s.Decide(ctx, a.ID, approvals.Decision{Approve: true, By: approvals.Decider{Operator: true}}); err != nil {
			b.Fatal(err)
		}
		base = append(base, time.Since(t0))
		lat = append(lat, (<-woke).Sub(t0))
	}
	slices.Sort(lat)
	slices.Sort(base)
	b.ReportMetric(float64(base[len(base)/2].Microseconds())/1000, "ms-median-decide-alone")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median-decide-to-wake")
	b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds())/1000, "ms-p90")
}
