package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	v1 "github.com/moatdev/moat/api/v1"
)

const testSteps = `fromTemplate: host
steps:
  - copy: {src: app/, dest: /srv/app, user: user, mode: "0640"}
  - run: {cmd: "echo built-by-$(id -un) > /srv/app/built", user: root}
  - env: {GREETING: hello-steps}
  - workdir: /srv/app
  - run: echo LAST > /srv/app/last
start:
  cmd: python3 -m http.server 8124
  ready: {port: 8124}
`

// TestCLITemplateSteps: template build --steps (the E2B builder's steps as YAML) with a
// context: progress, the report, the files, owner, mode and env in a sandbox of it, the
// start command recorded; a rebuild after editing only the last step takes every earlier
// layer from the cache; template ls shows where it came from.
func TestCLITemplateSteps(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	cx := filepath.Join(dir, "ctx")
	if err := os.MkdirAll(filepath.Join(cx, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cx, "app", "index.html"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "steps.yaml")
	build := func(steps string) (v1.Template, v1.BuildReport, string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(steps), 0o644); err != nil {
			t.Fatal(err)
		}
		out, e, code := c.run("", "template", "build", "ts", "--steps", file, "--context", cx, "--json")
		if code != 0 {
			t.Fatalf("template build --steps: %d %s", code, e)
		}
		var res struct {
			Template v1.Template    `json:"template"`
			Build    v1.BuildReport `json:"build"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("--json: %v %s", err, out)
		}
		return res.Template, res.Build, e
	}
	tmpl, rep, progress := build(testSteps)
	if rep.Built != 4 || rep.Cached != 0 || tmpl.Labels["moat.e2b.start"] != "python3 -m http.server 8124" {
		t.Errorf("first build: %+v %+v", rep, tmpl)
	}
	if !strings.Contains(progress, "step 2/6: RUN echo built-by-$(id -un) > /srv/app/built (as root)") {
		t.Errorf("progress: %s", progress)
	}
	_, rep, progress = build(strings.Replace(testSteps, "echo LAST", "echo EDITED", 1))
	if rep.Built != 1 || rep.Cached != 3 || strings.Count(progress, "using cached layer") != 3 {
		t.Errorf("rebuild after editing the last step: %+v\n%s", rep, progress)
	}
	id, e, code := c.run("", "create", "--template", "ts")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	defer c.run("", "rm", id)
	want := "hi\nbuilt-by-root\nEDITED\nuser 640\nhello-steps\n"
	if out, e, _ := c.run("", "exec", id, "--", "cat /srv/app/index.html /srv/app/built /srv/app/last; stat -c '%U %a' /srv/app/index.html; echo $GREETING"); out != want {
		t.Errorf("sandbox of the template: %q (want %q) %s", out, want, e)
	}
	if out, _, _ := c.run("", "template", "ls"); !strings.Contains(out, "e2b steps "+file) {
		t.Errorf("template ls:\n%s", out)
	}
	if _, e, code := c.run("", "template", "build", "bad", "--steps", file, "--file", file); code == 0 || !strings.Contains(e, "do not go with it") {
		t.Errorf("--steps with --file: %d %s", code, e)
	}
}

// TestCLITemplateStepsFromImage: a steps file's fromImage is pulled as moat template pull
// does it (here from a registry on loopback), then its steps run on it.
func TestCLITemplateStepsFromImage(t *testing.T) {
	c := newCLI(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/moat/tiny:1"
	pushTinyImage(t, ref)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "note"), []byte("copied\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "steps.yaml")
	steps := "fromImage: " + ref + "\nsteps:\n  - copy: {src: note, dest: /opt/note, mode: \"0600\"}\n  - env: {FROM_STEPS: yes-it-is}\n"
	if err := os.WriteFile(file, []byte(steps), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := c.run("", "template", "build", "stepstiny", "--steps", file, "--context", dir); code != 0 || !strings.Contains(e, "pulling it as template tiny-1") {
		t.Fatalf("build: %d %s", code, e)
	}
	out, e, code := c.run("", "run", "--template", "stepstiny", "--", "echo $(</opt/note) $FROM_STEPS")
	if code != 0 || out != "copied yes-it-is\n" {
		t.Errorf("run in the built template: %d %q %s", code, out, e)
	}
}
