package daemon_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

func secs(n int64) *int64 { return &n }

// noFreeze makes idle sandboxes stop at once, without the freeze stage.
func noFreeze(c *daemon.Config) { c.IdleFreeze = -1 }

// waitIdleStopped waits for sandbox id to be stopped for idleness and returns its record.
func (e *env) waitIdleStopped(id string, within time.Duration) *v1.Sandbox {
	e.t.Helper()
	var got *v1.Sandbox
	testutil.WaitFor(e.t, within, "the sandbox to be stopped for idleness", func() bool {
		got, _ = e.c.Get(context.Background(), id)
		return got != nil && got.State == "stopped" && got.StopReason == "idle"
	})
	return got
}

// stateFor checks that sandbox id stays running for d (polled every 200 ms).
func (e *env) staysRunning(id string, d time.Duration, why string) {
	e.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		got, err := e.c.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if got.State != "running" {
			e.t.Fatalf("%s: the sandbox became %s (%s)", why, got.State, got.StopReason)
		}
	}
}

func eventKinds(t *testing.T, c *sdk.Client, id, kind string) int {
	t.Helper()
	evs, err := c.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// waitEventKinds waits (up to 10 s) until sandbox id has want events of kind, and returns
// how many it has then: the daemon writes the state first and the event after it.
func waitEventKinds(t *testing.T, c *sdk.Client, id, kind string, want int) int {
	t.Helper()
	n := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n = eventKinds(t, c, id, kind); n >= want {
			break
		}
	}
	return n
}

// TestIdleStopResume: a sandbox with a 2 s idle period is not stopped while an exec stream
// is open (a 5 s sleep) nor while a background process burns CPU; with neither, it is
// stopped (stop_reason idle, an idle_stop event, its drive kept); an exec, a file read and
// four concurrent execs each start it again and get the right answer with no error (one
// start for the four); a sandbox a person stopped does not resume on a call.
func TestIdleStopResume(t *testing.T) {
	e := newEnvWith(t, noFreeze)
	ctx := context.Background()
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt, IdleSeconds: secs(2)})
			if sb.IdleSeconds != 2 || sb.DeleteAfterSeconds != 7*24*3600 || sb.IdleStopAt == nil || sb.DeleteAt == nil {
				t.Fatalf("create answered lifecycle %+v, want idle 2 s, delete after 7 days", sb.Lifecycle)
			}
			home := strings.TrimSpace(e.mustSh(sb.ID, `echo kept > ~/idle.txt && echo $HOME`))

			// An open exec stream keeps it (the exec uses no CPU).
			done := make(chan string, 1)
			go func() {
				var out bytes.Buffer
				_, err := e.c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", "sleep 5; echo slept"}, Stdout: &out})
				done <- fmt.Sprint(out.String(), err)
			}()
			e.staysRunning(sb.ID, 4500*time.Millisecond, "an exec stream was open")
			if r := <-done; r != "slept\n<nil>" {
				t.Fatalf("the long exec: %q", r)
			}

			// A background process burning CPU keeps it (no stream open).
			e.mustSh(sb.ID, `nohup bash -c 'while :; do :; done' >/dev/null 2>&1 & echo $! > ~/burn.pid`)
			e.staysRunning(sb.ID, 5*time.Second, "a process was burning CPU")
			e.mustSh(sb.ID, `kill $(cat ~/burn.pid)`)

			got := e.waitIdleStopped(sb.ID, 15*time.Second)
			if got.IdleStopAt != nil || got.Error != "" {
				t.Errorf("idle-stopped record: %+v (error %q)", got.Lifecycle, got.Error)
			}
			if waitEventKinds(t, e.c, sb.ID, "idle_stop", 1) != 1 {
				t.Errorf("want one idle_stop event")
			}

			// Resume by exec.
			if out := e.mustSh(sb.ID, `cat ~/idle.txt`); out != "kept\n" {
				t.Fatalf("exec after the idle stop: %q", out)
			}
			if got, _ := e.c.Get(ctx, sb.ID); got.State != "running" {
				t.Fatalf("after the exec: %s", got.State)
			}

			// Resume by a file call.
			e.waitIdleStopped(sb.ID, 15*time.Second)
			f, err := e.c.ReadFile(ctx, sb.ID, home+"/idle.txt", "")
			if err != nil {
				t.Fatalf("file read after the idle stop: %v", err)
			}
			data, _ := io.ReadAll(f)
			f.Close()
			if string(data) != "kept\n" {
				t.Fatalf("file read after the idle stop: %q", data)
			}

			// Four at once: one start, four answers.
			e.waitIdleStopped(sb.ID, 15*time.Second)
			before := eventKinds(t, e.c, sb.ID, "auto_resume")
			var wg sync.WaitGroup
			outs := make([]result, 4)
			for i := range outs {
				wg.Add(1)
				go func() { defer wg.Done(); outs[i] = e.sh(sb.ID, "", "cat ~/idle.txt") }()
			}
			wg.Wait()
			for i, r := range outs {
				if r.code != 0 || r.stdout != "kept\n" {
					t.Errorf("concurrent exec %d: %+v", i, r)
				}
			}
			if n := eventKinds(t, e.c, sb.ID, "auto_resume") - before; n != 1 {
				t.Errorf("%d resumes for four concurrent calls, want 1", n)
			}

			// Stopped by a person: a call does not start it.
			if _, err := e.c.Stop(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if _, err := e.c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/true", Stdout: &out}); err == nil {
				t.Errorf("exec in a sandbox a person stopped succeeded")
			}
			if got, _ := e.c.Get(ctx, sb.ID); got.State != "stopped" || got.StopReason != "" {
				t.Errorf("after an exec in a stopped sandbox: %s (%q)", got.State, got.StopReason)
			}
		})
	}
}

