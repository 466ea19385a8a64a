package runtime

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRunscPids(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{`{"type":"stats","id":"sb-1","data":{"cpu":{},"pids":{"current":7,"limit":0}}}`, 7, true},
		{`{"type":"stats","id":"sb-1","data":{"pids":{"current":0}}}`, 0, true},
		{`{"type":"stats","id":"sb-1","data":{}}`, 0, false},
		{`{"type":"oom","id":"sb-1"}`, 0, false},
		{`not json`, 0, false},
		{``, 0, false},
	} {
		got, err := runscPids([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("runscPids(%s) = %d, %v; want %d ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestReadPids(t *testing.T) {
	dir := t.TempDir()
	write := func(name, v string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("pids.current", "12\n")
	write("pids.max", "max\n")
	write("pids.events", "max 0\n")
	p, err := readPids(dir)
	if err != nil || p.Current != 12 || p.Limit != 0 || p.LimitHits != 0 {
		t.Errorf("unlimited: %+v %v", p, err)
	}
	write("pids.max", "64\n")
	write("pids.events", "max 5\n")
	p, err = readPids(dir)
	if err != nil || p.Current != 12 || p.Limit != 64 || p.LimitHits != 5 {
		t.Errorf("limited: %+v %v", p, err)
	}
	write("pids.max", "lots\n")
	if _, err := readPids(dir); err == nil {
		t.Error("a bad pids.max read without error")
	}
	if _, err := readPids(filepath.Join(dir, "gone")); err == nil {
		t.Error("a missing cgroup read without error")
	}
}
