package intercept

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/url"
	"sort"
	"strings"
	"testing"
)

func basicOf(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}

func TestSwapCredential(t *testing.T) {
	const ph, v = "moat-ph-7f3a9c2e1d", "real/value+=1"
	for _, tc := range []struct {
		in, want string // want "" means: not swapped
		basic    bool
	}{
		{"Bearer " + ph, "Bearer " + v, false},
		{"bearer " + ph, "bearer " + v, false},
		{"token " + ph, "token " + v, false},
		{ph, v, false},
		{"Basic " + basicOf("x-access-token", ph), "Basic " + basicOf("x-access-token", v), true},
		{"Basic " + basicOf(ph, "x"), "Basic " + basicOf(v, "x"), true},
		{"basic " + basicOf(ph, ""), "basic " + basicOf(v, ""), true},
		{"Basic " + basicOf("", ph), "Basic " + basicOf("", v), true},
		// Not a credential form: unchanged.
		{"Bearer  " + ph, "", false},
		{"Bearer " + ph + " ", "", false},
		{" Bearer " + ph, "", false},
		{"Bearer x" + ph, "", false},
		{"Bearer " + ph + "x", "", false},
		{"Bearer " + ph + "," + ph, "", false},
		{"Be/arer " + ph, "", false},
		{"key=" + ph, "", false},
		{ph + " " + ph, "", false},
		{"x" + ph, "", false},
		{"Basic " + ph, "", false},
		{"Basic " + basicOf(ph, ph), "", false},
		{"Basic " + basicOf("user", ph+"x"), "", false},
		{"Basic " + basicOf("u"+ph, "x"), "", false},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte(ph)), "", false},
		{"Basic " + base64.RawStdEncoding.EncodeToString([]byte("user:"+ph)), "", false},
		{"Basic " + base64.URLEncoding.EncodeToString([]byte("user:"+ph+"?>")), "", false},
		{"", "", false},
	} {
		out, sent, wrote, ok := swapCredential(tc.in, ph, v)
		switch {
		case tc.want == "" && (ok || out != tc.in):
			t.Errorf("%q: swapped to %q", tc.in, out)
		case tc.want != "" && (!ok || out != tc.want):
			t.Errorf("%q: got %q (%v), want %q", tc.in, out, ok, tc.want)
		case tc.basic && (sent != tc.in[len("Basic "):] || "Basic "+wrote != out && "basic "+wrote != out):
			t.Errorf("%q: Basic sent %q, wrote %q", tc.in, sent, wrote)
		case !tc.basic && (sent != "" || wrote != ""):
			t.Errorf("%q: Basic pair %q %q for a non-Basic form", tc.in, sent, wrote)
		}
	}
	if out, _, _, ok := swapCredential("Bearer ", "", v); ok || out != "Bearer " {
		t.Errorf("an empty placeholder swapped: %q", out)
	}
}

// FuzzSwapCredential: for any header value, either nothing is swapped and the value is
// unchanged, or the value is one of the credential forms and swapping the value back
// gives exactly what the client sent.
func FuzzSwapCredential(f *testing.F) {
	const v = "\x00real-value\x00"
	f.Fuzz(func(t *testing.T, hv, ph string) {
		if len(ph) < minPlaceholder || strings.Contains(v, ph) || strings.Contains(ph, v) {
			return
		}
		out, sent, wrote, ok := swapCredential(hv, ph, v)
		if !ok {
			if out != hv || sent != "" || wrote != "" {
				t.Fatalf("not swapped, yet %q became %q", hv, out)
			}
			return
		}
		if wrote == "" {
			if back := strings.Replace(out, v, ph, 1); back != hv || strings.Count(out, v) != 1 {
				t.Fatalf("%q swapped to %q", hv, out)
			}
			if out != v && !strings.HasSuffix(out, " "+v) {
				t.Fatalf("%q swapped to %q: the value is not the whole credential", hv, out)
			}
			return
		}
		scheme, rest, _ := strings.Cut(out, " ")
		if !strings.EqualFold(scheme, "Basic") || rest != wrote || hv != scheme+" "+sent {
			t.Fatalf("%q: Basic %q, sent %q, wrote %q", hv, out, sent, wrote)
		}
		dec, err := base64.StdEncoding.DecodeString(wrote)
		if err != nil {
			t.Fatal(err)
		}
		user, pass, _ := strings.Cut(string(dec), ":")
		if user != v && pass != v {
			t.Fatalf("%q: the value is neither user nor password of %q", hv, dec)
		}
		if orig, _ := base64.StdEncoding.DecodeString(sent); string(orig) != strings.Replace(string(dec), v, ph, 1) {
			t.Fatalf("%q: written %q does not map back", hv, dec)
		}
	})
}

