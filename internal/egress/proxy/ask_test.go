package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

// fakeAsker hands each held connection's question to the test, which answers it.
type fakeAsker struct {
	qs chan askCall
}

type askCall struct {
	q     Question
	ctx   context.Context
	reply chan Answer
}

func newFakeAsker() *fakeAsker { return &fakeAsker{qs: make(chan askCall, 32)} }

func (f *fakeAsker) ask(ctx context.Context, q Question) (Answer, error) {
	call := askCall{q: q, ctx: ctx, reply: make(chan Answer, 1)}
	f.qs <- call
	select {
	case a := <-call.reply:
		return a, nil
	case <-ctx.Done():
		return Answer{}, ctx.Err()
	}
}

// next waits for the next question.
func (f *fakeAsker) next(t testing.TB) askCall {
	t.Helper()
	select {
	case c := <-f.qs:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no question asked")
		return askCall{}
	}
}

func (f *fakeAsker) none(t testing.TB) {
	t.Helper()
	select {
	case c := <-f.qs:
		t.Fatalf("asked %+v, want no question", c.q)
	default:
	}
}

// askHarness is a harness whose policy asks about allowed.test, with AddRule applying
// rules as internal/egress does: the spec changes and the proxy rechecks.
type askHarness struct {
	*harness
	asker *fakeAsker
	mu    sync.Mutex
	spec  policy.Spec
	added []string
}

func newAskHarness(t testing.TB, spec policy.Spec, cfg Config) *askHarness {
	t.Helper()
	a := &askHarness{asker: newFakeAsker(), spec: spec}
	cfg.Ask = a.asker.ask
	cfg.AddRule = func(_ context.Context, phase, rule string) error {
		a.mu.Lock()
		s, err := a.spec.WithAllowRule(phase, rule)
		if err == nil {
			a.spec = s
			a.added = append(a.added, rule)
		}
		a.mu.Unlock()
		if err != nil {
			return err
		}
		a.setSpec(s)
		a.p.Recheck()
		return nil
	}
	a.harness = newHarness(t, policy.Rules{Net: policy.NetDenyAll}, cfg)
	a.setSpec(spec)
	return a
}

func (a *askHarness) setSpec(s policy.Spec) {
	c, err := policy.CompileSpec(s)
	if err != nil {
		a.t.Fatal(err)
	}
	pol, _ := c.Phase(s.Phase)
	a.harness.mu.Lock()
	a.pol = pol
	a.harness.mu.Unlock()
}

func askSpec(r policy.Rules) policy.Spec { return policy.Single(r) }

func (h *harness) eventCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// waitEvent waits for the n-th event (1-based).
func (h *harness) waitEvent(n int) Event {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		if len(h.events) >= n {
			ev := h.events[n-1]
			h.mu.Unlock()
			return ev
		}
		h.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	h.t.Fatalf("no event %d", n)
	return Event{}
}

// roundTrip sends one line and wants the echo.
func roundTrip(t testing.TB, c net.Conn, msg string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "echo: "+msg {
		t.Fatalf("got %q, %v; want the echo of %q", line, err, msg)
	}
}

