package linux

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestReadReady: ReadReady takes a buffer only when the socket has bytes, gives it back on
// EOF, and a read deadline ends the wait with a timeout, holding no buffer.
func TestReadReady(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	get := func() []byte { held++; return make([]byte, 8) }
	put := func([]byte) { held-- }

	s.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf, n, err := ReadReady(raw, get, put)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n != 0 || buf != nil || held != 0 {
		t.Fatalf("idle: %q %d %v, %d buffers held", buf, n, err, held)
	}
	s.SetReadDeadline(time.Time{})
	c.Write([]byte("hello, world"))
	buf, n, err = ReadReady(raw, get, put)
	if err != nil || string(buf[:n]) != "hello, w" || held != 1 {
		t.Fatalf("data: %q %d %v, %d buffers held", buf, n, err, held)
	}
	put(buf)
	buf, n, _ = ReadReady(raw, get, put)
	if string(buf[:n]) != "orld" {
		t.Fatalf("rest: %q", buf[:n])
	}
	put(buf)
	c.Close()
	buf, n, err = ReadReady(raw, get, put)
	if !errors.Is(err, io.EOF) || n != 0 || buf != nil || held != 0 {
		t.Fatalf("EOF: %q %d %v, %d buffers held", buf, n, err, held)
	}
}
