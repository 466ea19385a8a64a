package tokenbucket

import (
	"testing"
	"time"
)

// TestAllow: a burst at once, then the rate; a clock going backwards earns nothing.
func TestAllow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := New(10, 3)
	for i := range 3 {
		if !b.Allow(t0) {
			t.Fatalf("event %d of the burst refused", i)
		}
	}
	if b.Allow(t0) {
		t.Fatal("a fourth event at once was allowed")
	}
	if b.Allow(t0.Add(50 * time.Millisecond)) {
		t.Fatal("allowed after half a token's time")
	}
	if !b.Allow(t0.Add(100 * time.Millisecond)) {
		t.Fatal("refused after a token's time")
	}
	if b.Allow(t0) {
		t.Fatal("a clock going backwards earned a token")
	}
	n := 0
	for b.Allow(t0.Add(time.Hour)) {
		n++
	}
	if n != 3 {
		t.Fatalf("after an hour, %d events at once, want the burst of 3", n)
	}
}

// TestTakeDebt: taking more than the bucket holds leaves a debt later refills repay.
func TestTakeDebt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := New(100, 50)
	b.Refill(t0)
	b.Take(80)
	if got := b.Tokens(); got != -30 {
		t.Fatalf("tokens %v after taking 80 of 50, want -30", got)
	}
	b.Refill(t0.Add(500 * time.Millisecond))
	if got := b.Tokens(); got != 20 {
		t.Fatalf("tokens %v after half a second at 100/s, want 20", got)
	}
	b.Refill(t0.Add(time.Hour))
	if got := b.Tokens(); got != 50 {
		t.Fatalf("tokens %v after an hour, want the burst of 50", got)
	}
}
