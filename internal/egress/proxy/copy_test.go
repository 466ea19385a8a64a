package proxy

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"

	"github.com/moatdev/moat/internal/egress/policy"
)

// TestRelayExactBytes: whatever the sizes — small messages copied through the pooled
// buffer, one exactly smallBuf long (the switch to splicing), bulk beyond it in both
// directions at once — every byte arrives once and in order, the half-close of each side
// passes through, and the outcome counts the bytes.
func TestRelayExactBytes(t *testing.T) {
	// The upstream sends down, then reads everything the client sends until its EOF
	// and answers with it.
	down := make([]byte, 3<<20+7)
	rand.Read(down)
	up := newUpstream(t, func(c net.Conn) {
		defer c.Close()
		wrote := make(chan struct{})
		go func() { c.Write(down); close(wrote) }()
		got, _ := io.ReadAll(c)
		<-wrote
		c.Write(got)
	})
	h := newHarness(t, policy.Rules{Allow: []string{"allowed.test"}}, Config{})
	h.to(synthetic, up.port(), loopback())
	c := h.dial()
	var sent bytes.Buffer
	for _, n := range []int{5, 100, smallBuf, smallBuf + 1, 1, 2 << 20} {
		b := make([]byte, n)
		rand.Read(b)
		sent.Write(b)
	}
	go func() {
		c.Write(sent.Bytes())
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, down...), sent.Bytes()...)
	if !bytes.Equal(got, want) {
		t.Fatalf("received %d bytes, want %d (equal: %v)", len(got), len(want), bytes.Equal(got[:min(len(got), len(down))], down[:min(len(got), len(down))]))
	}
	out := <-h.results
	if out.Up != int64(sent.Len()) || out.Down != int64(len(want)) || out.Err != "" {
		t.Errorf("outcome %+v; want up %d down %d", out, sent.Len(), len(want))
	}
}
