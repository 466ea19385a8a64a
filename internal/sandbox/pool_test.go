package sandbox

import (
	"maps"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestParseWarm(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want map[string]int
		bad  bool
	}{
		{in: nil, want: map[string]int{}},
		{in: []string{"2"}, want: map[string]int{"runc:host": 2}},
		{in: []string{"0"}, want: map[string]int{"runc:host": 0}},
		{in: []string{"runsc=1"}, want: map[string]int{"runsc:host": 1}},
		{in: []string{"runc:debian=4", "runc:host=2"}, want: map[string]int{"runc:debian": 4, "runc:host": 2}},
		{in: []string{"runc:debian=4", "runc:debian=0"}, want: map[string]int{"runc:debian": 0}},
		{in: []string{"runc=3", "runc:host=1"}, want: map[string]int{"runc:host": 1}},
		{in: []string{"-1"}, bad: true},
		{in: []string{"runc:debian"}, bad: true},
		{in: []string{"runc:debian=x"}, bad: true},
		{in: []string{"runc:Debian=1"}, bad: true},
		{in: []string{":debian=1"}, bad: true},
		{in: []string{"runc:=1"}, bad: true},
		{in: []string{"runc:a:b=1"}, bad: true},
		{in: []string{"runc:../x=1"}, bad: true},
		{in: []string{"runc=1001"}, bad: true},
	} {
		got, err := ParseWarm(tc.in)
		if tc.bad {
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("ParseWarm(%q) = %v, %v; want ErrInvalidArgument", tc.in, got, err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("ParseWarm(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		for k := range got {
			if pk, err := ParsePoolKey(k); err != nil || pk.String() != k {
				t.Errorf("key %q does not parse back: %v %v", k, pk, err)
			}
		}
	}
	if k, err := ParsePoolKey("runc"); err != nil || k != (PoolKey{"runc", "host"}) {
		t.Errorf(`ParsePoolKey("runc") = %v, %v`, k, err)
	}
}

func FuzzParseWarm(f *testing.F) {
	for _, s := range []string{"2", "runc:debian=4", "runsc=1", "runc:", "=1", "runc:a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseWarm([]string{s})
		if err != nil {
			return
		}
		for k, n := range got {
			pk, err := ParsePoolKey(k)
			if err != nil || pk.String() != k || n < 0 || n > 1000 {
				t.Fatalf("ParseWarm(%q) gave %q=%d (%v)", s, k, n, err)
			}
		}
	})
}

func TestRefillWait(t *testing.T) {
	now := time.Unix(1000, 0)
	long := now.Add(-time.Hour)
	for _, tc := range []struct {
		name       string
		inflight   int64
		lastCreate time.Time
		room       int64
		want       time.Duration
	}{
		{"idle host, room", 0, long, 100, 0},
		{"overcommit: any room", 0, long, -1, 0},
		{"never created", 0, time.Unix(0, 0), 5, 0},
		{"a create in flight", 1, long, 100, refillPoll},
		{"a burst in flight", 20, long, -1, refillPoll},
		{"just after a create", 0, now.Add(-100 * time.Millisecond), 100, refillQuiet - 100*time.Millisecond},
		{"quiet period over", 0, now.Add(-refillQuiet), 100, 0},
		{"no room", 0, long, 0, refillNoRoom},
		{"room for the warm one only", 0, long, 1, refillNoRoom},
		{"the warm one and headroom", 0, long, 1 + poolHeadroom, 0},
		{"in flight wins over room", 2, long, 0, refillPoll},
	} {
		if got := refillWait(now, tc.inflight, tc.lastCreate, tc.room); got != tc.want {
			t.Errorf("%s: refillWait = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTemplateStamp(t *testing.T) {
	a := Template{Name: "debian", Parts: []Part{{Target: "/", Layers: []string{"/l/1"}}}, Env: []string{"A=1"}}
	b := a
	b.Parts = []Part{{Target: "/", Layers: []string{"/l/2"}}}
	c := a
	c.Env = []string{"A=2"}
	a2 := a
	a2.Parts = []Part{{Target: "/", Layers: []string{"/l/1"}}}
	if templateStamp(a) != templateStamp(a2) || templateStamp(a) == templateStamp(b) || templateStamp(a) == templateStamp(c) {
		t.Errorf("stamps: %s %s %s", templateStamp(a), templateStamp(b), templateStamp(c))
	}
}
