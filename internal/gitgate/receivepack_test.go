package gitgate

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

var (
	z1 = strings.Repeat("0", 40)
	a1 = strings.Repeat("a", 40)
	b1 = strings.Repeat("b", 40)
	a2 = strings.Repeat("a", 64)
	b2 = strings.Repeat("b", 64)
)

// body builds a request: each string a data line (LF added), "" a flush, "\n" an empty
// line (just LF); then tail.
func body(lines []string, tail string) []byte {
	var b bytes.Buffer
	w := NewPktWriter(&b)
	for _, l := range lines {
		switch l {
		case "":
			_ = w.Flush()
		case "\n":
			_ = w.WriteString(l)
		default:
			_ = w.WriteString(l + "\n")
		}
	}
	b.WriteString(tail)
	return b.Bytes()
}

const caps = "report-status side-band-64k agent=git/2.39.5"

func TestParseReceivePack(t *testing.T) {
	cert := []string{
		"push-cert\x00" + caps,
		"certificate version 0.1",
		"pusher moat test <test@moat.invalid> 1767225600 +0000",
		"pushee http://example.invalid/repo.git",
		"nonce 1767225600-abcdef",
		"push-option ci.skip",
		"\n",
		a1 + " " + b1 + " refs/heads/agent/t/x",
		"-----BEGIN PGP SIGNATURE-----",
		"AAAA",
		"-----END PGP SIGNATURE-----",
		"push-cert-end",
		"",
	}
	for _, tc := range []struct {
		name string
		in   []byte
		lim  Limits
		want *Request // nil: error
		pack string
		err  error // with want nil; default ErrInvalidArgument
	}{
		{
			name: "one creation with pack",
			in:   body([]string{z1 + " " + a1 + " refs/heads/agent/t/x\x00" + caps, ""}, "PACKdata"),
			want: &Request{Format: SHA1, Capabilities: Capabilities{"report-status", "side-band-64k", "agent=git/2.39.5"},
				Commands: []Command{{z1, a1, "refs/heads/agent/t/x"}}},
			pack: "PACKdata",
		},
		{
			name: "git's leading space before the capabilities",
			in:   body([]string{a1 + " " + b1 + " refs/heads/a\x00 report-status-v2 quiet", ""}, ""),
			want: &Request{Format: SHA1, Capabilities: Capabilities{"report-status-v2", "quiet"}, Commands: []Command{{a1, b1, "refs/heads/a"}}},
		},
		{
			name: "several commands, no pack",
			in:   body([]string{a1 + " " + z1 + " refs/heads/a\x00" + caps, b1 + " " + z1 + " refs/heads/b", ""}, ""),
			want: &Request{Format: SHA1, Capabilities: Capabilities{"report-status", "side-band-64k", "agent=git/2.39.5"},
				Commands: []Command{{a1, z1, "refs/heads/a"}, {b1, z1, "refs/heads/b"}}},
		},
		{
			name: "sha256",
			in:   body([]string{a2 + " " + b2 + " refs/heads/a\x00object-format=sha256", ""}, "PACK"),
			want: &Request{Format: SHA256, Capabilities: Capabilities{"object-format=sha256"}, Commands: []Command{{a2, b2, "refs/heads/a"}}},
			pack: "PACK",
		},
		{
			name: "shallow lines",
			in:   body([]string{"shallow " + b1, "shallow " + a1, z1 + " " + a1 + " refs/heads/a\x00", ""}, "PACK"),
			want: &Request{Format: SHA1, Shallow: []string{b1, a1}, Commands: []Command{{z1, a1, "refs/heads/a"}}},
			pack: "PACK",
		},
		{
			name: "push options",
			in:   body([]string{z1 + " " + a1 + " refs/heads/a\x00push-options", "", "merge_request.create", "ci.skip", ""}, "PACK"),
			want: &Request{Format: SHA1, Capabilities: Capabilities{"push-options"}, Commands: []Command{{z1, a1, "refs/heads/a"}},
				Options: []string{"merge_request.create", "ci.skip"}},
			pack: "PACK",
		},
		{
			name: "push certificate",
			in:   body(cert, "PACK"),
			want: &Request{Format: SHA1, Capabilities: Capabilities{"report-status", "side-band-64k", "agent=git/2.39.5"},
				Commands: []Command{{a1, b1, "refs/heads/agent/t/x"}}, PushCert: true},
			pack: "PACK",
		},
		{name: "push certificate cut short", in: body(cert[:9], ""), err: io.ErrUnexpectedEOF},
		{name: "push certificate without end", in: body(append(cert[:9:9], ""), "")},
		{name: "push certificate too long", in: body(cert, "PACK"), lim: Limits{MaxCertBytes: 100}},
		{name: "push certificate without commands", in: body(append(cert[:7:7], "push-cert-end", ""), "")},
		{name: "empty body", in: nil, err: io.ErrUnexpectedEOF},
		{name: "no flush", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00"}, ""), err: io.ErrUnexpectedEOF},
		{name: "flush only", in: body([]string{""}, "")},
		{name: "delim", in: []byte("0001")},
		{name: "junk instead of pack", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00", ""}, "JUNKJUNK")},
		{name: "short junk instead of pack", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00", ""}, "P")},
		{name: "no capability list", in: body([]string{z1 + " " + a1 + " refs/heads/a", ""}, "")},
		{name: "NUL in second command", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00", z1 + " " + a1 + " refs/heads/b\x00x", ""}, "")},
		{name: "uppercase id", in: body([]string{z1 + " " + strings.ToUpper(a1) + " refs/heads/a\x00", ""}, "")},
		{name: "sha256 id without object-format", in: body([]string{a2 + " " + b2 + " refs/heads/a\x00", ""}, "")},
		{name: "sha1 id with sha256", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00object-format=sha256", ""}, "")},
		{name: "unknown object format", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00object-format=md5", ""}, "")},
		{name: "two object formats", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00object-format=sha1 object-format=sha1", ""}, "")},
		{name: "control byte in capability", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00agent=a\x01", ""}, "")},
		{name: "zero to zero", in: body([]string{z1 + " " + z1 + " refs/heads/a\x00", ""}, "")},
		{name: "bad ref", in: body([]string{z1 + " " + a1 + " refs/heads/a..b\x00", ""}, "")},
		{name: "ref outside refs/", in: body([]string{z1 + " " + a1 + " HEAD\x00", ""}, "")},
		{name: "missing ref", in: body([]string{z1 + " " + a1 + " \x00", ""}, "")},
		{name: "two spaces", in: body([]string{z1 + "  " + a1 + " refs/heads/a\x00", ""}, "")},
		{name: "same ref twice", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00", z1 + " " + b1 + " refs/heads/a", ""}, "")},
		{name: "too many commands", lim: Limits{MaxCommands: 1},
			in: body([]string{z1 + " " + a1 + " refs/heads/a\x00", z1 + " " + b1 + " refs/heads/b", ""}, "")},
		{name: "bad shallow", in: body([]string{"shallow xyz", z1 + " " + a1 + " refs/heads/a\x00", ""}, "")},
		{name: "too many shallow", lim: Limits{MaxShallow: 1},
			in: body([]string{"shallow " + a1, "shallow " + b1, z1 + " " + a1 + " refs/heads/a\x00", ""}, "")},
		{name: "too many push options", lim: Limits{MaxOptions: 1},
			in: body([]string{z1 + " " + a1 + " refs/heads/a\x00push-options", "", "a", "b", ""}, "")},
		{name: "push options without flush", in: body([]string{z1 + " " + a1 + " refs/heads/a\x00push-options", "", "a"}, ""), err: io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseReceivePack(bytes.NewReader(tc.in), tc.lim)
			if tc.want == nil {
				want := tc.err
				if want == nil {
					want = errdefs.ErrInvalidArgument
				}
				if !errors.Is(err, want) {
					t.Fatalf("error %v, want %v", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var pack []byte
			if req.Pack != nil {
				pack, _ = io.ReadAll(req.Pack)
			}
			if string(pack) != tc.pack {
				t.Errorf("pack %q, want %q", pack, tc.pack)
			}
			req.Pack = nil
			if !equalRequest(req, tc.want) {
				t.Errorf("got %+v\nwant %+v", req, tc.want)
			}
		})
	}
}

func equalRequest(a, b *Request) bool {
	eq := func(x, y []string) bool { return strings.Join(x, "\n") == strings.Join(y, "\n") && len(x) == len(y) }
	if a.Format != b.Format || a.PushCert != b.PushCert || !eq(a.Capabilities, b.Capabilities) ||
		!eq(a.Shallow, b.Shallow) || !eq(a.Options, b.Options) || len(a.Commands) != len(b.Commands) {
		return false
	}
	for i := range a.Commands {
		if a.Commands[i] != b.Commands[i] {
			return false
		}
	}
	return true
}

// countingReader is an endless stream of one line, counting what is read.
type countingReader struct {
	line []byte
	off  int
	n    int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.line[r.off]
		r.off = (r.off + 1) % len(r.line)
	}
	r.n += int64(len(p))
	return len(p), nil
}

// A hostile endless body stops at the limits, having read little.
func TestParseReceivePackEndless(t *testing.T) {
	for name, line := range map[string][]byte{
		"shallow":  body([]string{"shallow " + a1}, ""),
		"commands": body([]string{z1 + " " + a1 + " refs/heads/a"}, ""), // the first lacks capabilities
		"max-size": []byte("fff0" + strings.Repeat("x", MaxPktData)),
	} {
		r := &countingReader{line: line}
		_, err := ParseReceivePack(r, Limits{MaxShallow: 100})
		if !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: error %v", name, err)
		}
		if r.n > 1<<20 {
			t.Errorf("%s: read %d bytes before refusing", name, r.n)
		}
	}
	// Endless commands: refused at MaxCommands.
	var first bytes.Buffer
	w := NewPktWriter(&first)
	_ = w.WriteString(z1 + " " + a1 + " refs/heads/x\x00report-status\n")
	r := &countingReader{line: body([]string{z1 + " " + a1 + " refs/heads/a"}, "")}
	// Commands repeat the same ref: refused as a duplicate right away; endless distinct
	// refs are refused at the limit (below).
	if _, err := ParseReceivePack(io.MultiReader(&first, r), Limits{}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("endless duplicate commands: %v", err)
	}
	lines := []string{z1 + " " + a1 + " refs/heads/x\x00"}
	for i := range 300 {
		lines = append(lines, z1+" "+a1+" refs/heads/n"+strings.Repeat("x", i))
	}
	if _, err := ParseReceivePack(bytes.NewReader(body(lines, "")), Limits{}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "more than 256 commands") {
		t.Fatalf("300 commands: %v", err)
	}
}
