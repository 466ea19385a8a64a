package proxy

import "net/netip"

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
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
}

// CheckAddr says why the proxy must not connect to a, or "" when it may: a must be a
// public unicast address and none of the host's own (host). IPv4-mapped IPv6 addresses
// are judged as the IPv4 address they carry.
func CheckAddr(a netip.Addr, host []netip.Addr) string {
	if !a.IsValid() {
		return "an invalid address"
	}
	a = a.Unmap()
	for _, h := range host {
		if h.Unmap() == a {
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
