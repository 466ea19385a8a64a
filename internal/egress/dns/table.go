package dns

import (
	"container/list"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"

	"github.com/moatdev/moat/internal/errdefs"
)

// Table maps names to synthetic IPv4 addresses of one sandbox's prefix and back. Safe for
// concurrent use.
//
// A name's first choice of address is a hash of the name within the prefix, then the next
// free one (linear probing), so a restarted daemon tends to hand out the same addresses
// again. Once assigned, a name keeps its address while it stays in the table. When every
// address is taken, a new name takes the address of the least recently used name (Addr and
// Name both count as use), which from then on maps to the new name. Memory grows with the
// number of names up to the size of the prefix, so the prefix bounds it.
type Table struct {
	prefix netip.Prefix
	first  uint32 // the first usable address, as a number
	size   uint64 // how many usable addresses there are

	mu     sync.Mutex
	byName map[string]*list.Element
	byOff  map[uint32]*list.Element // offset from first → entry
	lru    list.List                // of *entry; front is the most recently used
}

type entry struct {
	name string
	off  uint32
}

// NewTable returns an empty table over prefix, which must be an IPv4 prefix in canonical
// form (no host bits set) with at least one usable address: its network and broadcast
// addresses are never handed out, so /31 and /32 are refused.
func NewTable(prefix netip.Prefix) (*Table, error) {
	if !prefix.IsValid() || !prefix.Addr().Is4() || prefix.Masked() != prefix {
		return nil, fmt.Errorf("dns table prefix %s: not a canonical IPv4 prefix: %w", prefix, errdefs.ErrInvalidArgument)
	}
	n := uint64(1) << (32 - prefix.Bits())
	if n < 4 {
		return nil, fmt.Errorf("dns table prefix %s: no usable addresses: %w", prefix, errdefs.ErrInvalidArgument)
	}
	return &Table{
		prefix: prefix,
		first:  toUint(prefix.Addr()) + 1,
		size:   n - 2,
		byName: map[string]*list.Element{},
		byOff:  map[uint32]*list.Element{},
	}, nil
}

// Prefix returns the table's prefix.
func (t *Table) Prefix() netip.Prefix { return t.prefix }

// Addr returns name's address, assigning one if name has none (recycling the least
// recently used name's when the prefix is full). It fails only for a Table not made by
// NewTable. The name is used as given; the Server passes normalised names.
func (t *Table) Addr(name string) (netip.Addr, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.size == 0 {
		return netip.Addr{}, errors.New("dns table has no usable addresses")
	}
	if el, ok := t.byName[name]; ok {
		t.lru.MoveToFront(el)
		return t.addr(el.Value.(*entry).off), nil
	}
	var el *list.Element
	if uint64(len(t.byName)) < t.size {
		h := fnv.New64a()
		h.Write([]byte(name))
		off := uint32(h.Sum64() % t.size)
		for t.byOff[off] != nil {
			off = uint32((uint64(off) + 1) % t.size)
		}
		el = t.lru.PushFront(&entry{name: name, off: off})
		t.byOff[off] = el
	} else {
		el = t.lru.Back()
		e := el.Value.(*entry)
		delete(t.byName, e.name)
		e.name = name
		t.lru.MoveToFront(el)
	}
	t.byName[name] = el
	return t.addr(el.Value.(*entry).off), nil
}

// Name returns the name a holds, and false when a is not an address of the table's prefix
// or holds no name.
func (t *Table) Name(a netip.Addr) (string, bool) {
	if !a.Is4() || !t.prefix.Contains(a) {
		return "", false
	}
	v := toUint(a)
	if v < t.first || uint64(v-t.first) >= t.size {
		return "", false // network or broadcast address
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	el, ok := t.byOff[v-t.first]
	if !ok {
		return "", false
	}
	t.lru.MoveToFront(el)
	return el.Value.(*entry).name, true
}

// Len returns how many names hold an address.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byName)
}

func (t *Table) addr(off uint32) netip.Addr {
	v := t.first + off
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func toUint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
