package egress

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/egress/proxy"
)

// Egress verdict summaries for the audit log: the egress log keeps every decision; the
// audit chain gets, per sandbox, how many connections were allowed and blocked to which
// destinations — when the sandbox's egress is detached (stop, delete, daemon shutdown)
// and at most every summaryEvery while it runs.

const (
	summaryEvery = 10 * time.Minute
	summaryDests = 256 // destinations counted one by one; the rest as "other destinations"
	summaryShown = 8   // destinations named per verdict in a summary
)

// tallyKey is one destination and verdict.
type tallyKey struct {
	dest    string // name:port, or address:port for a direct connection
	allowed bool
}

// tally counts one sandbox's connection verdicts since its last summary.
type tally struct {
	mu     sync.Mutex
	since  time.Time
	counts map[tallyKey]int
}

func newTally(now time.Time) *tally { return &tally{since: now, counts: map[tallyKey]int{}} }

// add counts ev; when the last summary is older than every, it returns the counts so far
// (and starts anew) for the caller to record.
func (t *tally) add(ev proxy.Event, every time.Duration) (since time.Time, counts map[tallyKey]int) {
	dest := ev.Name
	if dest == "" && ev.Addr.IsValid() {
		dest = ev.Addr.String()
	}
	if dest == "" {
		dest = "unknown"
	}
	k := tallyKey{dest: dest + ":" + strconv.Itoa(int(ev.Port)), allowed: ev.Allowed}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.counts[k]; !ok && len(t.counts) >= summaryDests {
		k.dest = "other destinations"
	}
	t.counts[k]++
	if ev.Time.Sub(t.since) < every {
		return time.Time{}, nil
	}
	return t.take(ev.Time)
}

// take returns the counts since the last summary and starts anew at now.
func (t *tally) take(now time.Time) (time.Time, map[tallyKey]int) {
	since, counts := t.since, t.counts
	t.since, t.counts = now, map[tallyKey]int{}
	return since, counts
}

// flush is take under the lock.
func (t *tally) flush(now time.Time) (time.Time, map[tallyKey]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.take(now)
}

// summarize is the audit detail of counts between since and now: "" when there were none.
// Each verdict names its most frequent destinations (ties by name). Pure.
func summarize(since, now time.Time, counts map[tallyKey]int) string {
	if len(counts) == 0 {
		return ""
	}
	part := func(allowed bool) string {
		type dc struct {
			dest string
			n    int
		}
		var ds []dc
		total := 0
		for k, n := range counts {
			if k.allowed == allowed {
				ds = append(ds, dc{k.dest, n})
				total += n
			}
		}
		word := "blocked"
		if allowed {
			word = "allowed"
		}
		if total == 0 {
			return word + " 0"
		}
		slices.SortFunc(ds, func(a, b dc) int {
			return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.dest, b.dest))
		})
		var names []string
		for i, d := range ds {
			if i == summaryShown {
				names = append(names, fmt.Sprintf("+%d more", len(ds)-summaryShown))
				break
			}
			names = append(names, fmt.Sprintf("%s %d", d.dest, d.n))
		}
		return fmt.Sprintf("%s %d (%s)", word, total, strings.Join(names, ", "))
	}
	return fmt.Sprintf("connections %s – %s: %s; %s", since.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), part(true), part(false))
}

// summarizeConn counts ev for b's summary and records one when it is due.
func (m *Manager) summarizeConn(b *boundary, ev proxy.Event) {
	if m.cfg.Audit == nil {
		return
	}
	if since, counts := b.tally.add(ev, summaryEvery); counts != nil {
		// Not on the connection's path: the audit write is a database transaction.
		m.audits.Add(1)
		go func() {
			defer m.audits.Done()
			m.cfg.Audit(b.id, "egress_summary", summarize(since, ev.Time, counts))
		}()
	}
}

// flushSummary records b's summary of what is not yet in one (at detach).
func (m *Manager) flushSummary(b *boundary) {
	if m.cfg.Audit == nil {
		return
	}
	now := time.Now()
	since, counts := b.tally.flush(now)
	if s := summarize(since, now, counts); s != "" {
		m.cfg.Audit(b.id, "egress_summary", s)
	}
}
