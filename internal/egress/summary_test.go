package egress

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/egress/proxy"
)

func TestSummarize(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	many := map[tallyKey]int{}
	for i := range 10 {
		many[tallyKey{dest: "h" + string(rune('a'+i)) + ".test:443", allowed: true}] = 10 - i
	}
	for _, c := range []struct {
		name   string
		counts map[tallyKey]int
		want   string
	}{
		{"none", nil, ""},
		{"both verdicts, most frequent first, ties by name", map[tallyKey]int{
			{"pypi.org:443", true}: 2, {"api.test:443", true}: 10, {"b.test:443", true}: 2,
			{"evil.test:443", false}: 3, {"10.0.0.1:22", false}: 1,
		}, "connections 2026-12-02T10:00:00Z – 2026-12-02T11:00:00Z: allowed 14 (api.test:443 10, b.test:443 2, pypi.org:443 2); blocked 4 (evil.test:443 3, 10.0.0.1:22 1)"},
		{"only blocked", map[tallyKey]int{{"evil.test:443", false}: 1}, "connections 2026-12-02T10:00:00Z – 2026-12-02T11:00:00Z: allowed 0; blocked 1 (evil.test:443 1)"},
		{"at most 8 named", many, "allowed 55 (ha.test:443 10, hb.test:443 9, hc.test:443 8, hd.test:443 7, he.test:443 6, hf.test:443 5, hg.test:443 4, hh.test:443 3, +2 more); blocked 0"},
	} {
		got := summarize(t0, t1, c.counts)
		if (c.want == "" && got != "") || !strings.Contains(got, c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// TestTally: connections are counted by destination and verdict; a summary is due once
// every has passed since the last one, and the counts start anew; past summaryDests
// destinations the rest are counted together.
func TestTally(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	tl := newTally(t0)
	ev := func(name string, addr string, allowed bool, at time.Duration) proxy.Event {
		e := proxy.Event{Time: t0.Add(at), Name: name, Port: 443, Allowed: allowed}
		if addr != "" {
			e.Addr = netip.MustParseAddr(addr)
		}
		return e
	}
	if _, c := tl.add(ev("a.test", "", true, time.Minute), 10*time.Minute); c != nil {
		t.Fatal("a summary before it is due")
	}
	tl.add(ev("", "192.0.2.7", false, 2*time.Minute), 10*time.Minute)
	since, c := tl.add(ev("a.test", "", true, 11*time.Minute), 10*time.Minute)
	if !since.Equal(t0) || c[tallyKey{"a.test:443", true}] != 2 || c[tallyKey{"192.0.2.7:443", false}] != 1 || len(c) != 2 {
		t.Fatalf("due summary: since %v counts %v", since, c)
	}
	if since, c := tl.flush(t0.Add(12 * time.Minute)); len(c) != 0 || !since.Equal(t0.Add(11*time.Minute)) {
		t.Fatalf("after a summary: since %v counts %v", since, c)
	}
	for i := range summaryDests + 5 {
		tl.add(ev("d"+strconv.Itoa(i)+".test", "", true, 13*time.Minute), 10*time.Hour)
	}
	_, c = tl.flush(t0.Add(14 * time.Minute))
	if len(c) != summaryDests+1 || c[tallyKey{"other destinations", true}] != 5 {
		t.Fatalf("%d keys, other %d", len(c), c[tallyKey{"other destinations", true}])
	}
}