// scrubWith scrubs in with the pairs of each value, as a session does, in pieces.
func scrubWith(t testing.TB, in []byte, sizes []byte, vals ...[2]string) string {
	var pairs [][2]string
	for _, vp := range vals {
		kv := scrubPairs(vp[0], vp[1])
		for i := 0; i < len(kv); i += 2 {
			pairs = append(pairs, [2]string{kv[i], kv[i+1]})
		}
	}
	sort.SliceStable(pairs, func(i, j int) bool { return len(pairs[i][0]) > len(pairs[j][0]) })
	var flat []string
	for _, p := range pairs {
		flat = append(flat, p[0], p[1])
	}
	return scrubAll(t, newReplacer(flat...), in, sizes)
}

// encodings is every form of s the tests expect scrubbed, named.
func encodings(s string) map[string]string {
	lower := func(e string) string { return lowerEscapes(e) }
	return map[string]string{
		"raw": s, "query": url.QueryEscape(s), "path": url.PathEscape(s),
		"query-lower": lower(url.QueryEscape(s)), "path-lower": lower(url.PathEscape(s)),
		"hex": hex.EncodeToString([]byte(s)), "HEX": strings.ToUpper(hex.EncodeToString([]byte(s))),
		"b64": base64.StdEncoding.EncodeToString([]byte(s)), "b64-raw": base64.RawStdEncoding.EncodeToString([]byte(s)),
		"b64url": base64.URLEncoding.EncodeToString([]byte(s)), "b64url-raw": base64.RawURLEncoding.EncodeToString([]byte(s)),
	}
}

// TestScrubPairs: each whole encoding of the value comes back as the same encoding of the
// placeholder; inside a longer base64 run, in any of the three alignments, the value's
// part is "[redacted]" and decoding what is left does not give the value.
func TestScrubPairs(t *testing.T) {
	const v = "sk/live+0f3c~9a7e 5b1d&x?<y>"
	const ph = "moat-placeholder-00ff"
	enc, phEnc := encodings(v), encodings(ph)
	for name, e := range enc {
		in := "[" + e + "]"
		if got := scrubWith(t, []byte(in), []byte{3}, [2]string{v, ph}); got != "["+phEnc[name]+"]" {
			t.Errorf("%s: %q scrubbed to %q, want %q", name, in, got, "["+phEnc[name]+"]")
		}
	}
	if got := scrubWith(t, []byte(`{"k":"`+jsonString(v, true)+`"}`), nil, [2]string{v, ph}); got != `{"k":"`+ph+`"}` {
		t.Errorf("JSON: %q", got)
	}
	// A header injection's value has no placeholder: every form is "[redacted]".
	if got := scrubWith(t, []byte(enc["hex"]+" "+enc["b64"]), nil, [2]string{v, ""}); got != redacted+" "+redacted {
		t.Errorf("without a placeholder: %q", got)
	}
	for _, pre := range []string{"", "x-access-token:", "ab:", "a:", "x"} {
		for _, post := range []string{"", ":x", "\n", "!!"} {
			for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
				run := e.EncodeToString([]byte(pre + v + post))
				got := scrubWith(t, []byte("data "+run+" end"), []byte{5, 1}, [2]string{v, ph})
				if strings.Contains(got, run) || revealsBase64(got, v) {
					t.Errorf("base64(%q + v + %q) = %q scrubbed to %q, which reveals the value", pre, post, run, got)
				}
			}
		}
	}
	// Short values: the value itself is scrubbed, but no encoding shorter than minEncoded.
	if pairs := scrubPairs("ab", "moat-placeholder-1"); len(pairs) != 2 || pairs[0] != "ab" {
		t.Errorf("a 2-byte value: %q", pairs)
	}
}

