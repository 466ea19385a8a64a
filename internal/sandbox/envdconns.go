package sandbox

import (
	"net"
	"sync"
)

// envdConns are the open connections to each sandbox's moat-init, so that a sandbox that
// stops takes its streams with it. Under runc and gVisor with host networking, the host
// kernel resets them when the container's sockets go; under gVisor's own network stack
// (runsc --network=sandbox) nothing does: a stream to a sandbox whose kernel died would
// wait for TCP's timeouts (minutes).
type envdConns struct {
	mu   sync.Mutex
	byID map[string]map[*trackedConn]struct{}
}

// track registers c as a connection to sandbox id; closing it unregisters it.
func (s *envdConns) track(id string, c net.Conn) net.Conn {
	t := &trackedConn{Conn: c, id: id, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]map[*trackedConn]struct{}{}
	}
	if s.byID[id] == nil {
		s.byID[id] = map[*trackedConn]struct{}{}
	}
	s.byID[id][t] = struct{}{}
	return t
}

// closeAll closes every open connection to sandbox id and returns how many there were.
func (s *envdConns) closeAll(id string) int {
	s.mu.Lock()
	conns := s.byID[id]
	delete(s.byID, id)
	s.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	return len(conns)
}

type trackedConn struct {
	net.Conn
	id   string
	set  *envdConns
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.byID[c.id], c)
		if len(c.set.byID[c.id]) == 0 {
			delete(c.set.byID, c.id)
		}
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}
