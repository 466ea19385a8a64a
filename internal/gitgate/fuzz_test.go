package gitgate

import (
	"bytes"
	"errors"
	"io"
	"path"
	"strings"
	"testing"
)

// Seeds live in testdata/fuzz/<FuzzName>/, among them real push requests captured from git
// (TestRealGitPushParsed -write-seeds).

func FuzzPktLine(f *testing.F) {
	f.Add([]byte("0009hello0000000100020004"))
	f.Add([]byte("fff0"))
	f.Add([]byte("000Ahello!0003"))
	f.Add(body([]string{"# service=git-receive-pack", "", a1 + " refs/heads/main\x00report-status push-cert=1-a push-options", ""}, ""))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewPktReader(bytes.NewReader(in))
		var out bytes.Buffer
		w := NewPktWriter(&out)
		var kinds []PktKind
		for {
			k, d, err := r.Read()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "invalid argument") {
					t.Fatalf("error of no class: %v", err)
				}
				break
			}
			if len(d) > MaxPktData {
				t.Fatalf("payload of %d bytes", len(d))
			}
			kinds = append(kinds, k)
			switch k {
			case PktData:
				err = w.Write(d)
			case PktFlush:
				err = w.Flush()
			case PktDelim:
				err = w.Delim()
			case PktResponseEnd:
				err = w.ResponseEnd()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// What was read, written again, is the input read (hex case aside).
		n := out.Len()
		if int64(n) > r.Offset() || !bytes.EqualFold(out.Bytes(), in[:n]) {
			t.Fatalf("rewritten lines differ from the input: %q vs %q", out.Bytes(), in[:min(n, len(in))])
		}
		again, err := readAll(t, out.String())
		if err != nil || len(again) != len(kinds) {
			t.Fatalf("rewritten lines do not read back: %d lines, %v", len(again), err)
		}

		// The same bytes as an advertisement: filtering is idempotent and removes what it
		// must.
		var adv bytes.Buffer
		if FilterAdvertisement(&adv, bytes.NewReader(in)) == nil {
			var again bytes.Buffer
			if err := FilterAdvertisement(&again, bytes.NewReader(adv.Bytes())); err != nil || !bytes.Equal(again.Bytes(), adv.Bytes()) {
				t.Fatalf("filtering is not idempotent: %v", err)
			}
			lines, _ := readAll(t, adv.String())
			for _, l := range lines {
				if _, caps, ok := strings.Cut(l.data, "\x00"); ok {
					for _, c := range strings.Fields(caps) {
						if c == "push-options" || strings.HasPrefix(c, "push-cert=") || c == "push-cert" {
							t.Fatalf("filtered advertisement has %q", c)
						}
					}
					break
				}
			}
		}
	})
}

// encodeRequest writes req back as a request body (not for push certificates).
func encodeRequest(req *Request) []byte {
	var lines []string
	for _, s := range req.Shallow {
		lines = append(lines, "shallow "+s)
	}
	for i, c := range req.Commands {
		l := c.Old + " " + c.New + " " + c.Ref
		if i == 0 {
			l += "\x00" + strings.Join(req.Capabilities, " ")
		}
		lines = append(lines, l)
	}
	lines = append(lines, "")
	if req.Capabilities.Has("push-options") {
		lines = append(lines, req.Options...)
		lines = append(lines, "")
	}
	return body(lines, "")
}