// revealsBase64 says whether decoding any run of base64 characters in s, at any of the
// four character offsets and in either alphabet, gives bytes holding v.
func revealsBase64(s, v string) bool {
	isB64 := func(c byte) bool {
		return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("+/-_", c) >= 0
	}
	for i := 0; i < len(s); {
		if !isB64(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isB64(s[j]) {
			j++
		}
		run := s[i:j]
		for off := 0; off < 4 && off < len(run); off++ {
			r := run[off:]
			if len(r)%4 == 1 {
				r = r[:len(r)-1]
			}
			std := strings.NewReplacer("-", "+", "_", "/").Replace(r)
			if dec, err := base64.RawStdEncoding.DecodeString(std); err == nil && strings.Contains(string(dec), v) {
				return true
			}
		}
		i = j
	}
	return false
}

// FuzzScrubEncodings: whatever surrounds the value, and however the response is cut into
// reads, a response carrying it raw, in hex (either case) and in base64 (both alphabets,
// so in any alignment) gives nothing from which a decoder finds the value: not raw, not
// by decoding any hex run, not by decoding any base64 run at any offset. Seeds live in
// testdata/fuzz/FuzzScrubEncodings.
func FuzzScrubEncodings(f *testing.F) {
	const ph = "moat-placeholder-0123456789abcdef"
	f.Fuzz(func(t *testing.T, v, pre, post []byte, sizes []byte) {
		if len(v) < minEncoded || len(v) > 64 || len(pre) > 64 || len(post) > 64 {
			return
		}
		// What the scrubber writes must not itself decode to the value.
		var written strings.Builder
		written.WriteString(redacted + "\n")
		for _, e := range encodings(ph) {
			written.WriteString(e + "\n")
		}
		if reveals(written.String(), string(v)) {
			return
		}
		body := string(pre) + string(v) + string(post)
		var in strings.Builder
		for _, s := range []string{
			body, hex.EncodeToString([]byte(body)), strings.ToUpper(hex.EncodeToString([]byte(body))),
			base64.StdEncoding.EncodeToString([]byte(body)), base64.RawURLEncoding.EncodeToString([]byte(body)),
		} {
			in.WriteString(s + "\n")
		}
		out := scrubWith(t, []byte(in.String()), sizes, [2]string{string(v), ph})
		if reveals(out, string(v)) {
			t.Fatalf("the value can be read from the scrubbed output\n%q\n%q", in.String(), out)
		}
	})
}

// reveals says whether s holds v raw, or in a run of hex digits (of one case) or of
// base64 characters that decodes, from some offset, to bytes holding v.
func reveals(s, v string) bool {
	if strings.Contains(s, v) || revealsBase64(s, v) {
		return true
	}
	for _, digits := range []string{"0123456789abcdef", "0123456789ABCDEF"} {
		for i := 0; i < len(s); {
			j := i
			for j < len(s) && strings.IndexByte(digits, s[j]) >= 0 {
				j++
			}
			for off := 0; off < 2 && i+off < j; off++ {
				r := s[i+off : j]
				if dec, err := hex.DecodeString(r[:len(r)/2*2]); err == nil && strings.Contains(string(dec), v) {
					return true
				}
			}
			i = j + 1
		}
	}
	return false
}

// BenchmarkScrubForms: the scrubber with every form of two values, on text that looks
// like an API's JSON (letters, digits, base64), not a run of one byte.
func BenchmarkScrubForms(b *testing.B) {
	var pairs []string
	for _, vp := range [][2]string{{value, placeholder}, {"ghs_16C7e42F292c6912E7710c838347Ae178B4a", "moat-placeholder-" + strings.Repeat("ab", 24)}} {
		pairs = append(pairs, scrubPairs(vp[0], vp[1])...)
	}
	rep := newReplacer(pairs...)
	chunk := `{"id":1296269,"node_id":"MDEwOlJlcG9zaXRvcnkxMjk2MjY5","name":"Hello-World","full_name":"octocat/Hello-World","sha":"6dcb09b5b57875f334f61aebed695e2e4193db5e","content":"SGVsbG8gV29ybGQhIFRoaXMgaXMgYSB0ZXN0IG9mIGJhc2U2NCBjb250ZW50Lg=="},` + "\n"
	in := []byte(strings.Repeat(chunk, (1<<20)/len(chunk)))
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		io.Copy(io.Discard, newScrubReader(bytes.NewReader(in), rep))
	}
}
