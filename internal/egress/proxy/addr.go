package proxy

import (
	"net/netip"

	"github.com/moatdev/moat/internal/egress/policy"
)

// blocked are the address ranges the proxy never connects to on a name's behalf unless
// the operator pinned the address (--egress-hosts) or the policy names it with a CIDR
// rule: they reach the host itself, its private networks or a cloud's metadata service.
var blocked = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address (moat's own links)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (ULA) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
	// Where a local-use NAT64 prefix carries its IPv4 address depends on the translator's
	// prefix length (RFC 8215, RFC 6052), so it cannot be checked: refused whole.
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a local-use NAT64 address (the IPv4 address it reaches cannot be known)"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
}

// CheckAddr says why the proxy must not connect to a, or "" when it may: a must be a
// public unicast address and none of the host's own (host). An IPv6 address that carries
// an IPv4 address (IPv4-mapped or -compatible, NAT64, 6to4, Teredo, ISATAP; see
// policy.EmbeddedIPv4) is refused when any IPv4 address it carries would be, since a
// translator or tunnel on the path may deliver it there. Addresses with a zone are link
// scoped and refused. CheckAddr is pure.
func CheckAddr(a netip.Addr, host []netip.Addr) string {
	if !a.IsValid() {
		return "an invalid address"
	}
	if a.Zone() != "" {
		return "a scoped (zoned) address"
	}
	a = a.Unmap()
	if why := checkOne(a, host); why != "" {
		return why
	}
	for _, e := range policy.EmbeddedIPv4(a) {
		if !e.Addr.IsValid() {
			break
		}
		if why := checkOne(e.Addr, host); why != "" {
			return "carrying " + e.Addr.String() + " (" + e.Form + "), " + why
		}
	}
	return ""
}

// checkOne applies the ranges and the host's addresses to one unmapped address.
func checkOne(a netip.Addr, host []netip.Addr) string {
	for _, h := range host {
		if h.WithZone("").Unmap() == a {
			return "one of the host's own addresses"
		}
	}
	for _, b := range blocked {
		if b.prefix.Contains(a) {
			return b.why
		}
	}
	if a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return "the broadcast address"
	}
	return ""
}
