package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// buildFile builds template name from Dockerfile text df with context dir cx, returning
// the report and the progress lines.
func (e *env) buildFile(name, df, cx string) (*v1.BuildReport, []string, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var lines []string
	var mu sync.Mutex
	_, rep, err := e.c.BuildDockerfile(ctx, v1.DockerfileRequest{Name: name, Dockerfile: df, Context: cx, File: "Dockerfile"}, func(s string) {
		mu.Lock()
		lines = append(lines, s)
		mu.Unlock()
	})
	return rep, lines, err
}

const testDockerfile = `# a Dockerfile of the supported subset
FROM host
ARG WHO=user
ENV GREETING="hi there" \
    OTHER=2
RUN mkdir -p /opt/data && echo "$GREETING" > /opt/data/greet && echo gone > /opt/data/gone
RUN ["/bin/sh", "-c", "rm /opt/data/gone && echo exec-form > /opt/data/exec"]
WORKDIR /srv/app
COPY --chown=${WHO}:${WHO} app/ ./
COPY top.txt /opt/data/
USER user
RUN id -un > /srv/app/whoami && pwd > /srv/app/pwd
`

// TestTemplateDockerfile builds a template from a Dockerfile (FROM host, RUN in both
// forms writing and deleting files, COPY with --chown, ENV, ARG, WORKDIR, USER), starts a
// sandbox from it and finds all of it there; a rebuild after editing the last RUN reuses
// every earlier layer (by key, and the layer directories are the same ones).
func TestTemplateDockerfile(t *testing.T) {
	e := newEnv(t)
	cx := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(cx, "app", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(cx, "app", "hello.txt"), []byte("hello from the context\n"), 0o644))
	must(os.WriteFile(filepath.Join(cx, "app", "sub", "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755))
	must(os.Symlink("hello.txt", filepath.Join(cx, "app", "link")))
	must(os.WriteFile(filepath.Join(cx, "top.txt"), []byte("top\n"), 0o600))

	rep, lines, err := e.buildFile("df1", testDockerfile, cx)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, strings.Join(lines, "\n"))
	}
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, "step 1/9: ARG WHO=user") || !strings.Contains(joined, "step 9/9: RUN id -un") {
		t.Errorf("progress lacks the step lines:\n%s", joined)
	}
	if rep.Built != 6 || rep.Cached != 0 {
		t.Errorf("first build: built %d, cached %d, want 6 and 0: %+v", rep.Built, rep.Cached, rep)
	}

	sb := e.create(v1.CreateSandboxRequest{Template: "df1"})
	for line, want := range map[string]string{
		"cat /opt/data/greet":                           "hi there",
		"cat /opt/data/exec":                            "exec-form",
		"test -e /opt/data/gone && echo yes || echo no": "no",
		"stat -c '%U:%G %a' /srv/app/hello.txt":         "user:user 644",
		"stat -c '%U:%G %a' /srv/app/sub/run.sh":        "user:user 755",
		"/srv/app/sub/run.sh":                           "ran",
		"readlink /srv/app/link":                        "hello.txt",
		"stat -c '%U:%G %a' /opt/data/top.txt":          "root:root 600",
		"cat /srv/app/whoami":                           "user",
		"cat /srv/app/pwd":                              "/srv/app",
		"echo $GREETING/$OTHER":                         "hi there/2",
		"id -un":                                        "user",
	} {
		if got := strings.TrimSpace(e.mustSh(sb.ID, line)); got != want {
			t.Errorf("%s: got %q, want %q", line, got, want)
		}
	}

	// Only the step's own changes are in its layer: not what every sandbox start writes.
	for _, junk := range []string{".moat", "etc/moat", "etc"} {
		if m, _ := filepath.Glob(filepath.Join(e.dataDir, "layers", "bld-*", junk)); len(m) > 0 {
			t.Errorf("build layers hold %s: %v", junk, m)
		}
	}
	// Editing the last RUN: every layer before it comes from the cache, unchanged.
	layersDir := filepath.Join(e.dataDir, "layers")
	mtimes := map[string]time.Time{}
	for _, s := range rep.Steps {
		if s.Layer == "" {
			continue
		}
		fi, err := os.Stat(filepath.Join(layersDir, "bld-"+s.Layer+"-p0"))
		if err != nil {
			t.Fatalf("layer of step %d: %v", s.N, err)
		}
		mtimes[s.Layer] = fi.ModTime()
	}
	edited := strings.Replace(testDockerfile, "pwd > /srv/app/pwd", "echo edited > /srv/app/pwd", 1)
	rep2, lines, err := e.buildFile("df1", edited, cx)
	if err != nil {
		t.Fatalf("rebuild: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if rep2.Built != 1 || rep2.Cached != 5 {
		t.Errorf("rebuild: built %d, cached %d, want 1 and 5\n%s", rep2.Built, rep2.Cached, strings.Join(lines, "\n"))
	}
	for i, s := range rep2.Steps {
		last := i == len(rep2.Steps)-1
		if s.Layer == "" {
			continue
		}
		if last {
			if s.Cached || s.Layer == rep.Steps[i].Layer {
				t.Errorf("edited step %d: cached %v, layer %s (before: %s)", s.N, s.Cached, s.Layer, rep.Steps[i].Layer)
			}
			continue
		}
		if !s.Cached || s.Layer != rep.Steps[i].Layer {
			t.Errorf("step %d: cached %v, layer %s, want the cached %s", s.N, s.Cached, s.Layer, rep.Steps[i].Layer)
		}
		fi, err := os.Stat(filepath.Join(layersDir, "bld-"+s.Layer+"-p0"))
		if err != nil || !fi.ModTime().Equal(mtimes[s.Layer]) {
			t.Errorf("layer of step %d was made again (%v)", s.N, err)
		}
	}
	// The replaced template's last layer is collected (the running sandbox keeps its mount).
	sb2 := e.create(v1.CreateSandboxRequest{Template: "df1"})
	if got := strings.TrimSpace(e.mustSh(sb2.ID, "cat /srv/app/pwd")); got != "edited" {
		t.Errorf("rebuilt template: pwd file %q", got)
	}
	if got := strings.TrimSpace(e.mustSh(sb.ID, "cat /srv/app/pwd")); got != "/srv/app" {
		t.Errorf("the sandbox of the first build: pwd file %q", got)
	}
}

