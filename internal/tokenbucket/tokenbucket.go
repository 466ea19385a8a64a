// Package tokenbucket is a token bucket on the caller's clock: it holds at most Burst
// tokens and earns Rate tokens per second. Callers pass the time in, so tests need no
// sleeps. Not safe for concurrent use: callers serialize.
package tokenbucket

import "time"

// Bucket is a token bucket. Make it with New.
type Bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

// New returns a full bucket of burst tokens that earns rate tokens per second.
func New(rate, burst float64) *Bucket { return &Bucket{rate: rate, burst: burst, tokens: burst} }

// Refill adds the tokens earned since the last call, up to the burst. Time going
// backwards adds nothing (and does not move the clock back).
func (b *Bucket) Refill(now time.Time) {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
}

// Tokens is what the bucket holds (negative after Take of more than it held).
func (b *Bucket) Tokens() float64 { return b.tokens }

// Take removes n tokens, also more than the bucket holds: a debt repaid by later refills.
func (b *Bucket) Take(n float64) { b.tokens -= n }

// Allow refills at now and takes one token if the bucket holds one.
func (b *Bucket) Allow(now time.Time) bool {
	b.Refill(now)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
