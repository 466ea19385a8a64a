package egress

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// journal writes egress log entries in the background, in batches, so that no connection
// waits for SQLite. Entries reach the store in the order they were recorded; an entry's
// finish is always written after its insert.
type journal struct {
	store Journal
	log   *slog.Logger
	obs   Observer // observe.go; nil: none

	mu       sync.Mutex
	cond     *sync.Cond
	ops      []op
	pushed   uint64 // ops accepted so far
	written  uint64 // ops written (or failed) so far
	closed   bool
	flushing bool           // a flush waits: write without gathering
	perSB    map[string]int // entries added per sandbox in this run
	done     chan struct{}
}

type op struct {
	add    *Entry // insert (Seq is set by the store)
	of     *Entry // finish: the inserted entry ...
	finish Entry  // ... and its final values
}

// Entries are written at most batchDelay after they are recorded, in transactions of up
// to about maxBatch entries.
const (
	batchDelay = 20 * time.Millisecond
	maxBatch   = 256
)

// maxPerSandbox bounds the entries one sandbox adds in one daemon run: a sandbox looping
// over refused connections must not fill the host's disk. Past it, new entries of that
// sandbox are dropped (finishes of entries already added still land), once noted in the
// daemon log.
const maxPerSandbox = 100_000

// maxQueue bounds the entries waiting to be written; past it new ones are dropped (and
// counted in the daemon log) rather than growing memory without limit.
const maxQueue = 100_000

func newJournal(store Journal, log *slog.Logger) *journal {
	j := &journal{store: store, log: log, done: make(chan struct{}), perSB: map[string]int{}}
	j.cond = sync.NewCond(&j.mu)
	go j.run()
	return j
}

func (j *journal) add(e *Entry) {
	j.observe(e)
	j.push(op{add: e})
}

func (j *journal) finish(of *Entry, final Entry) { j.push(op{of: of, finish: final}) }

func (j *journal) push(o op) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	if len(j.ops) >= maxQueue {
		j.log.Warn("egress log queue full: entry dropped", "sandbox", entryOf(o).Sandbox)
		return
	}
	if o.add != nil {
		n := j.perSB[o.add.Sandbox] + 1
		j.perSB[o.add.Sandbox] = n
		if n > maxPerSandbox {
			if n == maxPerSandbox+1 {
				j.log.Warn("egress log: sandbox reached its entry limit for this run; further entries are dropped", "sandbox", o.add.Sandbox, "limit", maxPerSandbox)
			}
			return
		}
	}
	j.ops = append(j.ops, o)
	j.pushed++
	j.cond.Broadcast()
}

func entryOf(o op) *Entry {
	if o.add != nil {
		return o.add
	}
	return o.of
}

func (j *journal) run() {
	defer close(j.done)
	for {
		j.mu.Lock()
		for len(j.ops) == 0 && !j.closed {
			j.cond.Wait()
		}
		if len(j.ops) == 0 && j.closed {
			j.mu.Unlock()
			return
		}
		if !j.closed && !j.flushing && len(j.ops) < maxBatch {
			// Gather a little: one transaction per burst, not per connection.
			j.mu.Unlock()
			time.Sleep(batchDelay)
			j.mu.Lock()
		}
		batch := j.ops
		j.ops = nil
		j.mu.Unlock()
		j.write(batch)
		j.mu.Lock()
		j.written += uint64(len(batch))
		j.cond.Broadcast()
		j.mu.Unlock()
	}
}

// write stores one batch: all inserts of the batch first, then finishes whose entries
// have a Seq (inserted in this batch or an earlier one).
func (j *journal) write(batch []op) {
	var adds []*Entry
	var fins []Entry
	for _, o := range batch {
		if o.add != nil {
			adds = append(adds, o.add)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(adds) > 0 {
		if err := j.store.WriteEgress(ctx, adds, nil); err != nil {
			j.log.Error("writing egress log", "entries", len(adds), "err", err)
		}
	}
	for _, o := range batch {
		if o.of != nil && o.of.Seq != 0 {
			f := o.finish
			f.Seq = o.of.Seq
			fins = append(fins, f)
		}
	}
	if len(fins) > 0 {
		if err := j.store.WriteEgress(ctx, nil, fins); err != nil {
			j.log.Error("writing egress log", "entries", len(fins), "err", err)
		}
	}
}

// flush waits until everything pushed before the call is written (not what others push
// meanwhile: a busy sandbox cannot keep a flush waiting).
func (j *journal) flush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	target := j.pushed
	j.flushing = true
	j.cond.Broadcast()
	for j.written < target && !j.closed {
		j.cond.Wait()
	}
	j.flushing = false
}

func (j *journal) close() error {
	j.mu.Lock()
	j.closed = true
	j.cond.Broadcast()
	j.mu.Unlock()
	<-j.done
	return nil
}
