package apiserver

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/moatdev/moat/api/envd/process"
)

func TestExecSummary(t *testing.T) {
	for _, tc := range []struct {
		body, user, want string
	}{
		{`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"TOKEN":"sekrit"}}}`, "agent",
			`"/bin/bash" "-l" "-c" "echo hi" user=agent`},
		{`{"process":{"cmd":"ls","cwd":"/work"}}`, "", `"ls" cwd="/work"`},
		{"\x00\x00\x00\x00\x05\x0a\x03abc", "", "(10-byte request)"},
		{string(envelope(t, &process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "id"}, Envs: map[string]string{"K": "sekrit"}}})), "u",
			`"/bin/sh" "-c" "id" user=u`},
		{`{"process":{}}`, "root", "(14-byte request) user=root"},
		{`{"process":{"cmd":"a\nb"}}`, "", `"a\nb"`},
	} {
		if got := execSummary([]byte(tc.body), tc.user); got != tc.want {
			t.Errorf("execSummary(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestPathSandbox(t *testing.T) {
	for p, want := range map[string]string{
		"/v1/sandboxes/abc/policy": "abc", "/v1/sandboxes/abc": "abc", "/sandboxes/x1/timeout": "x1",
		"/v1/sandboxes": "", "/v1/apikeys/k": "", "/v1/secrets/S": "",
	} {
		if got := pathSandbox(p); got != want {
			t.Errorf("pathSandbox(%q) = %q, want %q", p, got, want)
		}
	}
}

// FuzzExecSummary: any request body (bytes from a client) gives a bounded, single-line
// summary that never carries the environment.
func FuzzExecSummary(f *testing.F) {
	f.Add([]byte(`{"process":{"cmd":"/bin/bash","args":["-c","x"],"envs":{"K":"envvalue"}}}`), "u")
	f.Add([]byte("\x00\x00"), "")
	f.Add(envelope(f, &process.StartRequest{Process: &process.ProcessConfig{Cmd: "ls", Args: []string{"-l"}, Envs: map[string]string{"K": "envvalue"}}}), "")
	f.Fuzz(func(t *testing.T, body []byte, user string) {
		if len(user) > 64 || strings.ContainsAny(user, "\n") {
			return
		}
		got := execSummary(body, user)
		if len(got) > 2048+len("…") {
			t.Fatalf("summary of %d bytes", len(got))
		}
		if strings.Contains(got, "\n") {
			t.Fatalf("multi-line summary %q", got)
		}
		var req struct {
			Process struct {
				Cmd  string            `json:"cmd"`
				Args []string          `json:"args"`
				Cwd  string            `json:"cwd"`
				Envs map[string]string `json:"envs"`
			} `json:"process"`
		}
		if json.Unmarshal(body, &req) != nil {
			return
		}
		shown := req.Process.Cmd + strings.Join(req.Process.Args, "") + req.Process.Cwd + user
		for _, v := range req.Process.Envs {
			if len(v) >= 4 && !strings.HasPrefix(got, "(") && utf8.ValidString(v) && !strings.ContainsAny(v, "\\\"") && !strings.Contains(shown, v) && strings.Contains(got, v) {
				t.Fatalf("summary %q carries the environment value %q", got, v)
			}
		}
	})
}

// envelope is a Connect streaming request: flags, length, the protobuf message.
func envelope(t testing.TB, m *process.StartRequest) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
}

func streamOf(t testing.TB, events ...*process.ProcessEvent) []byte {
	var out []byte
	for _, ev := range events {
		b, err := proto.Marshal(&process.StartResponse{Event: ev})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, 0, byte(len(b)>>24), byte(len(b)>>16), byte(len(b)>>8), byte(len(b)))
		out = append(out, b...)
	}
	return append(out, 2, 0, 0, 0, 2, '{', '}') // the end-of-stream envelope
}

// TestEnvelopeScanner: the start and end events are found however the stream is split,
// output larger than maxScanned is skipped, a stream without an end says so.
func TestEnvelopeScanner(t *testing.T) {
	start := &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 42}}}
	data := func(n int) *process.ProcessEvent {
		return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: make([]byte, n)}}}}
	}
	end := &process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: -7, Exited: true}}}
	full := streamOf(t, start, data(10), data(maxScanned+100), end)
	for _, piece := range []int{1, 3, 5, 7, 64, len(full)} {
		var s envelopeScanner
		for b := full; len(b) > 0; {
			k := min(piece, len(b))
			s.feed(b[:k])
			b = b[k:]
		}
		if s.pid != 42 || !s.ended || s.exit != -7 {
			t.Errorf("pieces of %d: pid %d ended %v exit %d", piece, s.pid, s.ended, s.exit)
		}
	}
	// Compressed messages (flag 1, gzip) are decoded too.
	b, _ := proto.Marshal(&process.StartResponse{Event: end})
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b)
	zw.Close()
	var sz envelopeScanner
	sz.feed(append([]byte{1, 0, 0, 0, byte(z.Len())}, z.Bytes()...))
	if !sz.ended || sz.exit != -7 {
		t.Errorf("compressed end event not read: %+v", sz)
	}
	var s envelopeScanner
	s.feed(streamOf(t, start, data(5)))
	if s.ended || s.pid != 42 {
		t.Errorf("no end: %+v", s)
	}
}

// FuzzEnvelopeScanner: any stream from a sandbox, fed in any pieces, neither panics nor
// holds more than maxScanned bytes.
func FuzzEnvelopeScanner(f *testing.F) {
	f.Add(streamOf(f, &process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: 3}}}), uint8(3))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 1, 2}, uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, piece uint8) {
		var s envelopeScanner
		p := int(piece) + 1
		for len(b) > 0 {
			k := min(p, len(b))
			s.feed(b[:k])
			b = b[k:]
			if len(s.msg) > maxScanned || len(s.hdr) > 5 {
				t.Fatalf("scanner holds %d+%d bytes", len(s.msg), len(s.hdr))
			}
		}
	})
}
