package main

import (
	"context"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/testutil"
)

// serveCLI starts the real `moat serve` (no warm pool) with the binary at bin (the
// usual one when ""), and returns a cli that talks to it over its socket. The daemon is
// stopped with SIGTERM at the end of the test.
func serveCLI(t *testing.T, bin string) *cli {
	t.Helper()
	testutil.RequiresRoot(t)
	if bin == "" {
		bin = filepath.Join(testutil.Binaries(t), "moat")
	}
	run, err := os.MkdirTemp("/run", "moat-clitest-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(run, "moat.sock")
	cmd := exec.Command(bin, "--data", t.TempDir(), "--run-dir", run, "--socket", sock,
		"--id-base", strconv.FormatUint(uint64(testutil.IDBase(t)), 10), "--default-disk", "1G",
		"serve", "--warm", "0", "--io-bps", "0", "--io-iops", "0")
	logf, err := os.Create(filepath.Join(t.TempDir(), "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("daemon log:\n%s", b)
		}
		os.RemoveAll(run)
	})
	// Asked over the socket itself: a CLI command run before the daemon is up would start
	// an in-process daemon with the default data directory.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	testutil.WaitFor(t, 60*time.Second, "moat serve to answer", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("moat serve ended: %v", err)
		default:
		}
		resp, err := hc.Get("http://moat/v1/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return &cli{t: t, bin: bin, args: []string{"--socket", sock}, external: true}
}

// statPy prints "PATH MODE OWNER" for each argument (stat(1) fails under runsc 2022: it
// has no statx).
const statPy = `python3 -c 'import os,stat,pwd,sys; [print(p, stat.filemode(os.lstat(p).st_mode), pwd.getpwuid(os.lstat(p).st_uid).pw_name) for p in sys.argv[1:]]'`

// treeOf describes every entry under dir: type and permission bits, symlink targets and
// file contents, keyed by the path relative to dir.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// makeHostTree makes the tree the copy tests send: modes 0750/0600/0700, symlinks
// relative, absolute (to the host's /etc/passwd) and dangling, an empty directory, a
// FIFO (left out).
func makeHostTree(t *testing.T, src string) {
	t.Helper()
	for _, step := range []error{
		os.MkdirAll(filepath.Join(src, "sub/empty"), 0o755),
		os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o750),
		os.WriteFile(filepath.Join(src, "sub/secret"), []byte("s3cret"), 0o600),
		os.Chmod(filepath.Join(src, "sub"), 0o700),
		os.Symlink("sub/secret", filepath.Join(src, "rel")),
		os.Symlink("/etc/passwd", filepath.Join(src, "abs")),
		os.Symlink("nowhere", filepath.Join(src, "dangling")),
		syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
}