func TestAskApproveOnce(t *testing.T) {
	up := newUpstream(t, echo)
	a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{AskWait: func() time.Duration { return time.Minute }})
	a.to(synthetic, up.port(), loopback())
	c := a.dial()
	io.WriteString(c, "hello\n")
	call := a.asker.next(t)
	if q := call.q; q.Name != "allowed.test" || q.Port != up.port() || q.Rule != "allowed.test" || q.Phase != "run" || q.Wait != time.Minute || q.Addr.String() != synthetic {
		t.Fatalf("question = %+v", q)
	}
	// Held: nothing dialled, nothing recorded yet.
	time.Sleep(50 * time.Millisecond)
	if up.count() != 0 || len(a.dials) != 0 || a.eventCount() != 0 || a.p.Held() != 1 {
		t.Fatalf("while held: upstream conns %d, dials %v, events %d, held %d", up.count(), a.dials, a.eventCount(), a.p.Held())
	}
	call.reply <- Answer{ID: "ap-1", Approved: true, By: "alice"}
	roundTrip(t, c, "hello\n")
	ev := a.waitEvent(1)
	if !ev.Allowed || !ev.Ask || ev.Rule != "ask allowed.test" || !strings.Contains(ev.Reason, "approved by alice (approval ap-1) for this connection") {
		t.Fatalf("event = %+v", ev)
	}
	if a.p.Held() != 0 {
		t.Fatalf("held = %d after the decision", a.p.Held())
	}
	// Once: the next connection is asked again, and the policy is unchanged.
	c2 := a.dial()
	io.WriteString(c2, "again\n")
	call = a.asker.next(t)
	call.reply <- Answer{ID: "ap-2", Approved: true, By: "alice"}
	roundTrip(t, c2, "again\n")
	if len(a.added) != 0 {
		t.Fatalf("rules added for a one-time approval: %v", a.added)
	}
}

func TestAskApproveForSandbox(t *testing.T) {
	up := newUpstream(t, echo)
	a := newAskHarness(t, askSpec(policy.Rules{}), Config{})
	s := a.spec
	s.AskAll = true
	a.spec = s
	a.setSpec(s)
	a.to(synthetic, up.port(), loopback())
	c := a.dial()
	io.WriteString(c, "hello\n")
	call := a.asker.next(t)
	if call.q.Rule != "" || call.q.Wait != DefaultAskWait {
		t.Fatalf("question = %+v (ask-all has no rule; default wait)", call.q)
	}
	call.reply <- Answer{ID: "ap-7", Approved: true, ForSandbox: true, By: "bob"}
	roundTrip(t, c, "hello\n")
	want := "allowed.test:" + itoa(up.port())
	if len(a.added) != 1 || a.added[0] != want {
		t.Fatalf("rules added = %v, want [%s]", a.added, want)
	}
	ev := a.waitEvent(1)
	if !ev.Allowed || !strings.Contains(ev.Reason, "approved by bob (approval ap-7) for the sandbox: allow "+want+" added to phase run") {
		t.Fatalf("event = %+v", ev)
	}
	// The next connection passes without a question, allowed by the added rule.
	c2 := a.dial()
	io.WriteString(c2, "again\n")
	roundTrip(t, c2, "again\n")
	a.asker.none(t)
	if ev := a.waitEvent(2); !ev.Allowed || ev.Ask || ev.Rule != "allow "+want {
		t.Fatalf("second event = %+v", ev)
	}
	// Approved for the sandbox on one port only.
	a.to(synthetic, up.port()+1, loopback())
	c3 := a.dial()
	io.WriteString(c3, "x\n")
	a.asker.next(t).reply <- Answer{ID: "ap-8", By: "bob"}
	if !closed(c3) {
		t.Fatal("denied connection not closed")
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func TestAskDenied(t *testing.T) {
	up := newUpstream(t, echo)
	a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{})
	a.to(synthetic, up.port(), loopback())
	c := a.dial()
	io.WriteString(c, "hello\n")
	a.asker.next(t).reply <- Answer{ID: "ap-3", By: "carol", Reason: "not today"}
	if !closed(c) {
		t.Fatal("denied connection not closed")
	}
	ev := a.waitEvent(1)
	if ev.Allowed || ev.Reason != "denied by carol (approval ap-3): not today" {
		t.Fatalf("event = %+v", ev)
	}
	if up.count() != 0 || len(a.dials) != 0 {
		t.Fatalf("upstream reached: %d conns, dials %v", up.count(), a.dials)
	}
}

func TestAskTimeout(t *testing.T) {
	up := newUpstream(t, echo)
	a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{AskWait: func() time.Duration { return 150 * time.Millisecond }})
	a.to(synthetic, up.port(), loopback())
	c := a.dial()
	io.WriteString(c, "hello\n")
	call := a.asker.next(t) // never answered
	if !closed(c) {
		t.Fatal("timed-out connection not closed")
	}
	if call.ctx.Err() == nil {
		t.Fatal("the asker's context did not end with the wait")
	}
	ev := a.waitEvent(1)
	if ev.Allowed || ev.Reason != "held for approval: no decision within 150ms" {
		t.Fatalf("event = %+v", ev)
	}
	if up.count() != 0 {
		t.Fatal("upstream reached")
	}
}

