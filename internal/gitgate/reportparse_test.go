package gitgate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseReportRoundTrip(t *testing.T) {
	reps := []Report{
		{Results: []RefResult{{Ref: "refs/heads/agent/x/work"}}},
		{Results: []RefResult{{Ref: "refs/heads/a"}, {Ref: "refs/heads/b", Err: "failed to update ref"}}},
		{UnpackErr: "index-pack abnormal exit", Results: []RefResult{{Ref: "refs/heads/a", Err: "unpacker error"}}},
		{Results: []RefResult{{Ref: "refs/heads/a"}}, Messages: []string{"moat: hello", "second"}},
	}
	for _, caps := range []string{"report-status", "report-status side-band-64k", "report-status-v2 side-band"} {
		c := Capabilities(strings.Fields(caps))
		for _, rep := range reps {
			var b bytes.Buffer
			if err := WriteReport(&b, c, rep); err != nil {
				t.Fatal(err)
			}
			sb := c.Has("side-band-64k") || c.Has("side-band")
			got, err := ParseReport(&b, sb)
			if err != nil {
				t.Fatalf("%s %+v: %v", caps, rep, err)
			}
			want := rep
			if !sb {
				want.Messages = nil
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: got %+v, want %+v", caps, got, want)
			}
			if got.Failed() != (rep.UnpackErr != "" || len(rep.Results) > 1 && rep.Results[1].Err != "" || len(rep.Results) > 0 && rep.Results[0].Err != "") {
				t.Errorf("%s %+v: Failed() = %v", caps, rep, got.Failed())
			}
		}
	}
}

// pkts frames lines as pkt-lines ("" is a flush).
func pkts(lines ...string) []byte {
	var b bytes.Buffer
	w := NewPktWriter(&b)
	for _, l := range lines {
		if l == "" {
			_ = w.Flush()
		} else {
			_ = w.WriteString(l)
		}
	}
	return b.Bytes()
}

func TestParseReportReal(t *testing.T) {
	// What git's receive-pack answers when the ref moved meanwhile (report-status-v2
	// with an option line, side-band-64k).
	status := pkts("unpack ok\n", "ng refs/heads/agent/x/work failed to lock\n", "ok refs/heads/agent/x/other\n", "option refname refs/heads/agent/x/other\n", "")
	var b bytes.Buffer
	w := NewPktWriter(&b)
	_ = w.Write(append([]byte{2}, "remote: progress\n"...))
	_ = w.Write(append([]byte{1}, status...))
	_ = w.Flush()
	rep, err := ParseReport(&b, true)
	if err != nil {
		t.Fatal(err)
	}
	want := Report{Results: []RefResult{{Ref: "refs/heads/agent/x/work", Err: "failed to lock"}, {Ref: "refs/heads/agent/x/other"}}, Messages: []string{"remote: progress"}}
	if !reflect.DeepEqual(rep, want) || !rep.Failed() {
		t.Fatalf("got %+v", rep)
	}
}

func TestParseReportBad(t *testing.T) {
	for name, tc := range map[string]struct {
		in       []byte
		sideband bool
		eof      bool
	}{
		"empty":           {in: nil, eof: true},
		"no flush":        {in: pkts("unpack ok\n"), eof: true},
		"no unpack":       {in: pkts("ok refs/heads/a\n", "")},
		"only flush":      {in: pkts("")},
		"garbage line":    {in: pkts("unpack ok\n", "hello\n", "")},
		"ok without ref":  {in: pkts("unpack ok\n", "ok \n", "")},
		"bad header":      {in: []byte("zzzz")},
		"band 3":          {in: pkts("\x03fatal: out of memory\n", ""), sideband: true},
		"band 9":          {in: pkts("\x09x", ""), sideband: true},
		"empty band line": {in: append([]byte("0004"), pkts("")...), sideband: true},
		"sideband no end": {in: pkts("\x01" + string(pkts("unpack ok\n", ""))), sideband: true, eof: true},
	} {
		_, err := ParseReport(bytes.NewReader(tc.in), tc.sideband)
		switch {
		case err == nil:
			t.Errorf("%s: no error", name)
		case tc.eof && !errors.Is(err, io.ErrUnexpectedEOF):
			t.Errorf("%s: %v, want unexpected EOF", name, err)
		case !tc.eof && !strings.Contains(err.Error(), "invalid argument"):
			t.Errorf("%s: %v, want invalid argument", name, err)
		}
	}
}

