package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/egress/proxy"
)

// Hosts are names the operator pins to fixed addresses (--egress-hosts): the proxy uses
// them before asking DNS and trusts them even when they are loopback or private.
type Hosts map[string][]netip.Addr

// ParseHosts reads the hosts-file format: "ADDRESS NAME [NAME...]" per line, "#" starts a
// comment. Names are normalised as policy names; a name listed twice gets both addresses.
func ParseHosts(data []byte) (Hosts, error) {
	h := Hosts{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want an address and at least one name", line)
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("line %d: %q is not an IP address", line, f[0])
		}
		for _, n := range f[1:] {
			name, err := policy.NormalizeName(n)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			h[name] = append(h[name], a.Unmap())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading hosts file: %w", err)
	}
	return h, nil
}

// Resolver looks names up for the proxy: pinned hosts first, then DNS through the host's
// resolver (or Server, when set). The sandbox's own DNS answers are never used.
type Resolver struct {
	Hosts Hosts
	// Server is "ip:port" of the upstream DNS server; empty means the system's.
	Server string

	r *net.Resolver
}

// NewResolver returns a Resolver for hosts and server.
func NewResolver(hosts Hosts, server string) *Resolver {
	r := &Resolver{Hosts: hosts, Server: server, r: net.DefaultResolver}
	if server != "" {
		r.r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	return r
}

// Resolve returns name's addresses.
func (r *Resolver) Resolve(ctx context.Context, name string) ([]proxy.Resolved, error) {
	if as, ok := r.Hosts[name]; ok {
		out := make([]proxy.Resolved, len(as))
		for i, a := range as {
			out[i] = proxy.Resolved{Addr: a, Pinned: true}
		}
		return out, nil
	}
	as, err := r.r.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, err
	}
	out := make([]proxy.Resolved, len(as))
	for i, a := range as {
		out[i] = proxy.Resolved{Addr: a.Unmap()}
	}
	return out, nil
}