// TestTemplateDockerfileRefusals: a COPY out of the context (by "..", or through a
// symbolic link in it), an unsupported instruction (with its line), a failing RUN; none
// leaves a template.
func TestTemplateDockerfileRefusals(t *testing.T) {
	e := newEnv(t)
	cx := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(cx, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cx, "ok.txt"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ df, want string }{
		{"FROM host\nCOPY ../secret /x\n", "outside the build context"},
		{"FROM host\nCOPY etc/hostname /x\n", "COPY source etc/hostname"},
		{"FROM host\nCOPY /../../etc/passwd /x\n", "outside the build context"},
		{"FROM host\n\nEXPOSE 80\n", "line 3: EXPOSE is not supported"},
		{"FROM host\nCOPY ok.txt /x\nRUN exit 3\n", "exited with code 3"},
		{"FROM nosuchtemplate\nRUN true\n", "not found"},
	} {
		_, lines, err := e.buildFile("bad", c.df, cx)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error with %q\n%s", c.df, err, c.want, strings.Join(lines, "\n"))
		}
	}
	list, err := e.c.Templates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range list {
		if tm.Name == "bad" {
			t.Errorf("a failed build left template %+v", tm)
		}
	}
	e.awaitNoSandboxes()
}

// TestTemplateOneBuildPerName: a second build of a name waits while the first runs, says
// so, and proceeds when the first is done (the first's RUN step waits for a file the test
// creates in its build sandbox).
func TestTemplateOneBuildPerName(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	type build struct {
		lines chan string
		done  chan error
	}
	start := func(df string) build {
		b := build{lines: make(chan string, 100), done: make(chan error, 1)}
		go func() {
			_, _, err := e.c.BuildDockerfile(ctx, v1.DockerfileRequest{Name: "same", Dockerfile: df}, func(s string) { b.lines <- s })
			b.done <- err
		}()
		return b
	}
	await := func(b build, what string) {
		t.Helper()
		for {
			select {
			case l := <-b.lines:
				if strings.Contains(l, what) {
					return
				}
			case err := <-b.done:
				t.Fatalf("build ended (%v) before %q", err, what)
			}
		}
	}
	first := start("FROM host\nRUN while [ ! -e /tmp/go ]; do sleep 0.05; done; echo first > /which\n")
	await(first, "step 1/1: RUN")
	second := start("FROM host\nRUN echo second > /which\n")
	await(second, "waiting for another build of template same")
	select {
	case err := <-second.done:
		t.Fatalf("the second build ended while the first ran: %v", err)
	case l := <-second.lines:
		t.Fatalf("the second build went on while the first ran: %q", l)
	default:
	}
	// Let the first build's step finish. Its step line comes before its build sandbox is
	// made: wait for the sandbox (up to 20 s).
	var bsb string
	var sbs []v1.Sandbox
	for deadline := time.Now().Add(20 * time.Second); bsb == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if sbs, err = e.c.List(ctx); err != nil {
			t.Fatal(err)
		}
		for _, sb := range sbs {
			if sb.Metadata["moat.build"] == "same" {
				bsb = sb.ID
			}
		}
	}
	if bsb == "" {
		t.Fatalf("no build sandbox in %+v", sbs)
	}
	e.mustSh(bsb, "touch /tmp/go")
	if err := <-first.done; err != nil {
		t.Fatalf("first build: %v", err)
	}
	if err := <-second.done; err != nil {
		t.Fatalf("second build: %v", err)
	}
	sb := e.create(v1.CreateSandboxRequest{Template: "same"})
	if got := strings.TrimSpace(e.mustSh(sb.ID, "cat /which")); got != "second" {
		t.Errorf("the template is the first build's, not the second's: %q", got)
	}
}

