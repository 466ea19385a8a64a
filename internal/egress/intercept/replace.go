package intercept

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
)

// replacer replaces every occurrence of a set of byte strings with the semantics of
// strings.NewReplacer: scanning left to right, the leftmost match wins, and of the strings
// matching at one position the one given first; matches do not overlap. Its replace method
// works on a stream in pieces: the output for any split of the input equals the output for
// the whole. A replacer is immutable, so safe for concurrent use.
type replacer struct {
	old, new [][]byte
	max      int       // length of the longest old string
	sameLen  bool      // every replacement is as long as what it replaces
	first    [256]bool // the first bytes of the old strings
	lowerOld []string  // the old strings in lower case, for header names

	// With every old string at least minWindow long, matches are found in one pass over
	// the input (Wu-Manber): a window of min bytes slides along, moved by shift[h] for
	// the hash h of its last two bytes, the least distance after which an old string's
	// first min bytes could end on those bytes. Where the shift is 0, the old strings
	// whose first min bytes end in a block of that hash (at[h], in the order given) are
	// tried at the window's start. Otherwise (a very short value) each old string is
	// searched for separately.
	min   int
	shift *[shiftSize]uint8
	at    map[uint16][]int
}

const (
	minWindow = 4
	shiftSize = 1 << 12
)

// blockHash is the shift table's slot for the two bytes a, b.
func blockHash(a, b byte) uint16 {
	return uint16((uint32(a)<<8|uint32(b))*0x9e3779b1>>20) & (shiftSize - 1)
}

// newReplacer takes old, new pairs; pairs with an empty old string are ignored. It panics
// on an odd number of arguments.
func newReplacer(pairs ...string) *replacer {
	if len(pairs)%2 == 1 {
		panic("intercept: newReplacer with an odd number of arguments")
	}
	r := &replacer{sameLen: true}
	for i := 0; i < len(pairs); i += 2 {
		if pairs[i] == "" {
			continue
		}
		r.old = append(r.old, []byte(pairs[i]))
		r.lowerOld = append(r.lowerOld, strings.ToLower(pairs[i]))
		r.new = append(r.new, []byte(pairs[i+1]))
		r.max = max(r.max, len(pairs[i]))
		r.first[pairs[i][0]] = true
		r.sameLen = r.sameLen && len(pairs[i]) == len(pairs[i+1])
		if r.min == 0 || len(pairs[i]) < r.min {
			r.min = len(pairs[i])
		}
	}
	if r.min >= minWindow {
		r.shift = new([shiftSize]uint8)
		def := uint8(min(r.min-1, 255))
		for i := range r.shift {
			r.shift[i] = def
		}
		r.at = map[uint16][]int{}
		for k, old := range r.old {
			w := old[:r.min]
			for j := 0; j+1 < len(w); j++ {
				h := blockHash(w[j], w[j+1])
				if d := uint8(min(len(w)-2-j, 255)); d < r.shift[h] {
					r.shift[h] = d
				}
			}
			h := blockHash(w[len(w)-2], w[len(w)-1])
			r.at[h] = append(r.at[h], k)
		}
	}
	return r
}

// index returns the leftmost position in [from, to) at which an old string occurs whole
// in src, and which one (the first given of those occurring there); -1 if none does.
func (r *replacer) index(src []byte, from, to int) (int, int) {
	n := r.min
	for s := from; s < to && s+n <= len(src); {
		e := s + n - 1
		h := blockHash(src[e-1], src[e])
		if d := r.shift[h]; d > 0 {
			s += int(d)
			continue
		}
		for _, k := range r.at[h] {
			if bytes.HasPrefix(src[s:], r.old[k]) {
				return s, k
			}
		}
		s++
	}
	return -1, -1
}

// empty says whether r replaces nothing.
func (r *replacer) empty() bool { return len(r.old) == 0 }

