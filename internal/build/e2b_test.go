package build

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

const testHash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestE2BTranslate: each E2B step type becomes the Step the engine runs; start and ready
// commands and the last workdir become labels; image names get Docker Hub's defaults.
func TestE2BTranslate(t *testing.T) {
	for _, c := range []struct {
		name  string
		json  string
		from  string
		steps []Step
	}{
		{"runCmd", `{"fromTemplate":"host","steps":[{"type":"RUN","args":["echo hi && ls"]}]}`,
			"host", []Step{{Kind: Run, Shell: "echo hi && ls"}}},
		{"runCmd as user", `{"fromTemplate":"host","steps":[{"type":"RUN","args":["apt-get update","root"]}]}`,
			"host", []Step{{Kind: Run, Shell: "apt-get update", RunAs: "root"}}},
		{"copy with owner and mode", `{"fromTemplate":"base","steps":[{"type":"COPY","args":["app/","/srv/app","user","0640"],"filesHash":"` + testHash + `"}]}`,
			"base", []Step{{Kind: Copy, Sources: []string{testHash + "/app/"}, Dest: "/srv/app", Chown: "user", Mode: 0o640}}},
		{"copy plain", `{"fromTemplate":"base","steps":[{"type":"COPY","args":["f.txt","/x/","",""],"filesHash":"` + testHash + `"}]}`,
			"base", []Step{{Kind: Copy, Sources: []string{testHash + "/f.txt"}, Dest: "/x/"}}},
		{"setEnvs", `{"fromTemplate":"t","steps":[{"type":"ENV","args":["A","1","B","two words"]}]}`,
			"t", []Step{{Kind: Env, Vars: []Var{{"A", "1"}, {"B", "two words"}}}}},
		{"setWorkdir setUser and start", `{"fromTemplate":"t","startCmd":"npm start","readyCmd":"ss -l","steps":[{"type":"WORKDIR","args":["/app"]},{"type":"USER","args":["user"]}]}`,
			"t", []Step{{Kind: Workdir, Path: "/app"}, {Kind: User, Path: "user"},
				{Kind: Label, Vars: []Var{{LabelE2BStart, "npm start"}, {LabelE2BWorkdir, "/app"}, {LabelE2BReady, "ss -l"}}}}},
		{"copy of an absolute source stays in the upload", `{"fromTemplate":"b","steps":[{"type":"COPY","args":["/etc/passwd","/p"],"filesHash":"` + testHash + `"}]}`,
			"b", []Step{{Kind: Copy, Sources: []string{testHash + "/etc/passwd"}, Dest: "/p"}}},
		{"fromDebianImage", `{"fromImage":"debian:stable","steps":[]}`, "docker.io/library/debian:stable", nil},
		{"fromImage namespaced", `{"fromImage":"oven/bun","steps":[]}`, "docker.io/oven/bun:latest", nil},
		{"fromImage registry", `{"fromImage":"ghcr.io/o/i:1","steps":[]}`, "ghcr.io/o/i:1", nil},
		{"fromBaseImage", `{"fromImage":"e2bdev/base","steps":[]}`, "docker.io/e2bdev/base:latest", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmpl, err := ParseE2BTemplate([]byte(c.json))
			if err != nil {
				t.Fatal(err)
			}
			from, steps, err := tmpl.Translate()
			if err != nil {
				t.Fatal(err)
			}
			if from != c.from {
				t.Errorf("from %q, want %q", from, c.from)
			}
			if !reflect.DeepEqual(steps, c.steps) {
				t.Errorf("steps\n got %+v\nwant %+v", steps, c.steps)
			}
		})
	}
}

