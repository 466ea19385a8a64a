package main

import "testing"

// TestOpenFileLimit: moat-init gives its processes its hard limit, never above 65536.
func TestOpenFileLimit(t *testing.T) {
	for _, tc := range []struct{ hard, want uint64 }{
		{20000, 20000},
		{65536, 65536},
		{1 << 20, 65536},
		{^uint64(0), 65536}, // RLIM_INFINITY
	} {
		if got := openFileLimit(tc.hard); got != tc.want {
			t.Errorf("openFileLimit(%d) = %d, want %d", tc.hard, got, tc.want)
		}
	}
}
