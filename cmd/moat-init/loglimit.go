package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Log rate: most of what moat-init logs is caused from inside the sandbox (bad requests
// to its port, signals to PID 1, processes ending), so a sandbox could otherwise make it
// log as fast as it can send. The daemon caps the log file on the host whatever moat-init
// writes; this keeps moat-init's own share small so that its lines survive the cap.
const (
	logBurst = 100 // lines moat-init may log at once
	logRate  = 10  // lines per second after a burst
)

// bucket is a token bucket: it allows burst events at once and rate per second after.
type bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

func newBucket(rate, burst float64) *bucket { return &bucket{rate: rate, burst: burst, tokens: burst} }

// allow reports whether one more event may happen at now, taking a token if so. Time
// going backwards adds nothing.
func (b *bucket) allow(now time.Time) bool {
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// limitShared is the state every handler derived from one limitHandler shares.
type limitShared struct {
	mu      sync.Mutex
	b       *bucket
	dropped int
	now     func() time.Time
}

// limitHandler passes records to next while its bucket allows, and drops the rest. The
// first record let through after drops is preceded by one that counts them.
type limitHandler struct {
	next slog.Handler
	s    *limitShared
}

func newLimitHandler(next slog.Handler, rate, burst float64) *limitHandler {
	return &limitHandler{next: next, s: &limitShared{b: newBucket(rate, burst), now: time.Now}}
}

func (h *limitHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *limitHandler) Handle(ctx context.Context, r slog.Record) error {
	h.s.mu.Lock()
	if !h.s.b.allow(h.s.now()) {
		h.s.dropped++
		h.s.mu.Unlock()
		return nil
	}
	dropped := h.s.dropped
	h.s.dropped = 0
	h.s.mu.Unlock()
	if dropped > 0 {
		note := slog.NewRecord(r.Time, slog.LevelWarn, "log lines dropped (rate limit)", 0)
		note.AddAttrs(slog.Int("dropped", dropped))
		_ = h.next.Handle(ctx, note)
	}
	return h.next.Handle(ctx, r)
}

func (h *limitHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &limitHandler{next: h.next.WithAttrs(as), s: h.s}
}

func (h *limitHandler) WithGroup(name string) slog.Handler {
	return &limitHandler{next: h.next.WithGroup(name), s: h.s}
}
