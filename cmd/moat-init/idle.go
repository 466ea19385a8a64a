package main

import (
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/moatdev/moat/cmd/moat-init/internal/linux"
)

// idleTrimmer counts requests and, once none has arrived for a tick after
// some did, trims resident memory (linux.TrimResident). moat-init spends
// most of its life waiting; this keeps that wait cheap.
type idleTrimmer struct {
	log      *slog.Logger
	requests atomic.Uint64
}

// wrap counts the requests reaching next.
func (t *idleTrimmer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.requests.Add(1)
		next.ServeHTTP(w, r)
	})
}

// trim trims now.
func (t *idleTrimmer) trim() {
	n, err := linux.TrimResident()
	if err != nil {
		t.log.Debug("trimming memory", "err", err)
		return
	}
	t.log.Debug("trimmed memory", "unmapped_bytes", n)
}

// run trims every tick that follows a tick with requests and has none
// itself, until stop is closed.
func (t *idleTrimmer) run(tick time.Duration, stop <-chan struct{}) {
	tk := time.NewTicker(tick)
	defer tk.Stop()
	var last uint64
	busy := false
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		n := t.requests.Load()
		switch {
		case n != last:
			last, busy = n, true
		case busy:
			busy = false
			t.trim()
		}
	}
}
