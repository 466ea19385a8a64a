package proxy

import (
	"fmt"
	"sync"
)

// FDsPerConn is what one proxied connection may hold of the daemon's descriptors: the
// sandbox's socket, the upstream socket and a pipe (two descriptors) per direction for
// splice. A Budget counts connections; multiply by FDsPerConn for descriptors.
const FDsPerConn = 6

// Budget is the daemon's budget of proxied connections, shared by the proxies of every
// sandbox, so that their descriptors stay within what the daemon set aside for them
// (the rest is kept for the API, the store, liveness checks and sandbox starts).
//
// Each sandbox joins with a Share. A share up to the floor (min(Floor, Total / number of
// shares)) is guaranteed: the budget keeps it free for the sandbox, whatever the others
// do, so one sandbox at its cap cannot starve another. Above its floor a sandbox takes
// from what no share has claimed, up to its own cap. Safe for concurrent use.
type Budget struct {
	total, floor int

	mu        sync.Mutex
	shares    map[*Share]struct{}
	used      int // connections held by all shares
	committed int // Σ max(share's used, effective floor): held or guaranteed
	effFloor  int
}

// NewBudget returns a budget of total connections with a guaranteed floor per sandbox.
func NewBudget(total, floor int) *Budget {
	return &Budget{total: max(total, 1), floor: max(floor, 0), shares: map[*Share]struct{}{}}
}

// Total is the budget's size in connections.
func (b *Budget) Total() int { return b.total }

// Used is how many connections all shares hold.
func (b *Budget) Used() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Share is one sandbox's part of a Budget.
type Share struct {
	b    *Budget
	cap  int
	used int // guarded by b.mu
}

// Join adds a sandbox whose own cap is maxConns connections. Call Leave when it stops.
func (b *Budget) Join(maxConns int) *Share {
	s := &Share{b: b, cap: max(maxConns, 1)}
	b.mu.Lock()
	b.shares[s] = struct{}{}
	b.refloor()
	b.mu.Unlock()
	return s
}

// Leave removes the share; connections it still holds stay counted until released.
func (s *Share) Leave() {
	b := s.b
	b.mu.Lock()
	delete(b.shares, s)
	b.refloor()
	b.mu.Unlock()
}

// refloor recomputes the effective floor and what is committed after the shares changed.
func (b *Budget) refloor() {
	b.effFloor = 0
	if n := len(b.shares); n > 0 {
		b.effFloor = min(b.floor, b.total/n)
	}
	b.committed = 0
	for s := range b.shares {
		b.committed += max(s.used, b.effFloor)
	}
}

// Acquire takes a connection for the share's sandbox. It returns "" when granted (call
// Release when the connection ends), or why not, for the egress log.
func (s *Share) Acquire() string {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	why := admit(admission{total: b.total, floor: b.effFloor, cap: s.cap, own: s.used, used: b.used, committed: b.committed})
	if why != "" {
		return why
	}
	if _, member := b.shares[s]; member && s.used >= b.effFloor {
		b.committed++ // above the floor: a new commitment; below it, already counted
	}
	s.used++
	b.used++
	return ""
}

// Release returns a connection taken by Acquire.
func (s *Share) Release() {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s.used--
	b.used--
	if _, member := b.shares[s]; member && s.used >= b.effFloor {
		b.committed--
	}
}

// admission is what admit decides on: the budget's size, the effective per-sandbox floor,
// the sandbox's cap and its connections, all connections held, and what is held or
// guaranteed (Σ over sandboxes of max(held, floor)).
type admission struct {
	total, floor, cap, own, used, committed int
}

// admit decides whether a sandbox may open one more connection. It returns "" or why not.
// Pure; the rules, in order: never above the sandbox's cap; never above the budget;
// always within the sandbox's guaranteed floor; above it only from what no sandbox has
// claimed, held or guaranteed.
func admit(a admission) string {
	switch {
	case a.own >= a.cap:
		return fmt.Sprintf("more than %d connections at once", a.cap)
	case a.used >= a.total:
		return fmt.Sprintf("the daemon's budget of %d proxied connections (all sandboxes) is spent", a.total)
	case a.own < a.floor:
		return ""
	case a.committed >= a.total:
		return fmt.Sprintf("the rest of the daemon's budget of %d proxied connections is kept for other sandboxes (%d guaranteed to each); this sandbox has %d open", a.total, a.floor, a.own)
	}
	return ""
}