// TestIdleOff: --idle 0 turns idle stop off (no idle_stop_at, still running after 4 s).
func TestIdleOff(t *testing.T) {
	e := newEnv(t)
	sb := e.create(v1.CreateSandboxRequest{Runtime: "runc", IdleSeconds: secs(0)})
	if sb.IdleSeconds != 0 || sb.IdleStopAt != nil {
		t.Fatalf("lifecycle %+v", sb.Lifecycle)
	}
	e.staysRunning(sb.ID, 4*time.Second, "idle stop is off")
}

// TestDeleteUnusedArchive: a sandbox unused for its 3 s unused period is deleted (record,
// drive), and its archive under <data>/archives holds what it wrote: the file's content,
// and a symlink to a host path stored as a symlink (not followed).
func TestDeleteUnusedArchive(t *testing.T) {
	e := newEnv(t)
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt, IdleSeconds: secs(0), DeleteAfterSeconds: secs(3), Archive: true})
			want := "archived " + sb.ID + " " + shortID()
			e.mustSh(sb.ID, `printf '%s' '`+want+`' > ~/work.txt && ln -s /etc/shadow ~/shadow-link && mkdir -p ~/d && echo x > ~/d/y`)
			testutil.WaitFor(t, 20*time.Second, "the unused sandbox to be deleted", func() bool {
				_, err := e.c.Get(context.Background(), sb.ID)
				return isNotFound(err)
			})
			e.d.Manager.Wait()
			if _, err := os.Stat(filepath.Join(e.dataDir, "drives", sb.ID+".img")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the drive remains: %v", err)
			}
			path := filepath.Join(e.dataDir, "archives", sb.ID+".tar.zst")
			files := readArchive(t, path)
			var found, link bool
			for name, h := range files {
				switch {
				case strings.HasPrefix(name, "root/upper/") && strings.HasSuffix(name, "/work.txt"):
					found = true
					if h.body != want {
						t.Errorf("%s in the archive: %q, want %q", name, h.body, want)
					}
				case strings.HasSuffix(name, "/shadow-link"):
					link = true
					if h.hdr.Typeflag != tar.TypeSymlink || h.hdr.Linkname != "/etc/shadow" || h.body != "" {
						t.Errorf("the symlink was archived as %+v with %d bytes", h.hdr, len(h.body))
					}
				}
			}
			if !found || !link {
				t.Fatalf("the archive lacks the file or the link: %v", keys(files))
			}
			list, err := e.c.Archives(context.Background())
			if err != nil || !slices.ContainsFunc(list, func(a v1.Archive) bool { return a.ID == sb.ID && a.Path == path && a.Bytes > 0 }) {
				t.Errorf("moat archive ls: %+v %v, want %s", list, err, path)
			}
			entries, _ := os.ReadDir(filepath.Join(e.dataDir, "archives"))
			for _, en := range entries {
				if !strings.HasSuffix(en.Name(), ".tar.zst") {
					t.Errorf("archives directory holds %s: a temporary file or mount point was left", en.Name())
				}
			}
			if err := e.c.DeleteArchive(context.Background(), sb.ID); err != nil {
				t.Fatalf("moat archive rm: %v", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the removed archive remains: %v", err)
			}
			if err := e.c.DeleteArchive(context.Background(), sb.ID); !isNotFound(err) {
				t.Errorf("removing it again: %v, want not found", err)
			}
		})
	}
}

