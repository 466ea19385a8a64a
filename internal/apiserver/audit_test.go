package apiserver

import (
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
