package proxy

import (
	"bufio"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    admission
		want string // substring of the refusal; "" = admitted
	}{
		{"empty budget", admission{total: 10, floor: 2, cap: 5}, ""},
		{"at its cap", admission{total: 10, floor: 2, cap: 5, own: 5, used: 5, committed: 5}, "more than 5 connections"},
		{"budget spent", admission{total: 10, floor: 2, cap: 50, own: 1, used: 10, committed: 11}, "budget of 10 proxied connections"},
		{"within its floor while others hold the rest", admission{total: 10, floor: 2, cap: 50, own: 1, used: 9, committed: 10}, ""},
		{"above its floor, the rest guaranteed to others", admission{total: 10, floor: 2, cap: 50, own: 6, used: 6, committed: 10}, "kept for other sandboxes"},
		{"above its floor, room left", admission{total: 10, floor: 2, cap: 50, own: 6, used: 6, committed: 9}, ""},
		{"no floor", admission{total: 10, cap: 50, own: 0, used: 9, committed: 10}, "kept for other sandboxes"},
		{"cap before budget", admission{total: 1, floor: 0, cap: 1, own: 1, used: 1, committed: 1}, "more than 1 connections"},
	} {
		got := admit(tc.a)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: admit(%+v) = %q, want %q", tc.name, tc.a, got, tc.want)
		}
	}
}

// TestBudgetFloors: one sandbox taking all it can leaves every other sandbox its floor,
// and the budget is never exceeded.
func TestBudgetFloors(t *testing.T) {
	b := NewBudget(20, 4)
	greedy := b.Join(100)
	others := []*Share{b.Join(100), b.Join(100)}
	n := 0
	for greedy.Acquire() == "" {
		n++
	}
	if n != 20-2*4 {
		t.Fatalf("the greedy sandbox got %d connections, want %d (20 less two floors of 4)", n, 12)
	}
	for i, s := range others {
		for j := range 4 {
			if why := s.Acquire(); why != "" {
				t.Fatalf("sandbox %d, connection %d within its floor refused: %s", i, j, why)
			}
		}
		if why := s.Acquire(); why == "" {
			t.Fatalf("sandbox %d got a connection beyond its floor from a spent budget", i)
		}
	}
	if b.Used() != 20 {
		t.Fatalf("used %d, want 20", b.Used())
	}
	// The greedy sandbox gives back two; a newcomer's floor is min(4, 20/4) = 4 but only
	// two connections are free: the budget stays a hard ceiling.
	greedy.Release()
	greedy.Release()
	late := b.Join(100)
	got := 0
	for late.Acquire() == "" {
		got++
	}
	if got != 2 || b.Used() != 20 {
		t.Fatalf("late sandbox got %d (used %d), want 2 (20)", got, b.Used())
	}
	// What a sandbox gives back when it leaves is free for the others above their floors.
	for range got {
		late.Release()
	}
	late.Leave()
	for i := range 2 {
		if why := others[0].Acquire(); why != "" {
			t.Fatalf("free connection %d refused: %s", i, why)
		}
	}
	if why := others[0].Acquire(); why == "" {
		t.Fatal("a sandbox above its floor took from a spent budget")
	}
}

// TestBudgetRefusalIsPrompt: a connection over the shared budget is reset at once and
// logged with the reason; the sandbox's connections within it still relay.
func TestBudgetRefusalIsPrompt(t *testing.T) {
	up := newUpstream(t, echo)
	b := NewBudget(3, 1)
	other := b.Join(10) // another sandbox: one connection of the three is kept for it
	defer other.Leave()
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{MaxConns: 10, Budget: b})
	h.to(synthetic, up.port(), loopback())
	for range 2 {
		c := h.dial()
		io.WriteString(c, "hi\n")
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.refusal(); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Fatalf("connection over the budget: %v, want a reset", err)
	}
	if ev := h.lastEvent(); ev.Allowed || !strings.Contains(ev.Reason, "kept for other sandboxes") || ev.Name != "allowed.test" {
		t.Errorf("event = %+v", ev)
	}
	if why := other.Acquire(); why != "" {
		t.Errorf("the other sandbox's floor was taken: %s", why)
	}
}

// refusal opens a connection to the proxy and returns how it ended within 5 s: the
// error of the dial (a reset may come before it returns) or of the first read.
func (h *harness) refusal() error {
	c, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

// pipeFDs counts this process' open pipes.
func pipeFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// TestSplicePipesReleased: the pipes a relayed connection splices through are closed when
// it ends, not left to the garbage collector (off here, as on a quiet daemon).
func TestSplicePipesReleased(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	up := newUpstream(t, echo)
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
	h.to(synthetic, up.port(), loopback())
	base := pipeFDs(t)
	const k = 20
	var cs []net.Conn
	for range k {
		c := h.dial()
		io.WriteString(c, "hi\n")
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	if n := pipeFDs(t) - base; n > k*(FDsPerConn-2) {
		t.Errorf("%d pipe descriptors for %d connections, want at most %d", n, k, k*(FDsPerConn-2))
	}
	for _, c := range cs {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for pipeFDs(t) > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := pipeFDs(t); n > base {
		t.Errorf("%d pipe descriptors open after every connection closed, %d before", n, base)
	}
}
