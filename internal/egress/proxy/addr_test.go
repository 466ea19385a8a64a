package proxy

import (
	"net/netip"
	"testing"

	"github.com/moatdev/moat/internal/egress/policy"
)

// embedForms is how many forms embed knows.
const embedForms = 9

// embed writes v4 into an IPv6 address in one of the forms that carry an IPv4 address;
// fill supplies the bits the form leaves free.
func embed(v4 [4]byte, fill [16]byte, form uint8) netip.Addr {
	var b [16]byte
	switch form % embedForms {
	case 0: // IPv4-mapped ::ffff:a.b.c.d
		b[10], b[11] = 0xff, 0xff
		copy(b[12:], v4[:])
	case 1: // IPv4-translated ::ffff:0:a.b.c.d
		b[8], b[9] = 0xff, 0xff
		copy(b[12:], v4[:])
	case 2: // IPv4-compatible ::a.b.c.d
		copy(b[12:], v4[:])
	case 3: // NAT64 64:ff9b::/96
		b[1], b[2], b[3] = 0x64, 0xff, 0x9b
		copy(b[12:], v4[:])
	case 4: // local-use NAT64 64:ff9b:1::/48, the IPv4 address anywhere after the prefix
		b = fill
		b[0], b[1], b[2], b[3], b[4], b[5] = 0, 0x64, 0xff, 0x9b, 0, 1
		off := 6 + int(fill[0])%7
		copy(b[off:], v4[:])
	case 5: // 6to4 2002:V4::/48
		b = fill
		b[0], b[1] = 0x20, 0x02
		copy(b[2:], v4[:])
	case 6: // Teredo server 2001:0:V4::/64
		b = fill
		b[0], b[1], b[2], b[3] = 0x20, 0x01, 0, 0
		copy(b[4:], v4[:])
	case 7: // Teredo client: the last 32 bits, inverted
		b = fill
		b[0], b[1], b[2], b[3] = 0x20, 0x01, 0, 0
		for i, c := range v4 {
			b[12+i] = ^c
		}
	case 8: // ISATAP interface identifier under any prefix
		b = fill
		b[8], b[9], b[10], b[11] = fill[8]&0x02, 0, 0x5e, 0xfe
		copy(b[12:], v4[:])
	}
	return netip.AddrFrom16(b)
}

func TestEmbedFormsRefused(t *testing.T) {
	var fill [16]byte
	for i := range fill {
		fill[i] = byte(0x11 * i)
	}
	for form := uint8(0); form < embedForms; form++ {
		for _, v4 := range [][4]byte{{127, 0, 0, 1}, {10, 1, 2, 3}, {169, 254, 169, 254}, {198, 19, 0, 5}} {
			a := embed(v4, fill, form)
			if why := CheckAddr(a, nil); why == "" {
				t.Errorf("form %d: %s (carrying %v) passed", form, a, v4)
			}
		}
	}
}

// FuzzEmbeddedAddr: for every IPv4 address the IPv4 rules refuse, every IPv6 form that
// carries it is refused too, by CheckAddr and by a CIDR deny rule naming it; and an IPv6
// address CheckAddr accepts carries no IPv4 address it refuses.
func FuzzEmbeddedAddr(f *testing.F) {
	f.Fuzz(func(t *testing.T, v4b []byte, fillb []byte, form uint8, hostb []byte) {
		var v4 [4]byte
		var fill [16]byte
		copy(v4[:], v4b)
		copy(fill[:], fillb)
		var host []netip.Addr
		if len(hostb) >= 4 {
			host = append(host, netip.AddrFrom4([4]byte(hostb[:4])))
		}
		plain := netip.AddrFrom4(v4)
		a := embed(v4, fill, form)

		if CheckAddr(plain, host) != "" && CheckAddr(a, host) == "" {
			t.Fatalf("%s is refused but %s (form %d) that carries it is not", plain, a, form%embedForms)
		}
		if CheckAddr(a, host) == "" {
			for _, e := range policy.EmbeddedIPv4(a) {
				if e.Addr.IsValid() && CheckAddr(e.Addr, host) != "" {
					t.Fatalf("%s passed but carries %s (%s), which is refused", a, e.Addr, e.Form)
				}
			}
		}
		raw := netip.AddrFrom16(fill)
		if CheckAddr(raw, host) == "" {
			for _, e := range policy.EmbeddedIPv4(raw) {
				if e.Addr.IsValid() && CheckAddr(e.Addr, host) != "" {
					t.Fatalf("%s passed but carries %s (%s), which is refused", raw, e.Addr, e.Form)
				}
			}
		}

		// A CIDR deny rule for the IPv4 address denies the forms that reach it.
		if form%embedForms == 4 {
			return // local-use NAT64 carries no knowable address; CheckAddr refuses it whole
		}
		p, err := policy.Compile(policy.Rules{Net: policy.NetAllowAll, Deny: []string{plain.String()}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d := p.Decide(policy.Request{Name: "x.test", Addr: a, Port: 443}); d.Allow {
			t.Fatalf("deny %s allowed %s (form %d): %+v", plain, a, form%embedForms, d)
		}
	})
}
