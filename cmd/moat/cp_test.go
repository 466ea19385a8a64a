package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/testutil"
)

// runBounded runs the CLI like c.run, but killed after timeout and unable to write a file
// larger than 64 MiB (RLIMIT_FSIZE): a cp that would write without bound fails the test
// instead of filling the host's disk.
func (c *cli) runBounded(timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append([]string{"--fsize=67108864", "--", c.bin}, c.argv(args...)...)
	cmd := exec.CommandContext(ctx, "prlimit", argv...)
	var out cappedBuffer
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		c.t.Errorf("moat %v still running after %s (stdout %d bytes)", args, timeout, out.n)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		c.t.Fatalf("moat %v: %v", args, err)
	}
	if out.n > 1<<20 {
		c.t.Errorf("moat %v wrote %d bytes to stdout", args, out.n)
	}
	return out.b.String(), errb.String(), code
}

// cappedBuffer keeps the first MiB written to it and counts the rest.
type cappedBuffer struct {
	b bytes.Buffer
	n int64
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	if room := 1<<20 - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// TestCLICopyRefusesDevices: `moat cp` of a device, a symlink to one, or a FIFO in a
// sandbox is refused with a message saying what the path is, to a file or to stdout, and
// writes nothing on the host; a regular file behind a symlink still copies.
func TestCLICopyRefusesDevices(t *testing.T) {
	testutil.RequiresBinary(t, "prlimit")
	c := newCLI(t)
	id, errOut, code := c.run("", "create", "--memory", "256M", "--disk", "128M")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	defer c.run("", "rm", id)
	if _, e, code := c.run("", "exec", id, "--", "ln -s /dev/zero zero; ln -s /dev/urandom random; mkfifo fifo; echo hi > f; ln -s f link"); code != 0 {
		t.Fatalf("setting up: %s", e)
	}
	dir := t.TempDir()
	for _, tc := range []struct{ src, what string }{
		{"/dev/zero", "character device"},
		{"/dev/urandom", "character device"},
		{"zero", "character device"},
		{"random", "character device"},
		{"fifo", "FIFO"},
	} {
		for _, dst := range []string{filepath.Join(dir, "out"), "-"} {
			out, e, code := c.runBounded(time.Minute, "cp", id+":"+tc.src, dst)
			if code == 0 || !strings.Contains(e, tc.what) || !strings.Contains(e, "only regular files") || out != "" {
				t.Errorf("cp %s %s: exit %d, stdout %d bytes, stderr %q", tc.src, dst, code, len(out), e)
			}
			if st, err := os.Stat(filepath.Join(dir, "out")); err == nil {
				t.Errorf("cp %s %s left a %d-byte file on the host", tc.src, dst, st.Size())
				os.Remove(filepath.Join(dir, "out"))
			}
		}
	}
	if _, e, code := c.runBounded(time.Minute, "cp", id+":link", filepath.Join(dir, "out")); code != 0 {
		t.Errorf("cp through a symlink to a regular file: %s", e)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out")); string(b) != "hi\n" {
		t.Errorf("copied %q", b)
	}
	// --max-size refuses a larger file before writing anything.
	if _, e, code := c.runBounded(time.Minute, "cp", "--max-size", "2", id+":link", filepath.Join(dir, "small")); code == 0 || !strings.Contains(e, "--max-size") {
		t.Errorf("cp over --max-size: exit %d %q", code, e)
	}
	if _, err := os.Stat(filepath.Join(dir, "small")); err == nil {
		t.Error("cp over --max-size wrote a file")
	}
}

// TestCLICopyHostileInit: the host side bounds `moat cp ID:PATH -` on its own, whatever moat-init
// answers. With a moat-init that streams zeros without a length, announces a terabyte or
// sends gzip unasked, cp fails with a clear message and leaves no file; an honest answer
// still copies.
func TestCLICopyHostileInit(t *testing.T) {
	testutil.RequiresBinary(t, "prlimit")
	c := newCLI(t)
	// The in-process daemon takes the moat-init next to its executable.
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "moat-init"), "./testdata/hostileinit")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the hostile init: %v\n%s", err, out)
	}
	moat, err := os.ReadFile(c.bin)
	if err != nil {
		t.Fatal(err)
	}
	c.bin = filepath.Join(dir, "moat")
	if err := os.WriteFile(c.bin, moat, 0o755); err != nil {
		t.Fatal(err)
	}
	id, errOut, code := c.run("", "create", "--memory", "256M", "--disk", "128M")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("create: %s", errOut)
	}
	defer c.run("", "rm", id)
	out := t.TempDir()
	for _, tc := range []struct{ src, want string }{
		{"/chunked", "did not announce the file's length"},
		{"/huge", "more than --max-size"},
		{"/gzip", "content encoding"},
	} {
		// To a file, cp reads a tar stream (GET /moat/tar): TestCLICopyHostileTar has
		// those attacks. To stdout it reads GET /files.
		for _, dst := range []string{"-"} {
			stdout, e, code := c.runBounded(time.Minute, "cp", id+":"+tc.src, dst)
			if code == 0 || !strings.Contains(e, tc.want) || stdout != "" {
				t.Errorf("cp %s %s: exit %d, stdout %d bytes, stderr %q (want %q)", tc.src, dst, code, len(stdout), e, tc.want)
			}
			if st, err := os.Stat(filepath.Join(out, "f")); err == nil {
				t.Errorf("cp %s %s left a %d-byte file on the host", tc.src, dst, st.Size())
				os.Remove(filepath.Join(out, "f"))
			}
		}
	}
	if b, e, code := c.runBounded(time.Minute, "cp", id+":/ok", "-"); code != 0 || b != "hello\n" {
		t.Errorf("cp of an honest answer: %q %s", b, e)
	}
}
