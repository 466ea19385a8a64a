package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/sdk"
)

// TestCLITemplateBuildRm: template build --file/--context/--json, a sandbox of the built
// template, exec of an argv without a shell, and template rm refused while used, then
// forced.
func TestCLITemplateBuildRm(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	cx := filepath.Join(dir, "ctx")
	if err := os.MkdirAll(cx, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cx, "note.txt"), []byte("from the context\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM host\nLABEL org.example.team=\"tools team\"\nRUN echo built > /opt/built\nCOPY --chown=user note.txt /opt/\nCMD [\"sleep\", \"1\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, e, code := c.run("", "template", "build", "tb", "--file", df, "--context", cx, "--json")
	if code != 0 {
		t.Fatalf("template build: %d %s", code, e)
	}
	var res struct {
		Template v1.Template    `json:"template"`
		Build    v1.BuildReport `json:"build"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Template.Name != "tb" || res.Build.Built != 2 || len(res.Build.Steps) != 4 ||
		res.Template.Labels["org.example.team"] != "tools team" || !slices.Equal(res.Template.Cmd, []string{"sleep", "1"}) {
		t.Fatalf("--json: %v %s", err, out)
	}
	if !strings.Contains(e, "step 2/4: RUN echo built > /opt/built") || !strings.Contains(e, "step 3/4: COPY --chown=user note.txt /opt/") {
		t.Errorf("progress: %s", e)
	}
	if _, e, code := c.run("", "template", "build", "bad", "--file", df, "--mirror", "http://x"); code == 0 || !strings.Contains(e, "--mirror is for build debian") {
		t.Errorf("--mirror with --file: %d %s", code, e)
	}

	id, e, code := c.run("", "create", "--template", "tb")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("create: %s", e)
	}
	if out, e, _ := c.run("", "exec", id, "--", "cat /opt/built /opt/note.txt; stat -c %U /opt/note.txt"); out != "built\nfrom the context\nuser\n" {
		t.Errorf("built template: %q %s", out, e)
	}
	// Several arguments: the program and its arguments as they are, no shell in between.
	if out, e, _ := c.run("", "exec", id, "--", "printf", "%s|", "a b", "c'd", "$HOME", "*"); out != "a b|c'd|$HOME|*|" {
		t.Errorf("argv exec: %q %s", out, e)
	}

	_, e, code = c.run("", "template", "rm", "tb")
	if code == 0 || !strings.Contains(e, "sandbox "+id) || !strings.Contains(e, "--force") {
		t.Errorf("rm of a used template: %d %s", code, e)
	}
	out, e, code = c.run("", "template", "rm", "--force", "--json", "tb")
	var rm v1.TemplateRemoval
	if code != 0 || json.Unmarshal([]byte(out), &rm) != nil || !slices.Equal(rm.Users, []string{"sandbox " + id}) {
		t.Errorf("rm --force: %d %q %s", code, out, e)
	}
	if out, _, _ := c.run("", "template", "ls"); strings.Contains(out, "tb ") {
		t.Errorf("tb still listed:\n%s", out)
	}
	if _, e, code := c.run("", "template", "rm", "nosuch"); code == 0 || !strings.Contains(e, "not found") {
		t.Errorf("rm nosuch: %d %s", code, e)
	}
	if _, e, code := c.run("", "rm", id); code != 0 {
		t.Errorf("rm sandbox: %s", e)
	}
}

// TestCLITemplateBuildKilled: `moat serve` killed (SIGKILL) during a build leaves, once
// started again, no build sandbox, no template and no half-made layer.
func TestCLITemplateBuildKilled(t *testing.T) {
	c := newCLI(t)
	socket := filepath.Join(t.TempDir(), "moat.sock")
	args := append(slices.Clone(c.args), "--socket", socket, "serve", "--warm", "0")
	serve := func() *exec.Cmd {
		cmd := exec.Command(c.bin, args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cl := sdk.NewUnix(socket)
		for deadline := time.Now().Add(time.Minute); cl.Ping(context.Background()) != nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				_ = cmd.Wait()
				t.Fatal("moat serve did not come up")
			}
		}
		return cmd
	}
	first := serve()
	cl := sdk.NewUnix(socket)
	ctx := context.Background()
	running := make(chan struct{})
	var once sync.Once
	go func() {
		_, _, _ = cl.BuildDockerfile(ctx, v1.DockerfileRequest{Name: "cut", Dockerfile: "FROM host\nRUN echo one > /one\nRUN while :; do sleep 0.05; done\n"}, func(s string) {
			if strings.Contains(s, "step 2/2: RUN") {
				once.Do(func() { close(running) })
			}
		})
	}()
	<-running
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		sbs, _ := cl.List(ctx)
		if len(sbs) == 1 && sbs[0].State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no running build sandbox")
		}
	}
	_ = first.Process.Kill()
	_ = first.Wait()
	second := serve()
	defer func() {
		if list, err := cl.List(ctx); err == nil {
			for _, sb := range list {
				_ = cl.Delete(ctx, sb.ID)
			}
		}
		_ = second.Process.Signal(syscall.SIGTERM)
		_ = second.Wait()
	}()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		sbs, err := cl.List(ctx)
		if err == nil && len(sbs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the build sandbox is left after the restart: %+v", sbs)
		}
	}
	list, err := cl.Templates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range list {
		if tm.Name == "cut" {
			t.Errorf("a killed build left template %+v", tm)
		}
	}
}

// TestCLITemplateBuildFromImage: FROM an image reference pulls it (from a registry on
// loopback) as a template of its own, reused by the next build; a RUN in the exec form
// works in an image without /bin/sh; the image's config (user root, PATH) carries over.
func TestCLITemplateBuildFromImage(t *testing.T) {
	c := newCLI(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/moat/tiny:1"
	pushTinyImage(t, ref)
	df := filepath.Join(t.TempDir(), "Dockerfile")
	if err := os.WriteFile(df, []byte("FROM "+ref+"\nRUN [\"/bin/bash\", \"-c\", \"echo built-on-tiny > /root/built\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, e, code := c.run("", "template", "build", "ontiny", "--file", df)
	if code != 0 || !strings.Contains(e, "pulling it as template tiny-1") {
		t.Fatalf("build: %d %s", code, e)
	}
	out, e, code := c.run("", "run", "--template", "ontiny", "--", "echo $(</root/built) $UID")
	if code != 0 || out != "built-on-tiny 0\n" {
		t.Errorf("run in the built template: %d %q %s", code, out, e)
	}
	_, e, code = c.run("", "template", "build", "ontiny2", "--file", df)
	if code != 0 || !strings.Contains(e, "using template tiny-1") || !strings.Contains(e, "using cached layer") {
		t.Errorf("second build: %d %s", code, e)
	}
	if out, e, code := c.run("", "template", "build", "--quiet", "ontiny3", "--file", df); code != 0 || e != "" || !strings.Contains(out, "ontiny3") {
		t.Errorf("quiet build: %d stdout %q stderr %q (want no progress)", code, out, e)
	}
}
