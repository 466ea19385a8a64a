package main

import "testing"

// TestOpenFileLimit: moat-init gives its processes the sandbox's nofile (65536 when not
// given), never above its hard limit.
func TestOpenFileLimit(t *testing.T) {
	for _, tc := range []struct{ hard, nofile, want uint64 }{
		{20000, 0, 20000},
		{65536, 0, 65536},
		{1 << 20, 0, 65536},
		{^uint64(0), 0, 65536}, // RLIM_INFINITY
		{20000, 602, 602},
		{20000, 30000, 20000},
		{^uint64(0), 1 << 20, 1 << 20},
	} {
		if got := openFileLimit(tc.hard, tc.nofile); got != tc.want {
			t.Errorf("openFileLimit(%d, %d) = %d, want %d", tc.hard, tc.nofile, got, tc.want)
		}
	}
}