func TestAskSandboxStops(t *testing.T) {
	up := newUpstream(t, echo)
	a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{})
	a.to(synthetic, up.port(), loopback())
	c := a.dial()
	io.WriteString(c, "hello\n")
	call := a.asker.next(t)
	done := make(chan struct{})
	go func() { a.p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for a held connection")
	}
	if call.ctx.Err() == nil {
		t.Fatal("the asker's context did not end with the proxy")
	}
	if !closed(c) {
		t.Fatal("held connection not closed")
	}
	if ev := a.waitEvent(1); ev.Allowed || !strings.Contains(ev.Reason, "ended before a decision") {
		t.Fatalf("event = %+v", ev)
	}
	if up.count() != 0 {
		t.Fatal("upstream reached")
	}
}

func TestAskCap(t *testing.T) {
	up := newUpstream(t, echo)
	a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{MaxHeld: 2})
	a.to(synthetic, up.port(), loopback())
	var calls []askCall
	for range 2 {
		c := a.dial()
		io.WriteString(c, "hello\n")
		calls = append(calls, a.asker.next(t))
	}
	c3 := a.dial()
	io.WriteString(c3, "third\n")
	if !closed(c3) {
		t.Fatal("connection over the cap not refused")
	}
	if ev := a.waitEvent(1); ev.Allowed || !strings.Contains(ev.Reason, "2 connections of this sandbox already wait") {
		t.Fatalf("event = %+v", ev)
	}
	a.asker.none(t)
	// A decision frees a place.
	calls[0].reply <- Answer{ID: "ap-1", By: "d"}
	a.waitEvent(2)
	c4 := a.dial()
	io.WriteString(c4, "fourth\n")
	a.asker.next(t)
	if up.count() != 0 {
		t.Fatal("upstream reached")
	}
}

func TestAskPolicyChangeEndsHold(t *testing.T) {
	up := newUpstream(t, echo)
	for _, tc := range []struct {
		name  string
		rules policy.Rules
		pass  bool
	}{
		{"now allowed", policy.Rules{Allow: []string{"allowed.test"}}, true},
		{"now denied", policy.Rules{Deny: []string{"allowed.test"}, Allow: []string{"other.test"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{})
			a.to(synthetic, up.port(), loopback())
			c := a.dial()
			io.WriteString(c, "hello\n")
			call := a.asker.next(t)
			a.setSpec(askSpec(tc.rules))
			a.p.Recheck()
			select {
			case <-call.ctx.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the hold did not end with the policy change")
			}
			ev := a.waitEvent(1)
			if tc.pass {
				roundTrip(t, c, "hello\n")
				if !ev.Allowed || !strings.Contains(ev.Reason, "now allows it") {
					t.Fatalf("event = %+v", ev)
				}
				return
			}
			if !closed(c) || ev.Allowed || !strings.Contains(ev.Reason, "now denies it") {
				t.Fatalf("event = %+v", ev)
			}
		})
	}
}

// An approved-once connection stays approved when the policy changes but still asks,
// and is cut when it comes to deny it.
func TestAskApprovedRecheck(t *testing.T) {
	up := newUpstream(t, echo)
	a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{})
	a.to(synthetic, up.port(), loopback())
	c := a.dial()
	io.WriteString(c, "hello\n")
	a.asker.next(t).reply <- Answer{ID: "ap-1", Approved: true, By: "e"}
	roundTrip(t, c, "hello\n")
	a.setSpec(askSpec(policy.Rules{Ask: []string{"allowed.test"}, Allow: []string{"x.test"}}))
	if n := a.p.Recheck(); n != 0 {
		t.Fatalf("Recheck cut %d approved connections the policy still asks about", n)
	}
	a.setSpec(askSpec(policy.Rules{Deny: []string{"allowed.test"}, Allow: []string{"x.test"}}))
	if n := a.p.Recheck(); n != 1 {
		t.Fatalf("Recheck cut %d, want the approved connection the policy now denies", n)
	}
}