// TestArchiveKeep: with --archive-keep, the daemon's sweep removes archives older than
// that period, keeps newer ones, and records the removal in the sandbox's events.
func TestArchiveKeep(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.ArchiveKeep, c.SweepInterval = time.Hour, time.Second })
	dir := filepath.Join(e.dataDir, "archives")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old, recent := filepath.Join(dir, "sb-0000000000a1.tar.zst"), filepath.Join(dir, "sb-0000000000a2.tar.zst")
	for _, p := range []string{old, recent} {
		if err := os.WriteFile(p, []byte("archive"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the old archive to expire", func() bool {
		_, err := os.Stat(old)
		return errors.Is(err, os.ErrNotExist)
	})
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("the recent archive was removed: %v", err)
	}
	// The sweep records the removal just after it removes the file.
	testutil.WaitFor(t, 10*time.Second, "the archive_removed event", func() bool {
		evs, err := e.d.Store.Events(context.Background(), "sb-0000000000a1")
		return err == nil && slices.ContainsFunc(evs, func(ev store.Event) bool { return ev.Kind == "archive_removed" })
	})
}

type archived struct {
	hdr  *tar.Header
	body string
}

func readArchive(t *testing.T, path string) map[string]archived {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the archive: %v", err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	out := map[string]archived{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = archived{h, string(b)}
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestIdleRestart: a daemon restart keeps idle-stopped sandboxes' settings and state (runc
// and runsc), and the next exec starts each again with its files.
func TestIdleRestart(t *testing.T) {
	e := newEnvWith(t, noFreeze)
	var ids []string
	for _, rt := range runtimesUnderTest(t) {
		sb := e.create(v1.CreateSandboxRequest{Runtime: rt, IdleSeconds: secs(2), DeleteAfterSeconds: secs(3600), Archive: true})
		e.mustSh(sb.ID, `echo before-restart > ~/r.txt`)
		ids = append(ids, sb.ID)
	}
	for _, id := range ids {
		e.waitIdleStopped(id, 15*time.Second)
	}
	e.stop()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), noFreeze)
	for _, id := range ids {
		got, err := e.c.Get(context.Background(), id)
		if err != nil || got.State != "stopped" || got.StopReason != "idle" || got.IdleSeconds != 2 || got.DeleteAfterSeconds != 3600 || !got.Archive {
			t.Fatalf("after a restart: %+v %v", got, err)
		}
		if out := e.mustSh(id, `cat ~/r.txt`); out != "before-restart\n" {
			t.Fatalf("%s: exec after a restart: %q", got.Runtime, out)
		}
	}
}