func FuzzParseReceivePack(f *testing.F) {
	f.Add(body([]string{z1 + " " + a1 + " refs/heads/agent/t/x\x00report-status side-band-64k", ""}, "PACK"))
	f.Add(body([]string{"shallow " + b1, a2 + " " + b2 + " refs/heads/a\x00object-format=sha256 push-options", "", "ci.skip", ""}, ""))
	policy, err := Compile(PolicySpec{Prefix: "refs/heads/agent/t/"})
	if err != nil {
		f.Fatal(err)
	}
	lim := Limits{MaxCommands: 8, MaxShallow: 8, MaxOptions: 8, MaxCertBytes: 4096}
	f.Fuzz(func(t *testing.T, in []byte) {
		req, err := ParseReceivePack(bytes.NewReader(in), lim)
		if err != nil {
			if !strings.Contains(err.Error(), "invalid argument") && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		if len(req.Commands) == 0 || len(req.Commands) > lim.MaxCommands || len(req.Shallow) > lim.MaxShallow || len(req.Options) > lim.MaxOptions {
			t.Fatalf("out of limits: %d commands, %d shallow, %d options", len(req.Commands), len(req.Shallow), len(req.Options))
		}
		seen := map[string]bool{}
		for _, c := range req.Commands {
			if len(c.Old) != req.Format.HexLen() || len(c.New) != req.Format.HexLen() || CheckRefName(c.Ref) != nil || seen[c.Ref] || (c.IsCreate() && c.IsDelete()) {
				t.Fatalf("bad command %+v (%s)", c, req.Format)
			}
			seen[c.Ref] = true
		}
		var pack []byte
		if req.Pack != nil {
			pack, _ = io.ReadAll(req.Pack)
			if !bytes.HasPrefix(pack, []byte("PACK")) || !bytes.HasSuffix(in, pack) {
				t.Fatalf("pack %q is not the tail of the input", truncate(string(pack), 20))
			}
		}
		if !req.PushCert {
			// Round trip: the request, written again, parses to the same request.
			again, err := ParseReceivePack(bytes.NewReader(append(encodeRequest(req), pack...)), lim)
			if err != nil {
				t.Fatalf("re-encoded request: %v", err)
			}
			again.Pack, req.Pack = nil, nil
			if !equalRequest(again, req) {
				t.Fatalf("round trip: %+v\nvs %+v", again, req)
			}
		}
		d := policy.Decide(req, func(ref, old, new string) bool { return old < new })
		if len(d.Verdicts) != len(req.Commands) {
			t.Fatal("verdicts")
		}
		for _, v := range d.Verdicts {
			if v.Allow && (!strings.HasPrefix(v.Command.Ref, "refs/heads/agent/t/") || v.Command.IsDelete() || req.PushCert || len(req.Options) > 0) {
				t.Fatalf("allowed %+v", v)
			}
		}
		if !d.Allow {
			var out bytes.Buffer
			if err := WriteReport(&out, Capabilities{"report-status", "side-band-64k"}, RefusalReport(d)); err != nil {
				t.Fatal(err)
			}
			b1, _ := demux(t, out.Bytes(), MaxPktData)
			lines, err := readAll(t, string(b1))
			if err != nil || len(lines) != len(req.Commands)+2 {
				t.Fatalf("report: %d lines, %v", len(lines), err)
			}
		}
	})
}

func FuzzRefName(f *testing.F) {
	for _, tc := range refNameCases {
		f.Add(tc.name)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckRefName(s)
		_, perr := Compile(PolicySpec{Prefix: s + "/"})
		if perr == nil && (err != nil || !strings.HasPrefix(s, "refs/heads/")) {
			t.Fatalf("prefix %q/ compiles, but CheckRefName: %v", s, err)
		}
		if err != nil {
			return
		}
		if !strings.HasPrefix(s, "refs/") || strings.Contains(s, "..") || strings.Contains(s, "@{") ||
			strings.Contains(s, "//") || strings.HasSuffix(s, ".") || strings.HasSuffix(s, "/") || len(s) > MaxRefNameLen {
			t.Fatalf("accepted %q", s)
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte("~^:?*[\\", c) >= 0 {
				t.Fatalf("accepted %q with byte 0x%02x", s, c)
			}
		}
		for _, comp := range strings.Split(s, "/") {
			if strings.HasPrefix(comp, ".") || strings.HasSuffix(comp, ".lock") {
				t.Fatalf("accepted %q", s)
			}
		}
		// A valid name is accepted as the ref of a command.
		req, err := ParseReceivePack(bytes.NewReader(body([]string{z1 + " " + a1 + " " + s + "\x00", ""}, "")), Limits{})
		if err != nil || req.Commands[0].Ref != s {
			t.Fatalf("command for %q: %v", s, err)
		}
	})
}

// refMatch is an independent (exponential, for short inputs only) glob matcher.
func refMatch(g, p []string, fold bool) bool {
	if len(g) == 0 {
		return len(p) == 0
	}
	if g[0] == "**" {
		for i := 0; i <= len(p); i++ {
			if refMatch(g[1:], p[i:], fold) {
				return true
			}
		}
		return false
	}
	if len(p) == 0 {
		return false
	}
	gc, pc := g[0], p[0]
	if fold {
		gc, pc = asciiLower(gc), asciiLower(pc)
	}
	ok, err := path.Match(gc, pc)
	return err == nil && ok && refMatch(g[1:], p[1:], fold)
}

func FuzzProtectedPaths(f *testing.F) {
	for _, g := range DefaultProtected() {
		f.Add(g, ".github/workflows/ci.yml", false)
	}
	f.Add("a/**/b/**/c", "a/1/b/2/b/3/c", false)
	f.Add("**/*.YML", "x/y.yml", true)
	f.Add("a*b?c", "axxbyc", false)
	f.Fuzz(func(t *testing.T, glob, p string, fold bool) {
		m, err := NewPathMatcher([]string{glob}, MatcherOptions{CaseInsensitive: fold})
		hits, perr := (&PathMatcher{}).Match([]string{p})
		if perr != nil || len(hits) != 0 {
			if (perr == nil) != (CheckPath(p) == nil) {
				t.Fatalf("Match and CheckPath disagree on %q", p)
			}
		}
		if err != nil || perr != nil {
			return
		}
		hits, err = m.Match([]string{p})
		if err != nil {
			t.Fatal(err)
		}
		got := len(hits) == 1
		if got && (hits[0].Glob != glob || hits[0].Path != p) {
			t.Fatalf("hit %+v", hits[0])
		}
		gs, ps := strings.Split(glob, "/"), strings.Split(p, "/")
		if len(gs) <= 8 && len(ps) <= 12 {
			if want := refMatch(gs, ps, fold); got != want {
				t.Fatalf("%q against %q (fold %v): %v, reference %v", glob, p, fold, got, want)
			}
		}
		if !strings.ContainsAny(glob, "*?") && got != (glob == p || fold && asciiLower(glob) == asciiLower(p)) {
			t.Fatalf("literal %q against %q: %v", glob, p, got)
		}
		if m2, _ := NewPathMatcher([]string{glob}, MatcherOptions{CaseInsensitive: true}); !fold && got {
			if h, _ := m2.Match([]string{p}); len(h) != 1 {
				t.Fatalf("case-insensitive misses what case-sensitive hits: %q %q", glob, p)
			}
		}
	})
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