func FuzzParseReport(f *testing.F) {
	f.Add(pkts("unpack ok\n", "ok refs/heads/a\n", ""), false)
	f.Add(pkts("\x01"+string(pkts("unpack ok\n", "ng refs/heads/a failed to lock\n", "")), "\x02hi\n", ""), true)
	f.Add(pkts("unpack error\n", "ng refs/heads/a\n", "option refname x\n", ""), false)
	f.Fuzz(func(t *testing.T, in []byte, sideband bool) {
		rep, err := ParseReport(bytes.NewReader(in), sideband)
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "invalid argument") {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		if len(rep.Messages) > maxReportMessages || len(rep.Results) > maxReportRefs {
			t.Fatalf("unbounded: %d messages, %d results", len(rep.Messages), len(rep.Results))
		}
		check := func(s string) {
			if len(s) > MaxReasonLen || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
				t.Fatalf("unsafe string %q", s)
			}
		}
		check(rep.UnpackErr)
		for _, m := range rep.Messages {
			check(m)
		}
		for _, r := range rep.Results {
			check(r.Ref)
			check(r.Err)
			if r.Ref == "" {
				t.Fatal("a result without a ref")
			}
		}
		// What it read, written again (with report-status), reads the same.
		var b bytes.Buffer
		if err := WriteReport(&b, Capabilities{"report-status"}, rep); err != nil {
			t.Fatal(err)
		}
		again, err := ParseReport(&b, false)
		if err != nil {
			t.Fatalf("rewritten report: %v", err)
		}
		rep.Messages = nil
		if !reflect.DeepEqual(again, rep) {
			t.Fatalf("round trip: %+v != %+v", again, rep)
		}
	})
}

// TestRealGitReportParsed: git's own receive-pack answers (git http-backend, a real git
// push with side-band-64k and report-status) parse: a push that landed is all ok; the
// same request sent again, after its ref moved, is "ng" for the ref (what applying a held
// push whose branch moved gets). With -write-seeds they become FuzzParseReport seeds.
func TestRealGitReportParsed(t *testing.T) {
	g := newGitEnv(t)
	root := t.TempDir()
	g.must(root, "init", "-q", "--bare", "srv.git")
	g.must(filepath.Join(root, "srv.git"), "config", "http.receivepack", "true")
	rec := newRecordingBackend(t, g, root)
	var answers [][]byte
	var last *http.Request
	var lastBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			rec.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		last, lastBody = r.Clone(context.Background()), body
		r.Body = io.NopCloser(bytes.NewReader(body))
		cw := httptest.NewRecorder()
		rec.ServeHTTP(cw, r)
		answers = append(answers, cw.Body.Bytes())
		for k, v := range cw.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(cw.Code)
		_, _ = w.Write(cw.Body.Bytes())
	}))
	defer srv.Close()
	client := t.TempDir()
	g.must(client, "init", "-q", "-b", "main")
	g.commit(client, "README", "base\n")
	const ref = "refs/heads/agent/t/work"
	g.must(client, "push", "-q", srv.URL+"/srv.git", "HEAD:"+ref)
	g.commit(client, "README", "more\n")
	g.must(client, "push", "-q", srv.URL+"/srv.git", "HEAD:"+ref)
	// The second push again, by hand: its old id is no longer the ref's.
	g.commit(client, "README", "again\n")
	g.must(client, "push", "-q", srv.URL+"/srv.git", "HEAD:"+ref)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+last.URL.Path, bytes.NewReader(lastBody))
	req.Header = last.Header.Clone()
	g.must(filepath.Join(root, "srv.git"), "update-ref", ref, ref+"~2")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(answers) != 4 {
		t.Fatalf("%d answers", len(answers))
	}
	for i, a := range answers {
		rep, err := ParseReport(bytes.NewReader(a), len(a) > 4 && a[4] <= 3)
		if err != nil {
			t.Fatalf("answer %d %q: %v", i, a, err)
		}
		if len(rep.Results) != 1 || rep.Results[0].Ref != ref || rep.UnpackErr != "" || rep.Failed() != (i == 3) {
			t.Errorf("answer %d: %+v", i, rep)
		}
		if *writeSeeds {
			dir := filepath.Join("testdata", "fuzz", "FuzzParseReport")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", a, len(a) > 4 && a[4] <= 3)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("real-answer-%d", i)), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("the ref moved: %+q", answers[3])
}