// TestIdleResumeE2B: an idle-stopped sandbox is started again by a file read through the
// E2B envd gateway (E2b-Sandbox-Id, X-Access-Token: what the e2b SDK sends) and by E2B's
// connect (201, then running), each answering as from a running sandbox.
func TestIdleResumeE2B(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) { c.Listen, c.IdleFreeze = addr, -1 })
	ctx := context.Background()
	key, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := sdk.NewHTTP("http://"+addr, key.Key)
	if _, err := a.Archives(ctx); err == nil {
		t.Errorf("an API key listed the drive archives (files of every owner's deleted sandboxes)")
	}
	if err := a.DeleteArchive(ctx, "sb-000000000001"); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("an API key removing a drive archive: %v, want refused", err)
	}
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb, err := a.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, MemoryBytes: 512 << 20, DiskBytes: 256 << 20, IdleSeconds: secs(2)})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := e.d.Store.Get(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			home := strings.TrimSpace(e.mustSh(sb.ID, `echo via-gateway > ~/g.txt && echo $HOME`))
			e.waitIdleStopped(sb.ID, 15*time.Second)

			// Without its access token, a request does not wake it.
			bad, _ := http.NewRequest("GET", "http://"+addr+"/files?path="+url.QueryEscape(home+"/g.txt"), nil)
			bad.Header.Set("E2b-Sandbox-Id", sb.ID)
			bad.Header.Set("X-Access-Token", strings.Repeat("0", len(rec.AccessToken)))
			if resp, err := http.DefaultClient.Do(bad); err != nil || resp.StatusCode != 401 {
				t.Fatalf("a gateway request with a wrong token: %v %v, want 401", resp, err)
			} else {
				resp.Body.Close()
			}
			if got, _ := e.c.Get(ctx, sb.ID); got.State != "stopped" {
				t.Fatalf("a request with a wrong token resumed the sandbox: %s", got.State)
			}

			req, _ := http.NewRequest("GET", "http://"+addr+"/files?path="+url.QueryEscape(home+"/g.txt"), nil)
			req.Header.Set("E2b-Sandbox-Id", sb.ID)
			req.Header.Set("X-Access-Token", rec.AccessToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "via-gateway\n" {
				t.Fatalf("file read through the E2B gateway after the idle stop: %d %q", resp.StatusCode, body)
			}

			e.waitIdleStopped(sb.ID, 15*time.Second)
			req, _ = http.NewRequest("POST", "http://"+addr+"/sandboxes/"+sb.ID+"/connect", strings.NewReader(`{"timeout":60}`))
			req.Header.Set("X-API-KEY", key.Key)
			req.Header.Set("Content-Type", "application/json")
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 201 || !strings.Contains(string(body), rec.AccessToken) {
				t.Fatalf("E2B connect after the idle stop: %d %s", resp.StatusCode, body)
			}
			if out := e.mustSh(sb.ID, `cat ~/g.txt`); out != "via-gateway\n" {
				t.Fatalf("after connect: %q", out)
			}
		})
	}
}

// TestIdleFreezeThenStop: with a 3 s freeze period, an idle sandbox is first frozen
// (paused, stop_reason idle): an exec thaws it and a background process started before
// is still there; idle again, it is frozen, then stopped 3 s later (its processes gone),
// and an exec starts it again with its files.
func TestIdleFreezeThenStop(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.IdleFreeze = 3 * time.Second })
	ctx := context.Background()
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt, IdleSeconds: secs(2)})
			e.mustSh(sb.ID, `echo frozen-or-not > ~/f.txt; nohup sleep 1000 >/dev/null 2>&1 &`)
			// Whether the sleep runs (by command line: a new start reuses small pids).
			const sleeping = `n=0; for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "sleep 1000 "*) n=$((n+1));; esac; done; echo sleeping=$n; `
			frozen := func() {
				t.Helper()
				testutil.WaitFor(t, 15*time.Second, "the sandbox to be frozen for idleness", func() bool {
					got, _ := e.c.Get(ctx, sb.ID)
					return got != nil && got.State == "paused" && got.StopReason == "idle"
				})
			}
			frozen()
			if waitEventKinds(t, e.c, sb.ID, "idle_freeze", 1) != 1 {
				t.Errorf("want one idle_freeze event")
			}
			if out := e.mustSh(sb.ID, sleeping+`cat ~/f.txt`); out != "sleeping=1\nfrozen-or-not\n" {
				t.Fatalf("exec after the idle freeze: %q (the background sleep must survive a thaw)", out)
			}
			frozen()
			e.waitIdleStopped(sb.ID, 15*time.Second)
			if out := e.mustSh(sb.ID, sleeping+`cat ~/f.txt`); out != "sleeping=0\nfrozen-or-not\n" {
				t.Fatalf("exec after the idle stop: %q", out)
			}
		})
	}
}
