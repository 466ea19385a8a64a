package daemon

import (
	"bytes"
	"context"
	"net"

	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/sdk"
)

// PreviewsConfig configures port previews (docs/previews.md).
type PreviewsConfig struct {
	// Domain is the host-based previews' domain (<port>-<sandbox-id>.<domain>), with a
	// :port when the URLs carry one; "" leaves only the path-based /preview/<id>/<port>/.
	Domain string
	// AllowPublic lets ports be made public (no token, no key).
	AllowPublic bool
}

// startPreviews serves port previews through the sandboxes' gateway namespaces.
func (d *Daemon) startPreviews(st *store.Store) {
	p := portDialer{m: d.Manager, c: sdk.NewUnix(d.cfg.Socket)}
	d.api.SetPreviews(apiserver.PreviewConfig{Dialer: p, Store: st, Domain: d.cfg.Previews.Domain, AllowPublic: d.cfg.Previews.AllowPublic})
}

// portDialer is the sandboxes' ports as previews see them.
type portDialer struct {
	m *sandbox.Manager
	c *sdk.Client // the daemon's own socket: runsc's sockets are read by an exec
}

func (p portDialer) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return p.m.DialPort(ctx, id, port)
}

// ProcNetTCP reads the sandbox's socket tables: from the host for runc, by running cat in
// the sandbox (as root, as the operator) for runsc, whose sentry keeps its sockets.
func (p portDialer) ProcNetTCP(ctx context.Context, id string) ([]byte, error) {
	sb, err := p.m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Runtime != "runsc" {
		return p.m.ProcNetTCP(ctx, id)
	}
	var out bytes.Buffer
	_, err = p.c.Exec(ctx, id, sdk.ExecRequest{Cmd: "/bin/cat", Args: []string{"/proc/net/tcp", "/proc/net/tcp6"}, User: "root", Stdout: &limited{w: &out, n: 4 << 20}})
	return out.Bytes(), err
}

// limited keeps the first n bytes written and drops the rest.
type limited struct {
	w *bytes.Buffer
	n int
}

func (l *limited) Write(b []byte) (int, error) {
	if k := min(len(b), l.n-l.w.Len()); k > 0 {
		l.w.Write(b[:k])
	}
	return len(b), nil
}
