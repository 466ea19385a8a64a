package proxy

import (
	"context"
	"fmt"
	"net"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
)

// DialName connects to name:port for moat itself acting for the sandbox (applying a push
// a person approved): the sandbox's current policy must allow the name, and its addresses
// pass the same checks as a sandbox's connection to it (policy, host addresses, pins).
// The connection is not one of the sandbox's: it is not counted or logged here.
func (p *Proxy) DialName(ctx context.Context, name string, port uint16) (net.Conn, error) {
	req := policy.Request{Name: name, Port: port}
	if _, pol := p.cfg.Policy(); !pol.Decide(req).Allow {
		return nil, fmt.Errorf("the sandbox's egress policy no longer allows %s: %w", hostOf(req), errdefs.ErrPermissionDenied)
	}
	targets, why := p.resolve(ctx, req, false)
	if why != "" {
		return nil, fmt.Errorf("%s: %w", why, errdefs.ErrUnavailable)
	}
	c, _, err := p.dial(ctx, targets)
	return c, err
}
