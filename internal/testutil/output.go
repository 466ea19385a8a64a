package testutil

import (
	"fmt"
	"net"
	"testing"
)

// Tail is the last n bytes written, after a note of how many came before.
func (s *SyncBuffer) Tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		return fmt.Sprintf("[… %d bytes before]\n%s", len(b)-n, b[len(b)-n:])
	}
	return string(b)
}

// FreeAddr returns a loopback address with a port nobody listened on a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
