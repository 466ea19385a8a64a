package main

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/tokenbucket"
)

// Log rate: most of what moat-init logs is caused from inside the sandbox (bad requests
// to its port, signals to PID 1, processes ending), so a sandbox could otherwise make it
// log as fast as it can send. The daemon caps the log file on the host whatever moat-init
// writes; this keeps moat-init's own share small so that its lines survive the cap.
const (
	logBurst = 100 // lines moat-init may log at once
	logRate  = 10  // lines per second after a burst
)

// limitShared is the state every handler derived from one limitHandler shares.
type limitShared struct {
	mu      sync.Mutex
	b       *tokenbucket.Bucket
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
	return &limitHandler{next: next, s: &limitShared{b: tokenbucket.New(rate, burst), now: time.Now}}
}

func (h *limitHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *limitHandler) Handle(ctx context.Context, r slog.Record) error {
	h.s.mu.Lock()
	if !h.s.b.Allow(h.s.now()) {
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
