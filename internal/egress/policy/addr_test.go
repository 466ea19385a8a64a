package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestEmbeddedIPv4(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want string // "form=addr" entries, space-separated
	}{
		{"127.0.0.1", ""},
		{"2606:4700::1111", ""},
		{"::ffff:10.0.0.1", "IPv4-mapped=10.0.0.1"},
		{"::ffff:0:10.0.0.1", "IPv4-translated=10.0.0.1"},
		{"::7f00:1", "IPv4-compatible=127.0.0.1"},
		{"::1", "IPv4-compatible=0.0.0.1"},
		{"::", "IPv4-compatible=0.0.0.0"},
		{"64:ff9b::7f00:1", "NAT64=127.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "NAT64=169.254.169.254"},
		{"64:ff9b:0:0:1::7f00:1", ""}, // bits 64-95 set: not the /96 form
		{"64:ff9b:1::7f00:1", ""},     // local-use NAT64: the layout is the network's
		{"2002:7f00:1::", "6to4=127.0.0.1"},
		{"2002:a00:1:1234:5678:9abc:def0:1", "6to4=10.0.0.1"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo server=65.54.227.120 Teredo client=127.0.0.1"},
		{"2001:0:a00:1:0:0:5ba9:fefe", "Teredo server=10.0.0.1 Teredo client=164.86.1.1"},
		{"2001:1::1", ""}, // 2001:1::/32 is not Teredo
		{"2001:db8::5efe:a00:1", "ISATAP=10.0.0.1"},
		{"2606:4700:0:0:200:5efe:7f00:1", "ISATAP=127.0.0.1"},
		{"2002:808:808:0:0:5efe:a9fe:a9fe", "6to4=8.8.8.8 ISATAP=169.254.169.254"},
		{"2001:0:808:808:0:5efe:80ff:fffe", "Teredo server=8.8.8.8 Teredo client=127.0.0.1 ISATAP=128.255.255.254"},
		{"2606:4700:0:0:100:5efe:7f00:1", ""}, // 0100:5efe is not an ISATAP identifier
	} {
		var got []string
		for _, e := range EmbeddedIPv4(netip.MustParseAddr(tc.addr)) {
			if e.Addr.IsValid() {
				if !e.Addr.Is4() {
					t.Errorf("%s: %s carries %s, not IPv4", tc.addr, e.Form, e.Addr)
				}
				got = append(got, e.Form+"="+e.Addr.String())
			}
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("EmbeddedIPv4(%s) = %q, want %q", tc.addr, g, tc.want)
		}
	}
	if e := EmbeddedIPv4(netip.Addr{}); e[0].Addr.IsValid() {
		t.Errorf("the zero Addr carries %v", e)
	}
}

// TestDenyRulesCoverEmbeddedForms: a CIDR deny rule denies every IPv6 form that carries
// an address it covers, for names and direct connections; CIDR allow rules name IPv4
// addresses only.
func TestDenyRulesCoverEmbeddedForms(t *testing.T) {
	p := mustCompile(t, Rules{Net: NetAllowAll, Deny: []string{"203.0.113.0/24", "10.0.0.0/8:5432"}}, nil)
	for _, tc := range []struct {
		addr  string
		port  uint16
		allow bool
	}{
		{"203.0.113.7", 443, false},
		{"64:ff9b::cb00:7107", 443, false},
		{"2002:cb00:7107::1", 443, false},
		{"::cb00:7107", 443, false},
		{"::ffff:0:cb00:7107", 443, false},
		{"2001:0:cb00:7107::1", 443, false},                 // Teredo server
		{"2001:0:808:808:0:0:34ff:8ef8", 443, false},        // Teredo client = ^34ff8ef8 = 203.0.113.7
		{"2606:4700::5efe:cb00:7107", 443, false},           // ISATAP
		{"2002:a00:1::", 5432, false},                       // port-limited deny
		{"2002:a00:1::", 443, true},                         // other port
		{"2002:808:808::", 443, true},                       // a public 6to4 address
		{"64:ff9b::808:808", 443, true},                     // NAT64 of a public address
		{"2606:4700::1111", 443, true},                      // plain IPv6
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", 443, true}, // Teredo with public ends
	} {
		a := netip.MustParseAddr(tc.addr)
		for _, req := range []Request{{Name: "x.test", Addr: a, Port: tc.port}, {Addr: a, Port: tc.port}} {
			d := p.Decide(req)
			if d.Allow != tc.allow {
				t.Errorf("Decide(%+v) = %+v, want allow %v", req, d, tc.allow)
			}
			if !tc.allow && a.Is6() && !strings.Contains(d.Reason, "carries") {
				t.Errorf("Decide(%+v): reason %q does not say what the address carries", req, d.Reason)
			}
		}
	}

	// A CIDR allow rule names 10.0.0.1, not the forms that carry it; a deny rule still
	// covers them.
	q := mustCompile(t, Rules{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.9.0.0/16"}}, nil)
	for addr, want := range map[string]bool{
		"10.0.0.1":        true,
		"::ffff:10.0.0.1": true,
		"2002:a00:1::":    false,
		"64:ff9b::a00:1":  false,
		"::a00:1":         false,
		"10.9.0.1":        false,
		"::ffff:10.9.0.1": false,
		"2002:a09:1::":    false,
	} {
		if got := q.NamesAddr(netip.MustParseAddr(addr), 0); got != want {
			t.Errorf("NamesAddr(%s) = %v, want %v", addr, got, want)
		}
	}
}

func ExampleEmbeddedIPv4() {
	for _, e := range EmbeddedIPv4(netip.MustParseAddr("2001:0:4136:e378:8000:63bf:80ff:fffe")) {
		if e.Addr.IsValid() {
			fmt.Println(e.Form, e.Addr)
		}
	}
	// Output:
	// Teredo server 65.54.227.120
	// Teredo client 127.0.0.1
}
