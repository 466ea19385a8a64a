package gitgate

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func refusal(t *testing.T) Decision {
	t.Helper()
	p, err := Compile(PolicySpec{Prefix: "refs/heads/agent/t/"})
	if err != nil {
		t.Fatal(err)
	}
	return p.Decide(&Request{Commands: []Command{{z1, a1, "refs/heads/agent/t/x"}, {a1, b1, "refs/heads/main"}}}, nil)
}

func TestWriteReportPlain(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReport(&b, Capabilities{"report-status"}, RefusalReport(refusal(t))); err != nil {
		t.Fatal(err)
	}
	want := body([]string{
		"unpack ok",
		"ng refs/heads/agent/t/x moat: refused because another ref in this push was refused",
		"ng refs/heads/main moat: this sandbox may push only to branches under refs/heads/agent/t/",
		"",
	}, "")
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("report\n%q\nwant\n%q", b.Bytes(), want)
	}
}

// demux splits a side-band stream into its bands, checking the framing.
func demux(t *testing.T, in []byte, max int) (band1, band2 []byte) {
	t.Helper()
	r := NewPktReader(bytes.NewReader(in))
	for {
		k, d, err := r.Read()
		if err != nil {
			t.Fatalf("side-band stream: %v", err)
		}
		if k == PktFlush {
			break
		}
		if len(d) == 0 || len(d) > max {
			t.Fatalf("side-band packet of %d bytes", len(d))
		}
		switch d[0] {
		case 1:
			band1 = append(band1, d[1:]...)
		case 2:
			band2 = append(band2, d[1:]...)
		default:
			t.Fatalf("band %d", d[0])
		}
	}
	if _, _, err := r.Read(); !errors.Is(err, io.EOF) {
		t.Fatalf("bytes after the final flush: %v", err)
	}
	return band1, band2
}

func TestWriteReportSideband(t *testing.T) {
	rep := RefusalReport(refusal(t))
	for _, tc := range []struct {
		cap string
		max int
	}{{"side-band-64k", MaxPktData}, {"side-band", 996}} {
		var plain, sb bytes.Buffer
		if err := WriteReport(&plain, Capabilities{"report-status-v2"}, rep); err != nil {
			t.Fatal(err)
		}
		if err := WriteReport(&sb, Capabilities{"report-status-v2", tc.cap}, rep); err != nil {
			t.Fatal(err)
		}
		b1, b2 := demux(t, sb.Bytes(), tc.max)
		if !bytes.Equal(b1, plain.Bytes()) {
			t.Errorf("%s: band 1 %q, want the plain report %q", tc.cap, b1, plain.Bytes())
		}
		if want := "moat: refs/heads/main: this sandbox may push only to branches under refs/heads/agent/t/\n"; string(b2) != want {
			t.Errorf("%s: band 2 %q, want %q", tc.cap, b2, want)
		}
	}

	// A report longer than a side-band packet is split.
	long := Report{Messages: []string{strings.Repeat("m", 5000)}}
	for i := range 50 {
		long.Results = append(long.Results, RefResult{Ref: "refs/heads/x" + strings.Repeat("y", i), Err: strings.Repeat("r", 400)})
	}
	var plain, sb bytes.Buffer
	_ = WriteReport(&plain, Capabilities{"report-status"}, long)
	if err := WriteReport(&sb, Capabilities{"report-status", "side-band"}, long); err != nil {
		t.Fatal(err)
	}
	if b1, b2 := demux(t, sb.Bytes(), 996); !bytes.Equal(b1, plain.Bytes()) || len(b2) != MaxReasonLen+1 {
		t.Errorf("split report: band 1 equal %v, band 2 %d bytes", bytes.Equal(b1, plain.Bytes()), len(b2))
	}
}

func TestWriteReportEdges(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReport(&b, Capabilities{"side-band-64k"}, Report{}); !errdefs.IsInvalidArgument(err) || b.Len() != 0 {
		t.Fatalf("no report-status: %v, wrote %d bytes", err, b.Len())
	}
	// Reasons are one line of printable ASCII, and bounded.
	rep := Report{UnpackErr: "bad\npack", Results: []RefResult{{Ref: "refs/heads/a", Err: "x\x1b[31m\ry" + strings.Repeat("z", 2*MaxReasonLen)}}}
	if err := WriteReport(&b, Capabilities{"report-status"}, rep); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(t, b.String())
	if err != nil || len(got) != 3 {
		t.Fatalf("%v %v", got, err)
	}
	if got[0].data != "unpack bad?pack\n" || !strings.HasPrefix(got[1].data, "ng refs/heads/a x?[31m?yzz") || len(got[1].data) > MaxReasonLen+20 {
		t.Fatalf("lines %+v", got)
	}
}

// A whole request refused before any ref is decided (the gate could not read it, say):
// "unpack <reason>" with no ref lines still makes git fail, and say why.
func TestRealGitUnpackRefusal(t *testing.T) {
	g := newGitEnv(t)
	client := t.TempDir()
	g.must(client, "init", "-q", "-b", "main")
	g.commit(client, "README", "x\n")
	p, err := Compile(PolicySpec{Prefix: "refs/heads/agent/t/"})
	if err != nil {
		t.Fatal(err)
	}
	s := &gateServer{t: t, caps: "report-status side-band-64k", policy: p, refs: map[string]string{},
		report: func(*Request, Decision) Report {
			return Report{UnpackErr: "moat: the push could not be checked", Messages: []string{"moat: the push could not be checked"}}
		}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	_, stderr, err := g.run(client, nil, "push", srv.URL+"/repo.git", "HEAD:refs/heads/agent/t/x")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("git push: %v, want a non-zero exit\n%s", err, stderr)
	}
	for _, want := range []string{"remote: moat: the push could not be checked", "remote unpack failed: moat: the push could not be checked"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}
