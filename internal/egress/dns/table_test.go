package dns

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func newTable(t testing.TB, prefix string) *Table {
	t.Helper()
	tab, err := NewTable(netip.MustParsePrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func mustAddr(t testing.TB, tab *Table, name string) netip.Addr {
	t.Helper()
	a, err := tab.Addr(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestNewTableRejects(t *testing.T) {
	for _, p := range []netip.Prefix{
		{},
		netip.MustParsePrefix("2001:db8::/64"),
		netip.MustParsePrefix("198.19.1.0/16"), // host bits set
		netip.MustParsePrefix("198.19.0.0/31"),
		netip.MustParsePrefix("198.19.0.1/32"),
	} {
		if _, err := NewTable(p); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := new(Table).Addr("x"); err == nil {
		t.Error("zero Table handed out an address")
	}
}

func TestTableStableAndDistinct(t *testing.T) {
	tab := newTable(t, "198.19.0.0/16")
	prefix := tab.Prefix()
	seen := map[netip.Addr]string{}
	for i := range 2000 {
		name := fmt.Sprintf("host%d.example", i)
		a := mustAddr(t, tab, name)
		if !prefix.Contains(a) || a == prefix.Addr() || a == netip.MustParseAddr("198.19.255.255") {
			t.Fatalf("%s got %s", name, a)
		}
		if other, dup := seen[a]; dup {
			t.Fatalf("%s and %s both got %s", name, other, a)
		}
		seen[a] = name
	}
	for a, name := range seen {
		if got := mustAddr(t, tab, name); got != a {
			t.Fatalf("%s moved from %s to %s", name, a, got)
		}
		if got, ok := tab.Name(a); !ok || got != name {
			t.Fatalf("Name(%s) = %q, %v; want %q", a, got, ok, name)
		}
	}
	if tab.Len() != len(seen) {
		t.Fatalf("Len = %d, want %d", tab.Len(), len(seen))
	}
	for _, a := range []string{"198.19.0.0", "198.19.255.255", "198.18.0.1", "10.0.0.1", "::1", "::ffff:198.19.0.1"} {
		if name, ok := tab.Name(netip.MustParseAddr(a)); ok {
			t.Errorf("Name(%s) = %q", a, name)
		}
	}
	if name, ok := tab.Name(netip.Addr{}); ok {
		t.Errorf("Name(zero) = %q", name)
	}
}

func TestTableDeterministic(t *testing.T) {
	// A name's first choice depends only on the name and the prefix, so a new table (a
	// restarted daemon) gives it the same address, whatever else it was asked before.
	a, b := newTable(t, "198.19.0.0/16"), newTable(t, "198.19.0.0/16")
	for i := range 50 {
		mustAddr(t, b, fmt.Sprintf("other%d.example", i))
	}
	for _, name := range []string{"github.com", "proxy.golang.org", "pypi.org"} {
		if x, y := mustAddr(t, a, name), mustAddr(t, b, name); x != y {
			t.Errorf("%s: %s in one table, %s in the other", name, x, y)
		}
	}
}

func TestTableRecyclesLeastRecentlyUsed(t *testing.T) {
	tab := newTable(t, "198.19.0.0/29") // .1–.6 usable
	names := []string{"a", "b", "c", "d", "e", "f"}
	addrs := map[string]netip.Addr{}
	for _, n := range names {
		addrs[n] = mustAddr(t, tab, n)
	}
	if tab.Len() != 6 {
		t.Fatalf("Len = %d", tab.Len())
	}
	// Use a (Addr) and b (Name): c is now the least recently used.
	mustAddr(t, tab, "a")
	if n, ok := tab.Name(addrs["b"]); !ok || n != "b" {
		t.Fatalf("Name(b's) = %q, %v", n, ok)
	}
	g := mustAddr(t, tab, "g")
	if g != addrs["c"] {
		t.Fatalf("g got %s; want c's %s", g, addrs["c"])
	}
	if n, _ := tab.Name(g); n != "g" {
		t.Fatalf("Name(%s) = %q, want g", g, n)
	}
	if tab.Len() != 6 {
		t.Fatalf("Len = %d after recycling", tab.Len())
	}
	// c is gone; asking again recycles d, the next least recently used.
	if c := mustAddr(t, tab, "c"); c != addrs["d"] {
		t.Fatalf("c came back at %s; want d's %s", c, addrs["d"])
	}
	for _, n := range []string{"a", "b", "e", "f"} {
		if got := mustAddr(t, tab, n); got != addrs[n] {
			t.Fatalf("%s moved from %s to %s", n, addrs[n], got)
		}
	}
	for _, a := range []string{"198.19.0.0", "198.19.0.7"} {
		if n, ok := tab.Name(netip.MustParseAddr(a)); ok {
			t.Fatalf("Name(%s) = %q", a, n)
		}
	}
}

func TestTableConcurrent(t *testing.T) {
	tab := newTable(t, "198.19.0.0/24") // 254 addresses for 8×100 names: recycling too
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				name := fmt.Sprintf("n%d-%d", g, i%40)
				a, err := tab.Addr(name)
				if err != nil {
					t.Error(err)
					return
				}
				tab.Name(a)
				tab.Len()
			}
		})
	}
	wg.Wait()
	if tab.Len() > 254 {
		t.Fatalf("Len = %d", tab.Len())
	}
	// Still a bijection.
	for g := range 8 {
		for i := range 40 {
			a := mustAddr(t, tab, fmt.Sprintf("n%d-%d", g, i))
			if n, _ := tab.Name(a); n != fmt.Sprintf("n%d-%d", g, i) {
				t.Fatalf("Name(%s) = %q", a, n)
			}
		}
	}
}