// TestCLICopyTree: `moat cp` of a directory into a sandbox and back out again, with runc
// and runsc, keeps contents, permission bits and symlinks (as links: the absolute one still
// names /etc/passwd and nothing of the host's /etc/passwd is copied); files inside belong to
// the sandbox's user; FIFOs are left out with a warning; a copy into an existing directory
// lands under the source's name; a single file keeps its mode; a symlink the sandbox
// points at / is copied out as a link, and the host's / is not read through it.
func TestCLICopyTree(t *testing.T) {
	c := serveCLI(t, "")
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			c.t = t
			id, errOut, code := c.run("", "create", "--runtime", rt, "--memory", "256M", "--disk", "256M")
			id = strings.TrimSpace(id)
			if code != 0 {
				t.Fatalf("create: %s", errOut)
			}
			defer c.run("", "rm", id)
			base := t.TempDir()
			src := filepath.Join(base, "src")
			makeHostTree(t, src)
			want := treeOf(t, src)
			delete(want, "fifo")

			out, errOut, code := c.run("", "cp", "--json", src, id+":proj")
			if code != 0 || !strings.Contains(out, `"entries": 8`) || !strings.Contains(errOut, "1 device(s), FIFO(s) or socket(s) left out") {
				t.Fatalf("cp in: exit %d, %s %s", code, out, errOut)
			}
			inside, errOut, code := c.run("", "exec", id, "--", "cd proj && "+statPy+" . run.sh sub sub/secret sub/empty && readlink rel abs dangling && ./run.sh && test ! -e fifo")
			wantInside := "" +
				". drwxr-xr-x user\nrun.sh -rwxr-x--- user\nsub drwx------ user\nsub/secret -rw------- user\nsub/empty drwxr-xr-x user\n" +
				"sub/secret\n/etc/passwd\nnowhere\nran\n"
			if code != 0 || inside != wantInside {
				t.Errorf("inside the sandbox (exit %d, %s):\n%s\nwant:\n%s", code, errOut, inside, wantInside)
			}

			// Out again, to a new destination, and into an existing directory.
			if _, e, code := c.run("", "exec", id, "--", "ln -s / proj/rootlink"); code != 0 {
				t.Fatal(e)
			}
			want["rootlink"] = "Lrwxrwxrwx -> /"
			dst := filepath.Join(base, "back")
			if _, errOut, code := c.run("", "cp", id+":proj", dst); code != 0 {
				t.Fatalf("cp out: %s", errOut)
			}
			got := treeOf(t, dst)
			for rel, w := range want {
				if got[rel] != w {
					t.Errorf("copied out, %s is %q, want %q", rel, got[rel], w)
				}
			}
			if len(got) != len(want) {
				t.Errorf("copied out %d entries, want %d: %v", len(got), len(want), got)
			}
			into := filepath.Join(base, "into")
			if err := os.Mkdir(into, 0o755); err != nil {
				t.Fatal(err)
			}
			if _, errOut, code := c.run("", "cp", id+":proj", into); code != 0 {
				t.Fatalf("cp out into a directory: %s", errOut)
			}
			if got := treeOf(t, filepath.Join(into, "proj")); got["sub/secret"] != want["sub/secret"] {
				t.Errorf("cp into a directory: %v", got)
			}
			if _, errOut, code := c.run("", "cp", id+":proj/run.sh", filepath.Join(base, "one")); code != 0 {
				t.Fatalf("cp out a file: %s", errOut)
			}
			if fi, err := os.Stat(filepath.Join(base, "one")); err != nil || fi.Mode() != 0o750 {
				t.Errorf("single file copied out: %v, %v; want mode 0750", fi, err)
			}
			// A file into a directory named with a trailing slash, made when missing.
			if _, errOut, code := c.run("", "cp", filepath.Join(src, "run.sh"), id+":newdir/"); code != 0 {
				t.Fatalf("cp in to newdir/: %s", errOut)
			}
			if o, e, code := c.run("", "exec", id, "--", statPy+" newdir/run.sh"); code != 0 || o != "newdir/run.sh -rwxr-x--- user\n" {
				t.Errorf("newdir/run.sh: %q %s", o, e)
			}
			// Item 10: nothing is compressed unless the client asks. A plain GET over the
			// socket (no Accept-Encoding; Go's transport would add gzip and hide it, so
			// it is turned off) gets the bytes as they are, with their length.
			hc := &http.Client{Transport: &http.Transport{DisableCompression: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", c.args[1])
			}}}
			for _, u := range []string{"/envd/files?path=proj/run.sh", "/envd/moat/tar?path=proj"} {
				resp, err := hc.Get("http://moat/v1/sandboxes/" + id + u)
				if err != nil {
					t.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" || n == 0 {
					t.Errorf("GET %s: %s, Content-Encoding %q, %d bytes", u, resp.Status, resp.Header.Get("Content-Encoding"), n)
				}
				if strings.HasPrefix(u, "/envd/files") && resp.ContentLength != n {
					t.Errorf("GET %s: Content-Length %d, %d bytes", u, resp.ContentLength, n)
				}
			}
			ents, _ := os.ReadDir(base)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".moat-cp-") {
					t.Errorf("left %s behind", e.Name())
				}
			}
		})
	}
}

// TestCLICopyHostileTar: with a moat-init that sends tar streams meant to write outside
// the destination — a ".." entry, an absolute name, a symlink to a host directory and a
// file through it, a symlink replaced by a file, a hard link to a host file — or to leave
// a half-made copy (a terabyte announced, no completion trailer, an error trailer), `moat
// cp` fails, nothing outside the destination is made or changed on the host, and a new
// destination does not appear at all. An honest stream still copies.
func TestCLICopyHostileTar(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "moat-init"), "./testdata/hostileinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the hostile init: %v\n%s", err, out)
	}
	moat, err := os.ReadFile(filepath.Join(testutil.Binaries(t), "moat"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "moat"), moat, 0o755); err != nil {
		t.Fatal(err)
	}
	c := serveCLI(t, filepath.Join(dir, "moat"))
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) {
			c.t = t
			id, errOut, code := c.run("", "create", "--runtime", rt, "--memory", "256M", "--disk", "128M")
			id = strings.TrimSpace(id)
			if code != 0 {
				t.Fatalf("create: %s", errOut)
			}
			defer c.run("", "rm", id)
			for _, tc := range []struct{ kind, want string }{
				{"dotdot", `".."`},
				{"absolute", "absolute"},
				{"symlink-write", "symlink made earlier"},
				{"symlink-replace", "twice"},
				{"hardlink", "hard link"},
				{"huge", "--max-size"},
				{"no-trailer", "without saying it was complete"},
				{"cut-short", "disk on fire"},
			} {
				for _, existing := range []bool{false, true} {
					base := t.TempDir()
					outside := filepath.Join(base, "outside")
					if err := os.Mkdir(outside, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("intact"), 0o644); err != nil {
						t.Fatal(err)
					}
					work := filepath.Join(base, "work")
					if err := os.Mkdir(work, 0o755); err != nil {
						t.Fatal(err)
					}
					dst := filepath.Join(work, "dst")
					if existing {
						if err := os.Mkdir(dst, 0o755); err != nil {
							t.Fatal(err)
						}
					}
					before := treeOf(t, base)
					_, errOut, code := c.runBounded(time.Minute, "cp", "--max-size", "1M", id+":/"+tc.kind+outside, dst)
					if code == 0 || !strings.Contains(errOut, tc.want) {
						t.Errorf("%s (existing %v): exit %d, %q; want an error with %q", tc.kind, existing, code, errOut, tc.want)
					}
					after := treeOf(t, base)
					for rel, v := range after {
						if strings.HasPrefix(rel, "work/dst/") && existing {
							continue // a merge into an existing directory keeps what it made
						}
						if before[rel] != v {
							t.Errorf("%s (existing %v): %s is now %q (was %q)", tc.kind, existing, rel, v, before[rel])
						}
					}
					for rel := range before {
						if _, ok := after[rel]; !ok {
							t.Errorf("%s: %s disappeared", tc.kind, rel)
						}
					}
				}
			}
			out := filepath.Join(t.TempDir(), "ok")
			if _, errOut, code := c.runBounded(time.Minute, "cp", id+":/honest/x", out); code != 0 {
				t.Fatalf("honest stream: %s", errOut)
			}
			if b, err := os.ReadFile(filepath.Join(out, "ok")); err != nil || string(b) != "\x00\x00\x00" {
				t.Errorf("honest stream copied %q, %v", b, err)
			}
		})
	}
}