func TestAskWithoutAsker(t *testing.T) {
	up := newUpstream(t, echo)
	h := newHarness(t, policy.Rules{Ask: []string{"allowed.test"}}, Config{})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	io.WriteString(c, "hello\n")
	if !closed(c) {
		t.Fatal("not refused")
	}
	if ev := h.lastEvent(); ev.Allowed || !strings.Contains(ev.Reason, "no approvals service") {
		t.Fatalf("event = %+v", ev)
	}
}

func TestFormatWait(t *testing.T) {
	for d, want := range map[time.Duration]string{2 * time.Minute: "2m", 90 * time.Second: "1m30s", time.Hour: "1h", 150 * time.Millisecond: "150ms", 30 * time.Second: "30s"} {
		if got := FormatWait(d); got != want {
			t.Errorf("FormatWait(%v) = %q, want %q", d, got, want)
		}
	}
}

// approvalRecorder serves plain HTTP and records whether its connection came approved.
type approvalRecorder struct {
	mu       sync.Mutex
	approved []bool
}

func (f *approvalRecorder) Serve(ctx context.Context, client net.Conn, head []byte, host string, port int, dial func(context.Context) (net.Conn, error)) (int64, int64, error) {
	f.mu.Lock()
	f.approved = append(f.approved, Approved(ctx))
	f.mu.Unlock()
	io.WriteString(client, "intercepted\n")
	return int64(len(head)), 12, nil
}

func (f *approvalRecorder) PlainHTTP() bool { return true }

// An approved connection to an inspected host goes through the interceptor as an allowed
// one does, marked approved so that its per-request checks take the policy's ask as allow.
func TestAskApprovedIntercepted(t *testing.T) {
	up := newUpstream(t, echo)
	ic := &approvalRecorder{}
	a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{
		Intercept: func(host string, port uint16) Interceptor {
			if host == "allowed.test" {
				return ic
			}
			return nil
		},
	})
	a.to(synthetic, up.port(), loopback())
	c := a.dial()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	a.asker.next(t).reply <- Answer{ID: "ap-1", Approved: true, By: "f"}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "intercepted\n" {
		t.Fatalf("got %q, %v", line, err)
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if len(ic.approved) != 1 || !ic.approved[0] {
		t.Fatalf("interceptor saw approved = %v", ic.approved)
	}
}

// A held connection holds its place in the connection budget.
func TestAskHeldCountsAgainstBudget(t *testing.T) {
	up := newUpstream(t, echo)
	a := newAskHarness(t, askSpec(policy.Rules{Ask: []string{"allowed.test"}}), Config{MaxConns: 1})
	a.to(synthetic, up.port(), loopback())
	c := a.dial()
	io.WriteString(c, "hello\n")
	call := a.asker.next(t)
	// Over the budget: reset at once — seen at the dial itself when the reset comes before
	// the dialer looks (a loaded host), else at the first read.
	if c2, err := net.Dial("tcp", a.ln.Addr().String()); err == nil {
		defer c2.Close()
		io.WriteString(c2, "second\n")
		if !closed(c2) {
			t.Fatal("a connection over the budget was not refused while another was held")
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	if ev := a.waitEvent(1); ev.Allowed || !strings.Contains(ev.Reason, "more than 1 connections at once") {
		t.Fatalf("event = %+v, want a budget refusal", ev)
	}
	a.asker.none(t)
	call.reply <- Answer{ID: "ap-1", Approved: true, By: "g"}
	roundTrip(t, c, "hello\n")
}
