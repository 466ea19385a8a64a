package testutil

import (
	"net"
	"strconv"
	"testing"
)

// TestIDBaseExclusive: two daemons of tests running at once never share a uid base, and
// a base is free again when its test ends.
func TestIDBaseExclusive(t *testing.T) {
	var first uint32
	t.Run("hold", func(t *testing.T) {
		first = IDBase(t)
		if second := IDBase(t); second == first {
			t.Fatalf("two test daemons got the same uid base %#x", first)
		}
		k := (first - 0x80000000) / (256 * 65536)
		if l, err := net.Listen("unix", "@moat-test-idbase-"+strconv.Itoa(int(k))); err == nil {
			l.Close()
			t.Fatalf("base %#x is not claimed while its test runs", first)
		}
	})
	k := (first - 0x80000000) / (256 * 65536)
	l, err := net.Listen("unix", "@moat-test-idbase-"+strconv.Itoa(int(k)))
	if err != nil {
		t.Fatalf("base %#x still claimed after its test ended: %v", first, err)
	}
	l.Close()
}
