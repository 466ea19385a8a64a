package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/egress/proxy"
	"github.com/moatdev/moat/internal/testutil"
)

// holder is an upstream on loopback that keeps every connection open until its client
// closes it. Each client first sends a line naming itself (the sandbox); holder counts
// the open connections per name and the most it ever held at once.
type holder struct {
	ln   net.Listener
	mu   sync.Mutex
	open map[string]int
	now  int
	most int
}

func newHolder(t *testing.T, addr string) *holder {
	t.Helper()
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := &holder{ln: ln, open: map[string]int{}}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				h.mu.Lock()
				h.now++
				h.most = max(h.most, h.now)
				h.mu.Unlock()
				defer func() {
					h.mu.Lock()
					h.now--
					h.mu.Unlock()
				}()
				r := bufio.NewReader(c)
				tag, err := r.ReadString('\n')
				if err != nil {
					return
				}
				tag = strings.TrimSpace(tag)
				h.mu.Lock()
				h.open[tag]++
				h.mu.Unlock()
				io.Copy(io.Discard, r) // until the client closes
				h.mu.Lock()
				h.open[tag]--
				h.mu.Unlock()
			}()
		}
	}()
	return h
}

func (h *holder) port() int { return h.ln.Addr().(*net.TCPAddr).Port }

func (h *holder) counts() (now, most int, open map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	open = map[string]int{}
	for k, v := range h.open {
		open[k] = v
	}
	return h.now, h.most, open
}

// fds counts this process' open descriptors (the daemon runs in it), and the sockets and
// pipes among them.
func fds(t *testing.T) (all, sockets, pipes int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		switch {
		case err != nil:
		case strings.HasPrefix(l, "pipe:"):
			pipes++
		case strings.HasPrefix(l, "socket:"):
			sockets++
		}
	}
	return len(ents), sockets, pipes
}

// fdLinks returns what each open descriptor of this process is.
func fdLinks(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		m[e.Name()] = l
	}
	return m
}

// newLinks lists the descriptors of now that were not open (as the same thing) in base.
func newLinks(base, now map[string]string) []string {
	var out []string
	for fd, l := range now {
		if base[fd] != l {
			out = append(out, fd+"→"+l)
		}
	}
	return out
}

// TestDescriptorBudget: the daemon's descriptors are shared, and budgeted. Under runc and
// runsc, three sandboxes each try to hold more connections than their cap (10 against a
// cap of 8) to a loopback upstream that never closes them, against a daemon budget of 12
// proxied connections, while slow unauthenticated clients on --listen never finish their
// headers.
//
//   - at the upstream: never more than 12 connections at once, each sandbox at least its
//     floor; the egress log of every sandbox holds every attempt, the refused ones with
//     the budget or cap as the reason;
//   - the daemon's descriptors grow by no more than the budget allows;
//   - the unix-socket API answers (List), every sandbox still runs commands and passes
//     a liveness sweep;
//   - slow TCP clients beyond the API cap are closed at once, the others are cut by the
//     server after the header timeout;
//   - once the sandboxes close their connections the daemon's pipes return to where they
//     were and its sockets to within a few keep-alive connections of it (with the garbage
//     collector off: released with their connections, not by finalizers).
func TestDescriptorBudget(t *testing.T) {
	for _, rt := range runtimesUnderTest(t) {
		t.Run(rt, func(t *testing.T) { testDescriptorBudget(t, rt) })
	}
}

