package gitgate

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

type pkt struct {
	kind PktKind
	data string
}

func readAll(t testing.TB, in string) ([]pkt, error) {
	t.Helper()
	r := NewPktReader(strings.NewReader(in))
	var out []pkt
	for {
		k, d, err := r.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, pkt{k, string(d)})
	}
}

func TestPktReader(t *testing.T) {
	max := strings.Repeat("x", MaxPktData)
	for _, tc := range []struct {
		name, in string
		want     []pkt
		err      error // nil: no error
	}{
		{"empty input", "", nil, nil},
		{"data", "0009hello0000", []pkt{{PktData, "hello"}, {PktFlush, ""}}, nil},
		{"specials", "000000010002", []pkt{{PktFlush, ""}, {PktDelim, ""}, {PktResponseEnd, ""}}, nil},
		{"empty data line", "0004", []pkt{{PktData, ""}}, nil},
		{"uppercase hex", "000Ahello!", []pkt{{PktData, "hello!"}}, nil},
		{"largest line", "fff0" + max, []pkt{{PktData, max}}, nil},
		{"length 3", "0003", nil, errdefs.ErrInvalidArgument},
		{"over the maximum", "fff1" + max + "x", nil, errdefs.ErrInvalidArgument},
		{"ffff", "ffff", nil, errdefs.ErrInvalidArgument},
		{"not hex", "00g4", nil, errdefs.ErrInvalidArgument},
		{"sign", "-004", nil, errdefs.ErrInvalidArgument},
		{"space", " 004", nil, errdefs.ErrInvalidArgument},
		{"truncated header", "00", nil, io.ErrUnexpectedEOF},
		{"truncated payload", "0009hel", nil, io.ErrUnexpectedEOF},
		{"good then bad", "0005a0003", []pkt{{PktData, "a"}}, errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readAll(t, tc.in)
			if tc.err == nil && err != nil || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d lines, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("line %d: %v %q, want %v %q", i, got[i].kind, truncate(got[i].data, 20), tc.want[i].kind, truncate(tc.want[i].data, 20))
				}
			}
		})
	}
}

// The reader consumes exactly the lines it returns: what follows is left in the reader.
func TestPktReaderExact(t *testing.T) {
	src := strings.NewReader("0008abcd0000PACKrest")
	r := NewPktReader(src)
	for range 2 {
		if _, _, err := r.Read(); err != nil {
			t.Fatal(err)
		}
	}
	rest, _ := io.ReadAll(src)
	if string(rest) != "PACKrest" || r.Offset() != 12 {
		t.Fatalf("left %q at offset %d", rest, r.Offset())
	}
}

func TestPktWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewPktWriter(&b)
	for _, err := range []error{w.WriteString("hello\n"), w.Write(nil), w.Flush(), w.Delim(), w.ResponseEnd()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := "000ahello\n0004000000010002"; b.String() != want {
		t.Fatalf("wrote %q, want %q", b.String(), want)
	}
	b.Reset()
	if err := w.Write(make([]byte, MaxPktData)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "fff0") {
		t.Fatalf("largest line header %q", b.String()[:4])
	}
	b.Reset()
	if err := w.Write(make([]byte, MaxPktData+1)); !errdefs.IsInvalidArgument(err) || b.Len() != 0 {
		t.Fatalf("over-long line: %v, wrote %d bytes", err, b.Len())
	}
}

// Reading a line allocates nothing, whatever its length: memory is the reader's buffer.
func TestPktReaderAllocs(t *testing.T) {
	line := []byte("fff0" + strings.Repeat("x", MaxPktData))
	src := bytes.NewReader(line)
	r := NewPktReader(src)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(line)
		if _, _, err := r.Read(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per line", allocs)
	}
}