// TestE2BRefused: what moat refuses, by name, with ErrInvalidArgument.
func TestE2BRefused(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"steps":[]}`, "exactly one of fromImage and fromTemplate"},
		{`{"fromImage":"a","fromTemplate":"b"}`, "exactly one"},
		{`{"fromImage":"a","fromImageRegistry":{"type":"aws"}}`, "registry credentials"},
		{`{"fromTemplate":"a","steps":[{"type":"ADD","args":["x"]}]}`, "unknown step type"},
		{`{"fromTemplate":"a","steps":[{"type":"RUN","args":[]}]}`, "RUN takes"},
		{`{"fromTemplate":"a","steps":[{"type":"COPY","args":["a","/b"]}]}`, "filesHash"},
		{`{"fromTemplate":"a","steps":[{"type":"COPY","args":["../etc","/b"],"filesHash":"` + testHash + `"}]}`, "outside"},
		{`{"fromTemplate":"a","steps":[{"type":"COPY","args":["*.txt","/b"],"filesHash":"` + testHash + `"}]}`, "glob"},
		{`{"fromTemplate":"a","steps":[{"type":"COPY","args":["a","/b","","999"],"filesHash":"` + testHash + `"}]}`, "mode"},
		{`{"fromTemplate":"a","steps":[{"type":"COPY","args":["a","/b"],"filesHash":"../../x"}]}`, "filesHash"},
		{`{"fromTemplate":"a","steps":[{"type":"ENV","args":["A"]}]}`, "pairs"},
		{`{"fromTemplate":"a","steps":[{"type":"ENV","args":["A=B","1"]}]}`, "ENV key"},
		{`{"fromTemplate":"a","steps":[{"type":"WORKDIR","args":[]}]}`, "one argument"},
		{`{"fromTemplate":"a","steps":[{"type":"RUN","args":["a\u0000b"]}]}`, "NUL"},
		{`not json`, "template"},
	} {
		_, err := ParseE2BTemplate([]byte(c.json))
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an invalid-argument error mentioning %q", c.json, err, c.want)
		}
	}
}

// FuzzParseE2BTemplate: the parser never panics, errors are ErrInvalidArgument, and every
// COPY it accepts reads only below its own upload's directory.
func FuzzParseE2BTemplate(f *testing.F) {
	for _, s := range []string{
		`{"fromTemplate":"host","steps":[{"type":"RUN","args":["echo hi","root"]}]}`,
		`{"fromImage":"debian:stable","startCmd":"x","readyCmd":"y","steps":[{"type":"COPY","args":["app/","/app","user","0755"],"filesHash":"` + testHash + `"}]}`,
		`{"fromTemplate":"t","steps":[{"type":"ENV","args":["A","1"]},{"type":"WORKDIR","args":["w"]},{"type":"USER","args":["u"]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tmpl, err := ParseE2BTemplate(data)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error without ErrInvalidArgument: %v", err)
			}
			return
		}
		from, steps, err := tmpl.Translate()
		if err != nil {
			t.Fatalf("parsed but does not translate: %v", err)
		}
		if from == "" {
			t.Fatal("no base")
		}
		i := 0
		for _, s := range tmpl.Steps {
			st := steps[i]
			i++
			if s.Type != "COPY" {
				continue
			}
			src := strings.TrimSuffix(st.Sources[0], "/")
			if src != s.FilesHash && !strings.HasPrefix(src, s.FilesHash+"/") || strings.Contains(src, "..") {
				t.Fatalf("COPY source %q leaves its upload %s", st.Sources[0], s.FilesHash)
			}
			if st.Mode&^fs.ModePerm != 0 {
				t.Fatalf("mode %v has more than permissions", st.Mode)
			}
		}
	})
}

// TestStepsFile: the YAML steps make what the SDK's builder methods make (the same
// commands for aptInstall, npmInstall, gitClone and the waitFor… checks), and COPY reads
// the local context.
func TestStepsFile(t *testing.T) {
	tmpl, err := ParseStepsFile([]byte(`
fromTemplate: host
cpuCount: 2
memoryMB: 1024
steps:
  - copy: {src: app/, dest: /srv/app, user: user, mode: "0640"}
  - run: echo hi
  - run: {cmd: id, user: root}
  - apt: [curl, "jq"]
  - npm: {packages: [left-pad], g: true}
  - git: {url: "https://example.invalid/r.git", path: /src, branch: main, depth: 1}
  - env: {B: "2", A: "1"}
  - workdir: /srv/app
  - user: user
start:
  cmd: python3 -m http.server 8000
  ready: {port: 8000}
`))
	if err != nil {
		t.Fatal(err)
	}
	from, steps, err := tmpl.Translate()
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Kind: Copy, Sources: []string{"app/"}, Dest: "/srv/app", Chown: "user", Mode: 0o640},
		{Kind: Run, Shell: "echo hi"},
		{Kind: Run, Shell: "id", RunAs: "root"},
		{Kind: Run, Shell: "apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y curl jq", RunAs: "root"},
		{Kind: Run, Shell: "npm install -g left-pad", RunAs: "root"},
		{Kind: Run, Shell: "git clone https://example.invalid/r.git --branch main --single-branch --depth 1 /src"},
		{Kind: Env, Vars: []Var{{"A", "1"}, {"B", "2"}}},
		{Kind: Workdir, Path: "/srv/app"},
		{Kind: User, Path: "user"},
		{Kind: Label, Vars: []Var{{LabelE2BStart, "python3 -m http.server 8000"}, {LabelE2BWorkdir, "/srv/app"},
			{LabelE2BReady, `[ -n "$(ss -Htuln sport = :8000)" ]`}, {LabelE2BCPU, "2"}, {LabelE2BMemory, "1024"}}},
	}
	if from != "host" || !reflect.DeepEqual(steps, want) {
		t.Errorf("from %q steps\n got %+v\nwant %+v", from, steps, want)
	}
	for _, c := range []struct{ yaml, want string }{
		{"fromTemplate: a\nsteps:\n  - {run: x, apt: [y]}\n", "exactly one"},
		{"fromTemplate: a\nsteps:\n  - bogus: 1\n", "bogus"},
		{"fromTemplate: a\nsteps:\n  - copy: {src: ../x, dest: /y}\n", "outside"},
		{"steps:\n  - run: x\n", "exactly one of fromImage and fromTemplate"},
		{"fromTemplate: a\nstart: {}\n", "start needs"},
	} {
		if _, err := ParseStepsFile([]byte(c.yaml)); err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error mentioning %q", c.yaml, err, c.want)
		}
	}
}
