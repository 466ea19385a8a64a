package usage

import "sync"

// Calls counts API calls by key id in memory, between the sampler's flushes into the
// ledger (one database write per flush, none per request). The zero value is ready.
type Calls struct {
	mu sync.Mutex
	n  map[string]int64
}

// Add counts one call of key ("" the operator).
func (c *Calls) Add(key string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[key]++
	c.mu.Unlock()
}

// Take returns the counts since the last Take and starts again from zero.
func (c *Calls) Take() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = nil
	return n
}

// Restore adds back counts a failed flush could not record.
func (c *Calls) Restore(n map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	for k, v := range n {
		c.n[k] += v
	}
}