// TestTemplateRemove: rm refuses while a sandbox uses the template and names it; --force
// removes it, the sandbox keeps running; layers another template shares stay usable;
// host and unknown names are refused.
func TestTemplateRemove(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	df := "FROM host\nRUN echo shared > /shared\n"
	for _, n := range []string{"rma", "rmb"} {
		if _, lines, err := e.buildFile(n, df, ""); err != nil {
			t.Fatalf("build %s: %v\n%s", n, err, strings.Join(lines, "\n"))
		}
	}
	sb := e.create(v1.CreateSandboxRequest{Template: "rma"})
	_, err := e.c.RemoveTemplate(ctx, "rma", false)
	var se *sdk.Error
	if !errors.As(err, &se) || se.Status != 409 || !strings.Contains(se.Message, "sandbox "+sb.ID) {
		t.Fatalf("rm of a used template: %v, want 409 naming sandbox %s", err, sb.ID)
	}
	r, err := e.c.RemoveTemplate(ctx, "rma", true)
	if err != nil || len(r.Users) != 1 || r.Users[0] != "sandbox "+sb.ID {
		t.Fatalf("rm --force: %+v, %v", r, err)
	}
	if got := strings.TrimSpace(e.mustSh(sb.ID, "cat /shared")); got != "shared" {
		t.Errorf("the sandbox of the removed template: %q", got)
	}
	list, _ := e.c.Templates(ctx)
	for _, tm := range list {
		if tm.Name == "rma" {
			t.Error("rma is still listed")
		}
	}
	// rmb shares the layer: still usable.
	sb2 := e.create(v1.CreateSandboxRequest{Template: "rmb"})
	if got := strings.TrimSpace(e.mustSh(sb2.ID, "cat /shared")); got != "shared" {
		t.Errorf("template sharing the layers: %q", got)
	}
	if _, err := e.c.RemoveTemplate(ctx, "host", true); err == nil || !strings.Contains(err.Error(), "built in") {
		t.Errorf("rm host: %v", err)
	}
	if _, err := e.c.RemoveTemplate(ctx, "nosuch", false); !isNotFound(err) {
		t.Errorf("rm nosuch: %v", err)
	}
	if err := e.c.Delete(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	// A template built FROM rmb keeps working after rmb is removed: the layers it shares stay.
	if _, lines, err := e.buildFile("rmc", "FROM rmb\nRUN echo extra > /extra\n", ""); err != nil {
		t.Fatalf("build FROM rmb: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if _, err := e.c.RemoveTemplate(ctx, "rmb", false); err != nil {
		t.Errorf("rm of an unused template: %v", err)
	}
	sb3 := e.create(v1.CreateSandboxRequest{Template: "rmc"})
	if got := strings.TrimSpace(e.mustSh(sb3.ID, "cat /shared /extra")); got != "shared\nextra" {
		t.Errorf("template built FROM the removed one: %q", got)
	}
	if err := e.c.Delete(ctx, sb3.ID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := e.c.Get(ctx, sb3.ID); isNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox of rmc is not deleted")
		}
	}
	if _, err := e.c.RemoveTemplate(ctx, "rmc", false); err != nil {
		t.Errorf("rm rmc: %v", err)
	}
	// Nothing uses the build layers any more; those not mounted are gone (the sandbox of
	// the force-removed rma still runs on its layer).
	left, _ := filepath.Glob(filepath.Join(e.dataDir, "layers", "bld-*"))
	if len(left) != 2 || !strings.Contains(left[0], "-p0") {
		t.Errorf("build layers left after removing every template: %v", left)
	}
}

// TestTemplateWithoutBash: a template with only sh (the host's dash and its libraries)
// runs shell lines sent as /bin/bash -l -c (moat exec, E2B's commands.run) with sh.
func TestTemplateWithoutBash(t *testing.T) {
	e := newEnv(t)
	importHostPrograms(t, e, "nobash", []string{"sh", "cat", "echo", "id"})
	for _, rt := range runtimesUnderTest(t) {
		sb := e.create(v1.CreateSandboxRequest{Template: "nobash", Runtime: rt})
		if got := e.mustSh(sb.ID, `echo "shell:$0"; id -un`); got != "shell:/bin/sh\nuser\n" {
			t.Errorf("%s: bash -l -c in a template without bash: %q", rt, got)
		}
		var out bytes.Buffer
		code, err := e.c.Exec(context.Background(), sb.ID, sdk.ExecRequest{Cmd: "cat", Args: []string{"/etc/passwd"}, Stdout: &out})
		if err != nil || code != 0 || !strings.Contains(out.String(), "user:x:1000") {
			t.Errorf("%s: direct exec: %d %v %q", rt, code, err, out.String())
		}
	}
}

// importHostPrograms imports, as template tmpl, an image of the named host programs with
// their libraries (no bash unless named) and a passwd with root and user.
func importHostPrograms(t *testing.T, e *env, tmpl string, progs []string) {
	t.Helper()
	im := newHostImage(t)
	for _, b := range progs {
		p := "/bin/" + b
		if b != "sh" {
			var err error
			if p, err = exec.LookPath(b); err != nil {
				t.Skipf("no %s on this host", b)
			}
		}
		im.program(p)
	}
	if im.seen["bin/bash"] || im.seen["usr/bin/bash"] {
		t.Fatal("the image has bash")
	}
	im.homes("/bin/sh")
	importLayerImage(t, e, tmpl, "nobash", im.layer())
}

// awaitNoSandboxes waits until no sandbox is listed (deletions finish in the background).
func (e *env) awaitNoSandboxes() {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		sbs, err := e.c.List(context.Background())
		if err == nil && len(sbs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("sandboxes left: %+v (%v)", sbs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTemplateBuildInterrupted: a daemon stopped during a build leaves, once started
// again, no build sandbox, no template and no half-made layer.
func TestTemplateBuildInterrupted(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, _, err := e.c.BuildDockerfile(ctx, v1.DockerfileRequest{Name: "cut", Dockerfile: "FROM host\nRUN echo one > /one\nRUN while :; do sleep 0.05; done\n"}, func(s string) {
			if strings.Contains(s, "step 2/2: RUN") {
				once.Do(func() { close(running) })
			}
		})
		done <- err
	}()
	select {
	case <-running:
	case err := <-done:
		t.Fatalf("build ended: %v", err)
	}
	// The build sandbox of step 2 exists once its exec runs: wait for it.
	deadline := time.Now().Add(time.Minute)
	for {
		sbs, _ := e.c.List(context.Background())
		if len(sbs) == 1 && sbs[0].State == "running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running build sandbox: %+v", sbs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.stop()
	cancel()
	<-done
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), nil)
	e.awaitNoSandboxes()
	list, err := e.c.Templates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tm := range list {
		if tm.Name == "cut" {
			t.Errorf("an interrupted build left template %+v", tm)
		}
	}
	if tmp, _ := filepath.Glob(filepath.Join(e.dataDir, "layers", ".tmp-*")); len(tmp) > 0 {
		t.Errorf("half-made layers: %v", tmp)
	}
}

// TestTemplateRemoveWarmAndSnapshot: rm refuses while a warm pool or a snapshot uses the
// template, naming them; --force deletes the pool's idle sandboxes and keeps the snapshot.
func TestTemplateRemoveWarmAndSnapshot(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.Warm = map[string]int{"runc:pooled": 1} })
	ctx := context.Background()
	if _, lines, err := e.buildFile("pooled", "FROM host\nRUN echo p > /p\n", ""); err != nil {
		t.Fatalf("build: %v\n%s", err, strings.Join(lines, "\n"))
	}
	for deadline := time.Now().Add(2 * time.Minute); e.poolStat("runc", "pooled").Ready < 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not fill: %+v", e.poolStat("runc", "pooled"))
		}
	}
	if _, lines, err := e.buildFile("snapped", "FROM host\nRUN echo s > /s\n", ""); err != nil {
		t.Fatalf("build: %v\n%s", err, strings.Join(lines, "\n"))
	}
	sb := e.create(v1.CreateSandboxRequest{Template: "snapped"})
	snap, err := e.c.Snapshot(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, user string }{{"pooled", "warm pool runc:pooled"}, {"snapped", "snapshot " + snap.ID}} {
		_, err := e.c.RemoveTemplate(ctx, c.name, false)
		var se *sdk.Error
		if !errors.As(err, &se) || se.Status != 409 || !strings.Contains(se.Message, c.user) {
			t.Errorf("rm %s: %v, want 409 naming %q", c.name, err, c.user)
		}
	}
	r, err := e.c.RemoveTemplate(ctx, "pooled", true)
	if err != nil || !slices.Contains(r.Users, "warm pool runc:pooled") {
		t.Fatalf("rm --force pooled: %+v %v", r, err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		sbs, _ := e.d.Manager.List(ctx)
		warm := 0
		for _, s := range sbs {
			if s.Template == "pooled" && s.State != sandbox.StateDeleting {
				warm++
			}
		}
		if warm == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm sandboxes of the removed template are left: %+v", sbs)
		}
	}
	if _, err := e.c.RemoveTemplate(ctx, "snapped", true); err != nil {
		t.Fatal(err)
	}
	snaps, err := e.c.Snapshots(ctx)
	if err != nil || !slices.ContainsFunc(snaps, func(s v1.Snapshot) bool { return s.ID == snap.ID }) {
		t.Errorf("the snapshot of a force-removed template is gone: %+v %v", snaps, err)
	}
}

// TestTemplateAdminOverTCP: with an API key, template removal, Dockerfile builds and
// imports (all of which touch the daemon's host or every key's templates) are refused
// (403); listing works.
func TestTemplateAdminOverTCP(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) { c.Listen = addr })
	ctx := context.Background()
	key, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	remote := sdk.NewHTTP("http://"+addr, key.Key)
	if _, err := remote.Templates(ctx); err != nil {
		t.Fatalf("template ls over TCP: %v", err)
	}
	_, err = remote.RemoveTemplate(ctx, "host", true)
	assertPermissionDenied(t, err, "unix socket only")
	_, _, err = remote.BuildDockerfile(ctx, v1.DockerfileRequest{Name: "x", Dockerfile: "FROM host\n", Context: "/etc"}, nil)
	assertPermissionDenied(t, err, "unix socket only")
	_, err = remote.TemplateOp(ctx, "import", v1.TemplateRequest{Name: "x", Path: "/etc/hostname"}, nil)
	if err == nil || !strings.Contains(err.Error(), "unix socket only") {
		t.Errorf("import over TCP: %v", err)
	}
}
