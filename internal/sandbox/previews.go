package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/linux"
)

// DialPort connects to a TCP port of running sandbox id, from its gateway namespace (the
// path of port previews): nothing but that sandbox's address is dialled.
func (m *Manager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return m.network.DialSandbox(ctx, id, port)
}

// ProcNetTCP returns the text of /proc/net/tcp and /proc/net/tcp6 of sandbox id's network
// namespace, read on a thread inside it. runc's sockets show there; runsc's do not (its
// sentry keeps them: the daemon reads the sandbox's own /proc instead). Its content is the
// sandbox's: parse it as untrusted.
func (m *Manager) ProcNetTCP(ctx context.Context, id string) ([]byte, error) {
	if _, err := m.Get(ctx, id); err != nil {
		return nil, err
	}
	ns, err := os.Open(m.paths(id).netns)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s has no network namespace: %w", id, errdefs.ErrConflict)
	}
	defer ns.Close()
	var out []byte
	err = linux.RunInNetNS(ns, func() error {
		for _, f := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
			fh, err := os.Open(f)
			if err != nil {
				continue // no IPv6
			}
			b, err := io.ReadAll(io.LimitReader(fh, 4<<20))
			fh.Close()
			if err != nil {
				return err
			}
			out = append(out, b...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the sockets of sandbox %s: %w", id, err)
	}
	return out, nil
}
