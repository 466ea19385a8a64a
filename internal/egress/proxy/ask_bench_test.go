package proxy

import (
	"bufio"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/policy"
)

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// oneConn makes one connection through h's proxy and waits for the echo of a line.
func oneConn(b *testing.B, h *harness) time.Duration {
	start := time.Now()
	c, err := net.Dial("tcp", h.ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	io.WriteString(c, "hi\n")
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	c.Close()
	return d
}

// BenchmarkAskApprovedRule compares, in one run and alternating connection by
// connection, a connection allowed by a plain allow rule with one allowed by the rule an
// approval for the sandbox added (the sandbox asks for everything else): the added
// latency of a rule approved in advance. Target: none measurable (≤ 0.1 ms).
func BenchmarkAskApprovedRule(b *testing.B) {
	up := newUpstream(b, echo)
	plain := newHarness(b, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
	plain.to(synthetic, up.port(), loopback())

	spec := policy.Single(policy.Rules{})
	spec.AskAll = true
	asked := newAskHarness(b, spec, Config{})
	asked.to(synthetic, up.port(), loopback())
	// The approval, in advance: the first connection is held and approved for the sandbox.
	c, err := net.Dial("tcp", asked.ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	io.WriteString(c, "hi\n")
	asked.asker.next(b).reply <- Answer{ID: "ap-1", Approved: true, ForSandbox: true, By: "bench"}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		b.Fatal(err)
	}
	c.Close()
	if len(asked.added) != 1 {
		b.Fatalf("rule not added: %v", asked.added)
	}

	var base, approved []time.Duration
	for b.Loop() {
		base = append(base, oneConn(b, plain))
		approved = append(approved, oneConn(b, asked.harness))
	}
	select {
	case q := <-asked.asker.qs:
		b.Fatalf("asked again: %+v", q.q)
	default:
	}
	mb, ma := median(base), median(approved)
	b.ReportMetric(float64(mb.Microseconds()), "plain-median-µs")
	b.ReportMetric(float64(ma.Microseconds()), "approved-median-µs")
	b.ReportMetric(float64((ma - mb).Microseconds()), "added-µs")
}

// BenchmarkAskDecisionToFlow measures how long a held connection takes to move once the
// decision is made: the fake asker approves at t0, the upstream notes when the client's
// first byte arrives. Target ≤ 50 ms.
func BenchmarkAskDecisionToFlow(b *testing.B) {
	first := make(chan time.Time, 1)
	up := newUpstream(b, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 64)
		if n, _ := c.Read(buf); n > 0 {
			first <- time.Now()
		}
	})
	a := newAskHarness(b, policy.Single(policy.Rules{Ask: []string{"allowed.test"}}), Config{})
	a.to(synthetic, up.port(), loopback())
	var samples []time.Duration
	for b.Loop() {
		c, err := net.Dial("tcp", a.ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		io.WriteString(c, "hi\n")
		call := a.asker.next(b)
		t0 := time.Now()
		call.reply <- Answer{ID: "ap", Approved: true, By: "bench"}
		select {
		case t1 := <-first:
			samples = append(samples, t1.Sub(t0))
		case <-time.After(5 * time.Second):
			b.Fatal("the upstream saw nothing")
		}
		c.Close()
	}
	b.ReportMetric(float64(median(samples).Microseconds()), "decision-to-first-byte-median-µs")
}
