package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	h, err := ParseHosts([]byte("# pinned\n127.0.0.2 Allowed.Test. doh.test  # both\n\n::ffff:10.0.0.1 db.internal\n10.0.0.2 db.internal\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"allowed.test": {"127.0.0.2"}, "doh.test": {"127.0.0.2"}, "db.internal": {"10.0.0.1", "10.0.0.2"}}
	if len(h) != len(want) {
		t.Fatalf("got %v", h)
	}
	for name, addrs := range want {
		var got []string
		for _, a := range h[name] {
			got = append(got, a.String())
		}
		if strings.Join(got, ",") != strings.Join(addrs, ",") {
			t.Errorf("%s = %v, want %v", name, got, addrs)
		}
	}
	for _, bad := range []string{"127.0.0.1\n", "not-an-ip host\n", "127.0.0.1 bad_name!\n", "fe80::1%eth0 x.test\n", "127.0.0.1 10.0.0.1\n"} {
		if _, err := ParseHosts([]byte(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("ParseHosts(%q) = %v, want an error naming line 1", bad, err)
		}
	}
}

func FuzzParseHosts(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHosts(data)
		if err != nil {
			return
		}
		for name, addrs := range h {
			if name == "" || strings.ToLower(name) != name || len(addrs) == 0 {
				t.Fatalf("entry %q → %v", name, addrs)
			}
			for _, a := range addrs {
				if !a.IsValid() || a.Is4In6() || a != a.Unmap() || a.Zone() != "" {
					t.Fatalf("address %v for %q", a, name)
				}
				_ = netip.AddrPortFrom(a, 1)
			}
		}
	})
}
