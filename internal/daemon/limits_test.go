package daemon

import (
	"net"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/proxy"
	"github.com/moatdev/moat/internal/sandbox"
)

func TestEgressBudget(t *testing.T) {
	for _, tc := range []struct {
		nofile            uint64
		conns             int
		budget, wantFloor int
	}{
		{20000, 0, (20000 - 5000) / proxy.FDsPerConn, 32}, // a quarter kept: 2500 connections
		{1048576, 0, (1048576 - 262144) / proxy.FDsPerConn, 32},
		{4096, 0, (4096 - 1024) / proxy.FDsPerConn, 32}, // the reserve's minimum: 512
		{1024, 0, 1, 1},    // nothing left: one connection
		{20000, 12, 12, 1}, // configured
		{20000, 160, 160, 10},
	} {
		b, f := egressBudget(tc.nofile, tc.conns)
		if b != tc.budget || f != tc.wantFloor {
			t.Errorf("egressBudget(%d, %d) = %d, %d; want %d, %d", tc.nofile, tc.conns, b, f, tc.budget, tc.wantFloor)
		}
		if tc.conns == 0 && tc.nofile > minReserveFDs && uint64(b*proxy.FDsPerConn) > tc.nofile-max(minReserveFDs, tc.nofile/4) {
			t.Errorf("nofile %d: budget %d connections exceeds what the reserve leaves", tc.nofile, b)
		}
	}
}

// TestLimitListener: beyond n connections at once the listener closes new ones at once;
// a closed one frees its place.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan struct{}, 10)
	l := newLimitListener(raw, 2, 0, func() { refused <- struct{}{} })
	defer l.Close()
	accepted := acceptAll(l)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	dial()
	first := <-accepted
	<-accepted
	// The reset may come before the dial returns, or on the first read.
	if third, err := net.Dial("tcp", raw.Addr().String()); err == nil {
		defer third.Close()
		third.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := third.Read(make([]byte, 1)); err == nil {
			t.Fatal("a third connection over a cap of 2 was served")
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("a third connection over a cap of 2 was left hanging")
		}
	}
	<-refused
	first.Close()
	dial()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("a place freed by a closed connection was not given to the next one")
	}
}

// TestDefaultLimits: configured defaults replace the built-in ones field by field, and
// IOUnthrottled turns a default drive throttle off.
func TestDefaultLimits(t *testing.T) {
	if got := defaultLimits(sandbox.Limits{}); got != sandbox.BuiltinLimits() {
		t.Errorf("nothing configured: %+v, want the built-in %+v", got, sandbox.BuiltinLimits())
	}
	got := defaultLimits(sandbox.Limits{DiskBytes: 1 << 30, IOBps: IOUnthrottled, IOIops: 100})
	want := sandbox.BuiltinLimits()
	want.DiskBytes, want.IOBps, want.IOIops = 1<<30, 0, 100
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := defaultLimits(sandbox.Limits{IOIops: IOUnthrottled}); got.IOIops != 0 || got.IOBps != sandbox.BuiltinLimits().IOBps {
		t.Errorf("iops off: %+v", got)
	}
}

// TestLimitListenerPerAddress: one remote address gets at most perAddr of the places;
// another address still gets one, and a closed connection frees its address's place.
func TestLimitListenerPerAddress(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(raw, 4, 2, nil)
	defer l.Close()
	accepted := acceptAll(l)
	// dial connects from src and reports whether the listener serves the connection: an
	// accepted one stays open; a refused one is reset, at the dial or at the first read.
	dial := func(src string) (net.Conn, bool) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			return nil, false
		}
		t.Cleanup(func() { c.Close() })
		return c, stillOpen(c)
	}
	a1, ok1 := dial("127.0.0.1")
	a2, ok2 := dial("127.0.0.1")
	if !ok1 || !ok2 {
		t.Fatal("the first two connections from one address were refused")
	}
	first := <-accepted
	<-accepted
	if _, ok := dial("127.0.0.1"); ok {
		t.Error("a third connection from one address over its cap of 2 was served")
	}
	if _, ok := dial("127.0.0.2"); !ok {
		t.Error("another address was refused while the listener had room")
	}
	<-accepted
	if !stillOpen(a1) || !stillOpen(a2) {
		t.Error("the first address's connections were cut")
	}
	first.Close()
	if _, ok := dial("127.0.0.1"); !ok {
		t.Error("a place freed by a closed connection was not given to its address")
	}
}

// stillOpen reports whether c is open and quiet: a read times out rather than failing.
func stillOpen(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// acceptAll accepts l's connections until it is closed and hands them out in order.
func acceptAll(l net.Listener) <-chan net.Conn {
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return accepted
}
