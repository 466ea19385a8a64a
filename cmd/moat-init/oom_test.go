package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseOOMKill(t *testing.T) {
	for _, tc := range []struct {
		in string
		n  uint64
		ok bool
	}{
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3, true},
		{"low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n", 2, true},
		{"oom_kill_disable 0\nunder_oom 0\n", 0, false},
		{"oom_kill x\n", 0, false},
		{"oom_kill 18446744073709551615", 18446744073709551615, true},
		{"oom_kill 18446744073709551616", 0, false},
		{"", 0, false},
	} {
		n, ok := parseOOMKill([]byte(tc.in))
		if n != tc.n || ok != tc.ok {
			t.Errorf("parseOOMKill(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.n, tc.ok)
		}
	}
}

func FuzzParseOOMKill(f *testing.F) {
	f.Add([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"))
	f.Add([]byte("oom 1\noom_kill 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, ok := parseOOMKill(data)
		if !ok && n != 0 {
			t.Fatalf("not ok but %d", n)
		}
	})
}

func TestOOMCounter(t *testing.T) {
	root := t.TempDir()
	if oomCounter(root) != nil {
		t.Fatal("a counter without a cgroup file")
	}
	f := filepath.Join(root, "memory.events")
	if err := os.WriteFile(f, []byte("oom 0\noom_kill 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	read := oomCounter(root)
	if read == nil || read() != 0 {
		t.Fatal("no counter for memory.events")
	}
	if err := os.WriteFile(f, []byte("oom 1\noom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if read() != 1 {
		t.Fatal("the counter did not follow the file")
	}
}
