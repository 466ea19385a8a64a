package intercept

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

// chunkReader returns src in pieces whose sizes cycle through sizes (0 counts as 1).
type chunkReader struct {
	src   []byte
	sizes []byte
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = max(1, int(c.sizes[c.i%len(c.sizes)]))
		c.i++
	}
	n = min(n, len(c.src), len(p))
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

// scrubAll runs src through a scrubReader in pieces of the given sizes.
func scrubAll(t testing.TB, rep *replacer, src []byte, sizes []byte) string {
	t.Helper()
	out, err := io.ReadAll(newScrubReader(&chunkReader{src: src, sizes: sizes}, rep))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestReplacer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pairs []string
		in    string
	}{
		{"none", []string{"SECRET", "PH"}, "nothing to see"},
		{"one", []string{"SECRET", "PH"}, "a SECRET b"},
		{"adjacent", []string{"SECRET", "PH"}, "SECRETSECRET"},
		{"at the ends", []string{"SECRET", "PH"}, "SECRET mid SECRET"},
		{"prefix at the end", []string{"SECRET", "PH"}, "xx SECRE"},
		{"overlapping candidates", []string{"aab", "X"}, "aaaab aab aa"},
		{"self-overlap", []string{"abab", "X"}, "abababab ababa"},
		{"first given wins", []string{"ab", "1", "abc", "2"}, "abc ab abcd"},
		{"longer first", []string{"abc", "2", "ab", "1"}, "abc ab abcd"},
		{"contained", []string{"bc", "1", "abcd", "2"}, "abcd"},
		{"empty old ignored", []string{"", "x", "S", "T"}, "SSS"},
		{"grows", []string{"s", "[redacted]"}, "ssss"},
		{"shrinks", []string{"long-secret-value", "P"}, "long-secret-valuelong-secret-value"},
		{"binary", []string{"\x00\xff", "\x01"}, "\x00\x00\xff\xff\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var olds []string
			for i := 0; i < len(tc.pairs); i += 2 {
				if tc.pairs[i] != "" {
					olds = append(olds, tc.pairs[i], tc.pairs[i+1])
				}
			}
			want := strings.NewReplacer(olds...).Replace(tc.in)
			rep := newReplacer(tc.pairs...)
			if got := rep.String(tc.in); got != want {
				t.Errorf("String = %q, want %q", got, want)
			}
			for _, sizes := range [][]byte{nil, {1}, {2}, {3, 1}, {5, 2, 7}, {255}} {
				if got := scrubAll(t, rep, []byte(tc.in), sizes); got != want {
					t.Errorf("chunks %v: %q, want %q", sizes, got, want)
				}
			}
		})
	}
}

// TestReplacerHoldsLittle: the scrubber returns what cannot be part of a match at once,
// and never holds more than the longest old string less one byte.
func TestReplacerHoldsLittle(t *testing.T) {
	rep := newReplacer("SECRET-VALUE", "PH")
	for _, tc := range []struct{ in, out string }{
		{"data: hello\n\n", "data: hello\n\n"},
		{"data: SECRET-VAL", "data: "},
		{"xSECRET-VALUEy S", "xPHy "},
	} {
		got, n := rep.replace(nil, []byte(tc.in), false)
		if string(got) != tc.out || len(tc.in)-n >= len("SECRET-VALUE") {
			t.Errorf("replace(%q) = %q, consumed %d", tc.in, got, n)
		}
	}
}

// A broken stream drops what it held: it may be the first part of a value.
func TestScrubReaderBrokenStream(t *testing.T) {
	rep := newReplacer("SECRET-VALUE", "PH")
	r := io.MultiReader(strings.NewReader("ok SECRET-"), errReader{})
	out, err := io.ReadAll(newScrubReader(r, rep))
	if err == nil || string(out) != "ok " {
		t.Fatalf("got %q, %v", out, err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// FuzzReplace: for any input and any chunking, the scrubbed stream equals
// strings.ReplaceAll (one string) and strings.Replacer (two) on the whole input.
func FuzzReplace(f *testing.F) {
	f.Add([]byte("Bearer sk-live-1234 and sk-live-1234"), "sk-live-1234", "PH", "", []byte{3, 1, 4})
	f.Add([]byte("aaaaab"), "aab", "X", "ab", []byte{1})
	f.Add([]byte("abcabcab"), "abcab", "", "cab", []byte{2, 5})
	f.Fuzz(func(t *testing.T, in []byte, old, new, old2 string, sizes []byte) {
		if old != "" {
			want := strings.ReplaceAll(string(in), old, new)
			if got := scrubAll(t, newReplacer(old, new), in, sizes); got != want {
				t.Fatalf("ReplaceAll(%q, %q, %q) = %q, scrubbed in pieces %v: %q", in, old, new, want, sizes, got)
			}
		}
		var pairs []string
		for _, p := range [][2]string{{old, new}, {old2, redacted}} {
			if p[0] != "" {
				pairs = append(pairs, p[0], p[1])
			}
		}
		if len(pairs) == 0 {
			return
		}
		want := strings.NewReplacer(pairs...).Replace(string(in))
		if got := scrubAll(t, newReplacer(pairs...), in, sizes); got != want {
			t.Fatalf("Replacer%q on %q = %q, scrubbed in pieces %v: %q", pairs, in, want, sizes, got)
		}
		if !bytes.Equal([]byte(newReplacer(pairs...).String(string(in))), []byte(want)) {
			t.Fatalf("String differs from strings.Replacer")
		}
	})
}

// FuzzReplaceMany: with many old strings (the scrubber has a dozen per value), the
// scrubbed stream equals strings.Replacer on the whole input, for any chunking. olds is
// split at '|'. Seeds live in testdata/fuzz/FuzzReplaceMany.
func FuzzReplaceMany(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte, olds string, sizes []byte) {
		var pairs []string
		for i, o := range strings.Split(olds, "|") {
			if i == 16 {
				break
			}
			if o != "" {
				pairs = append(pairs, o, fmt.Sprintf("<%d>", i))
			}
		}
		if len(pairs) == 0 {
			return
		}
		want := strings.NewReplacer(pairs...).Replace(string(in))
		rep := newReplacer(pairs...)
		if got := scrubAll(t, rep, in, sizes); got != want {
			t.Fatalf("Replacer%q on %q = %q, scrubbed in pieces %v: %q", pairs, in, want, sizes, got)
		}
		if got := rep.String(string(in)); got != want {
			t.Fatalf("String: %q, want %q", got, want)
		}
	})
}

// TestReplacerManyRandom: many old strings over a small alphabet (so they overlap and
// share prefixes), against strings.Replacer, in random pieces.
func TestReplacerManyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "abc"[rng.IntN(3)]
		}
		return string(b)
	}
	for range 2000 {
		var pairs []string
		for i := range 1 + rng.IntN(12) {
			pairs = append(pairs, word(1+rng.IntN(9)), fmt.Sprintf("<%d>", i))
		}
		if rng.IntN(2) == 0 { // often all long enough for the one-pass search
			for i := 0; i < len(pairs); i += 2 {
				pairs[i] += word(minWindow)
			}
		}
		in := word(rng.IntN(200))
		sizes := []byte{byte(1 + rng.IntN(20)), byte(1 + rng.IntN(5))}
		want := strings.NewReplacer(pairs...).Replace(in)
		if got := scrubAll(t, newReplacer(pairs...), []byte(in), sizes); got != want {
			t.Fatalf("Replacer%q on %q = %q, scrubbed in pieces %v: %q", pairs, in, want, sizes, got)
		}
	}
}