func testDescriptorBudget(t *testing.T, rt string) {
	const (
		budget   = 12
		perSB    = 8 // each sandbox's cap
		attempts = 10
		apiConns = 4
		slow     = 6
		header   = 5 * time.Second // long enough for every slow client to be dialled within it
	)
	hold := newHolder(t, "127.0.0.6:0")
	listen := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) {
		c.EgressHosts = egress.Hosts{"hold.test": {netip.MustParseAddr("127.0.0.6")}}
		c.EgressBudget = budget
		c.EgressMaxConns = perSB
		c.Listen = listen
		c.APIMaxConns = apiConns
		c.APIHeaderTimeout = header
	})
	ctx := context.Background()
	var sbs []*v1.Sandbox
	for range 3 {
		sbs = append(sbs, e.create(v1.CreateSandboxRequest{Runtime: rt,
			Policy: &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"hold.test"}}}}}))
	}
	// The calls made under load, made once before: the baseline has their keep-alive
	// connections (the client's to the unix socket, the daemon's to each moat-init).
	if _, err := e.c.List(ctx); err != nil {
		t.Fatal(err)
	}
	e.d.Manager.Sweep(ctx)
	for _, sb := range sbs {
		e.mustSh(sb.ID, "true")
		if _, err := e.c.Get(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	baseAll, baseSockets, basePipes := fds(t)
	baseLinks := fdLinks(t)

	// Each sandbox: a session of its own opens its connections, names itself on each and
	// holds them; the connections are decided one after another.
	script := fmt.Sprintf(`trap "" PIPE; for i in $(seq %d); do exec {fd}<>/dev/tcp/hold.test/%d && echo "$1" >&$fd; done; touch /tmp/hold.done; while :; do sleep 600; done`, attempts, hold.port())
	for _, sb := range sbs {
		e.mustSh(sb.ID, fmt.Sprintf("echo '%s' > /tmp/hold.sh; setsid bash /tmp/hold.sh %s </dev/null >/dev/null 2>&1 & echo $! > /tmp/hold.pid", script, sb.ID))
	}
	// Every attempt is decided and logged.
	entries := func(id string) (allowed, refused []v1.EgressEntry) {
		e.d.Egress.Flush()
		list, err := e.c.Egress(ctx, id, 0)
		if err != nil {
			t.Fatalf("egress log of %s: %v", id, err)
		}
		for _, x := range list {
			if x.Proto != "tcp" || x.Name != "hold.test" {
				continue
			}
			if x.Allowed {
				allowed = append(allowed, x)
			} else {
				refused = append(refused, x)
			}
		}
		return allowed, refused
	}
	testutil.WaitFor(t, 2*time.Minute, "every connection attempt decided", func() bool {
		for _, sb := range sbs {
			a, r := entries(sb.ID)
			if len(a)+len(r) < attempts {
				return false
			}
		}
		return true
	})
	totalAllowed := 0
	for _, sb := range sbs {
		a, r := entries(sb.ID)
		totalAllowed += len(a)
		if len(a) < 1 || len(a) > perSB {
			t.Errorf("%s: %d connections allowed, want between its floor (1) and its cap (%d)", sb.ID, len(a), perSB)
		}
		for _, x := range r {
			if !strings.Contains(x.Reason, "budget") && !strings.Contains(x.Reason, "connections at once") {
				t.Errorf("%s: refused with %q, want the budget or the cap as the reason", sb.ID, x.Reason)
			}
		}
	}
	if totalAllowed != budget {
		t.Errorf("%d connections allowed in all, want the budget (%d)", totalAllowed, budget)
	}
	testutil.WaitFor(t, time.Minute, "the allowed connections at the upstream", func() bool {
		now, _, _ := hold.counts()
		return now >= totalAllowed
	})
	now, most, open := hold.counts()
	if most > budget {
		t.Errorf("the upstream held %d connections at once (now %d: %v), over the budget of %d", most, now, open, budget)
	}
	for _, sb := range sbs {
		if open[sb.ID] < 1 {
			t.Errorf("%s holds %d connections at the upstream, want at least its floor (1): %v", sb.ID, open[sb.ID], open)
		}
	}

	// Slow unauthenticated clients on --listen: half a request each, never finished.
	type slowConn struct {
		c    net.Conn
		done chan error
	}
	var slows []slowConn
	resets := 0
	for i := range slow {
		c, err := net.Dial("tcp", listen)
		if err != nil {
			// Beyond the cap the reset may come before the dial returns.
			if i < apiConns || !strings.Contains(err.Error(), "reset") {
				t.Fatalf("slow client %d: %v", i, err)
			}
			resets++
			continue
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "GET /v1/sandboxes HTTP/1.1\r\nHost: moat\r\nX-Slow: %d", i); err != nil {
			// A reset that came before the write is reported by it (the read would see EOF).
			if i < apiConns || !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "broken pipe") {
				t.Fatalf("slow client %d: %v", i, err)
			}
			resets++
			continue
		}
		s := slowConn{c, make(chan error, 1)}
		go func() {
			_, err := c.Read(make([]byte, 1))
			s.done <- err
		}()
		slows = append(slows, s)
	}

	// Under this load the daemon's descriptors stay within what the budget allows: per
	// proxied connection FDsPerConn, plus the test's own ends (the upstream's sockets and
	// the slow clients), the API's cap, and a few for the calls being made.
	all, _, _ := fds(t)
	if limit := baseAll + budget*proxy.FDsPerConn + budget + slow + apiConns + 16; all > limit {
		t.Errorf("%d descriptors open under load, %d before: over the %d the budget allows", all, baseAll, limit)
	}
	// The unix socket answers, and every sandbox is alive and runs commands.
	list, err := e.c.List(ctx)
	if err != nil || len(list) != len(sbs) {
		t.Fatalf("List over the unix socket under load: %d sandboxes, %v", len(list), err)
	}
	e.d.Manager.Sweep(ctx)
	for _, sb := range sbs {
		if out := e.mustSh(sb.ID, "echo alive"); strings.TrimSpace(out) != "alive" {
			t.Errorf("%s: exec under load printed %q", sb.ID, out)
		}
		got, err := e.c.Get(ctx, sb.ID)
		if err != nil || got.State != "running" {
			t.Errorf("%s after a liveness sweep under load: %v, %v", sb.ID, got, err)
		}
	}
	// Slow clients: the server closes every one: those beyond the cap at once (a reset,
	// never served), the first apiConns when their header timeout ends (an orderly close
	// without a response).
	eofs := 0
	var got []string
	for i, s := range slows {
		select {
		case err := <-s.done:
			got = append(got, fmt.Sprint(err))
			switch {
			case err == io.EOF:
				eofs++
			case err != nil && strings.Contains(err.Error(), "reset"):
				resets++
			default:
				t.Errorf("slow client %d: read gave %v, want the server's close", i, err)
			}
		case <-time.After(header + 30*time.Second):
			t.Errorf("slow client %d still open %s after its header timeout of %s", i, header+30*time.Second, header)
		}
	}
	if eofs != apiConns || resets != slow-apiConns {
		t.Errorf("slow clients: %d cut after the header timeout, %d refused at once; want %d and %d (%q)", eofs, resets, apiConns, slow-apiConns, got)
	}

	// The sandboxes close their connections: the daemon gives back every descriptor, the
	// pipes it spliced through included, with no garbage collection to close them.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, sb := range sbs {
		e.mustSh(sb.ID, "kill -- -$(cat /tmp/hold.pid)")
	}
	testutil.WaitFor(t, time.Minute, "the upstream connections closed", func() bool {
		now, _, _ := hold.counts()
		return now == 0
	})
	// Sockets: a few keep-alive connections may have been opened since the baseline (the
	// client's to the unix socket, the daemon's to moat-init), never one per proxied
	// connection; the store may have opened a database connection more (not counted).
	const keepAlive = 6
	var lastSockets, lastPipes int
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, lastSockets, lastPipes = fds(t)
		if (lastSockets <= baseSockets+keepAlive && lastPipes <= basePipes) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lastSockets > baseSockets+keepAlive || lastPipes > basePipes {
		t.Errorf("after every connection closed: %d sockets and %d pipes open, %d and %d before the load; new: %v", lastSockets, lastPipes, baseSockets, basePipes, newLinks(baseLinks, fdLinks(t)))
	}
}
