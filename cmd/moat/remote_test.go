package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
)

func TestCheckHostURL(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"http://127.0.0.1:7070", "http://127.0.0.1:7070", ""},
		{"https://moat.example:443/", "https://moat.example:443", ""},
		{"127.0.0.1:7070", "", "want http://HOST:PORT"},
		{"ftp://h:1", "", "want http://HOST:PORT"},
		{"http://", "", "want only a scheme, host and port"},
		{"http://user:pw@h:1", "", "want only a scheme, host and port"},
		{"http://h:1/v1", "", "want only a scheme, host and port"},
		{"http://h:1?x=1", "", "want only a scheme, host and port"},
		{"http://h:1/%zz", "", "invalid"},
	} {
		got, err := checkHostURL(c.in)
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("checkHostURL(%q) = %q, %v; want %q, %q", c.in, got, err, c.want, c.err)
		}
	}
}

// TestCLIRemote: with MOAT_HOST and MOAT_API_KEY (and no socket or run directory on the
// command line), the CLI drives the daemon over its --listen port: create, exec, cp both
// ways, ls, run (which starts no daemon of its own), rm; what is for the unix socket only
// is refused with the daemon's reason; a wrong key, no key and a bad URL are errors that
// say so.
func TestCLIRemote(t *testing.T) {
	c := newCLI(t)
	addr, err := freeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	c.args = append(c.args, "--listen", addr)
	c.ensureDaemon()
	out, e, code := c.run("", "apikey", "create", "--json")
	var key v1.APIKey
	if code != 0 || json.Unmarshal([]byte(out), &key) != nil || key.Key == "" {
		t.Fatalf("apikey create: %d %q %s", code, out, e)
	}
	remote := func(env []string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(c.bin, args...)
		cmd.Env = append(os.Environ(), "MOAT_SOCKET=", "MOAT_RUN_DIR="+t.TempDir())
		cmd.Env = append(cmd.Env, env...)
		var o, eb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &eb
		code := exitOf(t, cmd.Run())
		return o.String(), eb.String(), code
	}
	env := []string{"MOAT_HOST=http://" + addr, "MOAT_API_KEY=" + key.Key}
	out, e, code = remote(env, "create", "--memory", "256M", "--disk", "128M")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("remote create: %d %q %s", code, out, e)
	}
	if out, e, code := remote(env, "exec", id, "--", "echo", "over tcp"); code != 0 || out != "over tcp\n" {
		t.Errorf("remote exec: %d %q %s", code, out, e)
	}
	src := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(src, []byte("carried"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := remote(env, "cp", src, id+":/tmp/in.txt"); code != 0 {
		t.Errorf("remote cp in: %d %s", code, e)
	}
	dst := filepath.Join(t.TempDir(), "out.txt")
	if _, e, code := remote(env, "cp", id+":/tmp/in.txt", dst); code != 0 {
		t.Errorf("remote cp out: %d %s", code, e)
	} else if b, _ := os.ReadFile(dst); string(b) != "carried" {
		t.Errorf("remote cp round trip: %q", b)
	}
	if out, e, code := remote(env, "ls", "-q"); code != 0 || strings.TrimSpace(out) != id {
		t.Errorf("remote ls -q: %d %q %s", code, out, e)
	}
	if out, e, code := remote(env, "run", "--memory", "256M", "--disk", "128M", "--", "echo ran"); code != 0 || out != "ran\n" {
		t.Errorf("remote run: %d %q %s", code, out, e)
	}
	if _, e, code := remote(env, "secret", "ls"); code == 0 || !strings.Contains(e, "unix socket only") {
		t.Errorf("remote secret ls: %d %s", code, e)
	}
	if _, e, code := remote([]string{"MOAT_HOST=http://" + addr, "MOAT_API_KEY=e2b_wrong"}, "ls"); code == 0 || !strings.Contains(e, "refused the API key") {
		t.Errorf("a wrong key: %d %s", code, e)
	}
	if _, e, code := remote([]string{"MOAT_HOST=http://" + addr}, "ls"); code == 0 || !strings.Contains(e, "MOAT_API_KEY") {
		t.Errorf("no key: %d %s", code, e)
	}
	if _, e, code := remote(env, "--host", "ftp://"+addr, "ls"); code == 0 || !strings.Contains(e, "want http://") {
		t.Errorf("a bad --host: %d %s", code, e)
	}
	if _, e, code := remote(env, "rm", id); code != 0 {
		t.Errorf("remote rm: %d %s", code, e)
	}
	// The sandboxes were the daemon's, and none is left once deletions finish.
	testutil.WaitFor(t, time.Minute, "the remote sandboxes' deletion", func() bool {
		out, _, _ := c.run("", "ls", "-q")
		return strings.TrimSpace(out) == ""
	})
}