// TestCLIUploadAndRepoDirty: `moat run --upload` copies host trees in before the command
// runs; `--repo` warns about uncommitted changes and leaves them out; `--repo-dirty`
// brings modified, staged, untracked files and deletions in.
func TestCLIUploadAndRepoDirty(t *testing.T) {
	testutil.RequiresBinary(t, "git")
	c := serveCLI(t, "")
	base := t.TempDir()
	src := filepath.Join(base, "data")
	makeHostTree(t, src)
	note := filepath.Join(base, "note.txt")
	if err := os.WriteFile(note, []byte("note\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := c.run("", "run", "--quiet", "--upload", src+":/home/user/data", "--upload", note+":/tmp/", "--",
		"cat data/sub/secret; echo; readlink data/rel; "+statPy+" data/run.sh /tmp/note.txt")
	if want := "s3cret\nsub/secret\ndata/run.sh -rwxr-x--- user\n/tmp/note.txt -rw-r----- user\n"; code != 0 || out != want {
		t.Errorf("run --upload: exit %d, %q (want %q), %s", code, out, want, errOut)
	}
	if _, errOut, code := c.run("", "run", "--upload", filepath.Join(base, "missing")+":/x", "--", "true"); code == 0 || !strings.Contains(errOut, "no such file") {
		t.Errorf("--upload of a missing path: exit %d %q", code, errOut)
	}
	if _, errOut, code := c.run("", "run", "--upload", "nocolon", "--", "true"); code == 0 || !strings.Contains(errOut, "HOST_PATH:SANDBOX_PATH") {
		t.Errorf("--upload without a colon: exit %d %q", code, errOut)
	}

	// A create whose upload fails leaves no sandbox.
	if _, errOut, code := c.run("", "create", "--upload", src+":/proc/no/such/dir"); code == 0 || !strings.Contains(errOut, "--upload") {
		t.Errorf("create with a failing upload: exit %d %q", code, errOut)
	}
	testutil.WaitFor(t, 30*time.Second, "the failed create's sandbox to be deleted", func() bool {
		out, _, _ := c.run("", "ls", "--json")
		return strings.TrimSpace(out) == "[]"
	})

	repo := filepath.Join(base, "repo")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(filepath.Join(repo, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"a.txt": "committed\n", "gone.txt": "bye\n", "staged.txt": "old\n", ".gitignore": "*.log\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "one")
	for name, body := range map[string]string{"a.txt": "changed\n", "staged.txt": "new\n", "src/new.go": "package x\n", "debug.log": "ignored\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("add", "staged.txt")
	git("rm", "-q", "gone.txt")
	show := "cat a.txt staged.txt; cat src/new.go 2>&1; test -e gone.txt && echo gone-present; test -e debug.log && echo log-present; true"
	out, errOut, code = c.run("", "run", "--quiet", "--repo", repo, "--", show)
	if code != 0 || !strings.Contains(errOut, "uncommitted changes (2 modified, 1 deleted, 1 untracked files)") || !strings.Contains(errOut, "--repo-dirty") ||
		!strings.HasPrefix(out, "committed\nold\n") || !strings.Contains(out, "gone-present") {
		t.Errorf("run --repo with changes: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	out, errOut, code = c.run("", "run", "--quiet", "--repo", repo, "--repo-dirty", "--", show)
	if want := "changed\nnew\npackage x\n"; code != 0 || out != want || strings.Contains(errOut, "uncommitted") {
		t.Errorf("run --repo-dirty: exit %d\nstdout %q (want %q)\nstderr %q", code, out, want, errOut)
	}
	if _, errOut, code := c.run("", "run", "--repo-dirty", "--", "true"); code == 0 || !strings.Contains(errOut, "needs --repo") {
		t.Errorf("--repo-dirty without --repo: exit %d %q", code, errOut)
	}
	testutil.WaitFor(t, 30*time.Second, "the runs' sandboxes to be deleted", func() bool {
		out, _, _ := c.run("", "ls", "--json")
		return strings.TrimSpace(out) == "[]"
	})
}