// replace appends to dst the output for src and returns it with the number of bytes of src
// consumed. When final, all of src is consumed. Otherwise a tail of src that could be the
// beginning of a match (shorter than the longest old string) is left unconsumed: the
// caller passes it again, followed by the next bytes of the stream.
func (r *replacer) replace(dst, src []byte, final bool) ([]byte, int) {
	hold := len(src)
	if !final {
		hold = r.holdFrom(src)
	}
	if r.shift != nil {
		// Every position before hold can be decided: an old string starting there and
		// running past the end would make hold earlier.
		i := 0
		for {
			m, k := r.index(src, i, hold)
			if m < 0 {
				if hold < i { // a match ran past hold: nothing of it is pending any more
					hold = i
				}
				return append(dst, src[i:hold]...), hold
			}
			dst = append(dst, src[i:m]...)
			dst = append(dst, r.new[k]...)
			i = m + len(r.old[k])
		}
	}
	// next[j] is where old[j] next occurs at or after the scan position (-1: nowhere).
	var nextBuf [32]int
	next := nextBuf[:0]
	for range r.old {
		next = append(next, -2) // not searched yet
	}
	i := 0
	for {
		m, k := -1, -1
		for j, old := range r.old {
			if next[j] != -1 && next[j] < i {
				if x := bytes.Index(src[i:], old); x < 0 {
					next[j] = -1
				} else {
					next[j] = i + x
				}
			}
			if next[j] >= 0 && (m < 0 || next[j] < m) {
				m, k = next[j], j
			}
		}
		// A match starting at or after hold might lose to a longer-pending, earlier-given
		// string that the next bytes complete: wait for them.
		if m < 0 || m >= hold {
			if hold < i { // a match ran past hold: nothing of it is pending any more
				hold = i
			}
			return append(dst, src[i:hold]...), hold
		}
		dst = append(dst, src[i:m]...)
		dst = append(dst, r.new[k]...)
		i = m + len(r.old[k])
	}
}

// holdFrom is where the longest tail of src that is a proper prefix of an old string
// begins (len(src) if there is none): from there on, nothing can be decided yet.
func (r *replacer) holdFrom(src []byte) int {
	for t := max(0, len(src)-r.max+1); t < len(src); t++ {
		if !r.first[src[t]] {
			continue
		}
		tail := src[t:]
		for _, old := range r.old {
			if len(tail) < len(old) && bytes.HasPrefix(old, tail) {
				return t
			}
		}
	}
	return len(src)
}

// String replaces in a whole string.
func (r *replacer) String(s string) string {
	found := false
	for _, old := range r.old {
		if bytes.Contains([]byte(s), old) {
			found = true
			break
		}
	}
	if !found {
		return s
	}
	out, _ := r.replace(nil, []byte(s), true)
	return string(out)
}

// Header replaces in every value of h, in place, and removes the fields whose name holds
// an old string of at least minEncoded bytes in any case (names are case-insensitive, and
// are rewritten in canonical case on the way).
func (r *replacer) Header(h http.Header) {
	if r.empty() {
		return
	}
	for k, vs := range h {
		if r.inName(k) {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = r.String(v)
		}
	}
}

func (r *replacer) inName(k string) bool {
	k = strings.ToLower(k)
	for _, old := range r.lowerOld {
		if len(old) >= minEncoded && strings.Contains(k, old) {
			return true
		}
	}
	return false
}

// scrubReader passes a stream through a replacer without holding more of it than one read
// plus the longest old string. It returns what it has as soon as it has it (a server-sent
// event is not delayed unless it ends in what may be the start of a match).
type scrubReader struct {
	r   io.Reader
	rep *replacer
	in  []byte // bytes read, not yet consumed by rep (a possible beginning of a match)
	out []byte // output not yet returned
	off int    // of out
	err error  // from r, reported once out is drained
	// atEOF runs once, when r reports io.EOF, before the last bytes are returned.
	atEOF func()
}

const scrubChunk = 32 << 10

func newScrubReader(r io.Reader, rep *replacer) *scrubReader {
	return &scrubReader{r: r, rep: rep, in: make([]byte, 0, scrubChunk+rep.max)}
}

func (s *scrubReader) Read(p []byte) (int, error) {
	for s.off == len(s.out) {
		if s.err != nil {
			return 0, s.err
		}
		held := len(s.in)
		if cap(s.in)-held < scrubChunk {
			s.in = append(s.in, make([]byte, scrubChunk)...)[:held]
		}
		n, err := s.r.Read(s.in[held : held+scrubChunk])
		s.in = s.in[:held+n]
		final := false
		if err != nil {
			s.err = err
			if errors.Is(err, io.EOF) {
				final = true
				if s.atEOF != nil {
					s.atEOF()
				}
			} else {
				// A broken stream: what was held may be the first part of a secret.
				s.in = s.in[:0]
			}
		}
		var k int
		s.out, k = s.rep.replace(s.out[:0], s.in, final)
		s.off = 0
		s.in = s.in[:copy(s.in, s.in[k:])]
	}
	n := copy(p, s.out[s.off:])
	s.off += n
	return n, nil
}
