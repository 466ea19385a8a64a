package policy

import "net/netip"

// Embedded is an IPv4 address carried inside an IPv6 address, with the name of the form
// that carries it.
type Embedded struct {
	Form string     // e.g. "6to4", "Teredo client"
	Addr netip.Addr // IPv4
}

// EmbeddedIPv4 returns the IPv4 addresses that a carries in a form which a translator,
// relay or tunnel on the path may deliver to that IPv4 address; unused entries have the
// zero Addr. The forms are:
//
//	::ffff:a.b.c.d           IPv4-mapped (RFC 4291)
//	::ffff:0:a.b.c.d         IPv4-translated (RFC 2765)
//	::a.b.c.d                IPv4-compatible, deprecated (RFC 4291); includes :: and ::1
//	64:ff9b::a.b.c.d         NAT64 well-known prefix (RFC 6052)
//	2002:AABB:CCDD::/48      6to4: bits 16-47 (RFC 3056)
//	2001:0:SSSS:SSSS::CCCC:CCCC
//	                         Teredo: the server in bits 32-63, the client in the last 32
//	                         bits, inverted (RFC 4380)
//	PREFIX:0[02]00:5efe:a.b.c.d
//	                         ISATAP interface identifier, under any prefix (RFC 5214)
//
// The local-use NAT64 prefix 64:ff9b:1::/48 (RFC 8215) is not among them: where its IPv4
// address sits depends on the prefix length the network's translator uses, so no one
// address can be read from it (the proxy refuses the whole prefix). An IPv4 a, or an
// invalid one, carries nothing. EmbeddedIPv4 is pure and does not allocate.
func EmbeddedIPv4(a netip.Addr) [3]Embedded {
	var out [3]Embedded
	if !a.Is6() {
		return out
	}
	b := a.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[i+1], b[i+2], b[i+3]}) }
	zero := func(from, to int) bool {
		for _, c := range b[from:to] {
			if c != 0 {
				return false
			}
		}
		return true
	}
	n := 0
	add := func(form string, addr netip.Addr) {
		out[n] = Embedded{Form: form, Addr: addr}
		n++
	}
	switch {
	case zero(0, 10) && b[10] == 0xff && b[11] == 0xff:
		add("IPv4-mapped", v4(12))
	case zero(0, 8) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0:
		add("IPv4-translated", v4(12))
	case zero(0, 12):
		add("IPv4-compatible", v4(12))
	case b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(4, 12):
		add("NAT64", v4(12))
	case b[0] == 0x20 && b[1] == 0x02:
		add("6to4", v4(2))
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0:
		add("Teredo server", v4(4))
		add("Teredo client", netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
	}
	if (b[8] == 0x00 || b[8] == 0x02) && b[9] == 0 && b[10] == 0x5e && b[11] == 0xfe {
		add("ISATAP", v4(12))
	}
	return out
}

// denyAddr finds the first CIDR deny rule covering an (unmapped) address, or an IPv4
// address it carries (EmbeddedIPv4), on port: a range that is denied is denied in every
// form that may reach it.
func (t *table) denyAddr(a netip.Addr, port uint16) (Decision, bool) {
	if d, ok := t.addr(a, port); ok {
		return d, true
	}
	if len(t.cidr) == 0 {
		return Decision{}, false
	}
	for _, e := range EmbeddedIPv4(a) {
		if !e.Addr.IsValid() {
			break
		}
		if d, ok := t.addr(e.Addr, port); ok {
			d.Reason += " (the " + e.Form + " address " + a.String() + " carries " + e.Addr.String() + ")"
			return d, true
		}
	}
	return Decision{}, false
}
