package main

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/testutil"
)

// cli runs the real moat binary with its own data and run directories. A `moat run`
// before anything else starts its in-process daemon; any other command first starts a
// `moat serve` of the test's own (clidaemon_test.go), which later commands, `run`
// included, use.
type cli struct {
	t    *testing.T
	bin  string
	args []string
	// daemon is the test's `moat serve`, once a command needed it.
	daemon *cliDaemon
	// external: the test runs its own daemon, which args name (--socket): commands get
	// args as they are and no daemon is started for them.
	external bool
}

// cliRunDir makes a run directory of the test's own under /run (removed after it): CLI
// tests of other checkouts may run at the same time.
func cliRunDir(t *testing.T) string {
	t.Helper()
	run, err := os.MkdirTemp("/run", "moat-clitest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	return run
}

func newCLI(t *testing.T) *cli {
	testutil.RequiresRoot(t)
	bin := filepath.Join(testutil.Binaries(t), "moat")
	run := cliRunDir(t)
	c := &cli{t: t, bin: bin, args: []string{"--data", t.TempDir(), "--run-dir", run,
		"--id-base", strconv.FormatUint(uint64(testutil.IDBase(t)), 10)}}
	t.Cleanup(func() { c.stopDaemonFinal(true) })
	return c
}

func (c *cli) run(stdin string, args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	cmd := exec.Command(c.bin, c.argv(args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		c.t.Fatalf("moat %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

func TestCLIRun(t *testing.T) {
	c := newCLI(t)
	for _, tc := range []struct {
		name   string
		args   []string
		stdin  string
		out    string
		errHas string
		code   int
	}{
		{"streams and exits 0", []string{"run", "--", "echo out; echo err >&2"}, "", "out\n", "err", 0},
		{"exit code", []string{"run", "--", "exit 3"}, "", "", "", 3},
		{"missing command", []string{"run", "--", "no-such-cmd-xyz"}, "", "", "command not found", 127},
		{"argv words are quoted", []string{"run", "--", "printf", "%s|", "a b", "it's"}, "", "a b|it's|", "", 0},
		{"env and user", []string{"run", "--env", "A=1", "--user", "root", "--", "echo $A $(id -u)"}, "", "1 0\n", "", 0},
		{"stdin", []string{"run", "--", "tr a-z A-Z"}, "piped\n", "PIPED\n", "", 0},
		{"timeout", []string{"run", "--timeout", "2s", "--", "sleep 30"}, "", "", "timeout", 124},
		{"bad size before anything is created", []string{"run", "--memory", "12X", "--", "true"}, "", "", "unknown unit", 1},
		{"unknown runtime names those available", []string{"run", "--runtime", "kata", "--", "true"}, "", "", "available: runc", 1},
		{"unknown template", []string{"run", "--template", "nope", "--", "true"}, "", "", "host", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			out, errOut, code := c.run(tc.stdin, tc.args...)
			if code != tc.code || (tc.out != "" && out != tc.out) || !strings.Contains(errOut, tc.errHas) {
				t.Errorf("code %d (want %d)\nstdout %q (want %q)\nstderr %q (want it to contain %q)", code, tc.code, out, tc.out, errOut, tc.errHas)
			}
		})
	}
	c.t = t
	if out, _, _ := c.run("", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("runs left sandboxes behind: %s", out)
	}
}

func TestCLILifecycle(t *testing.T) {
	c := newCLI(t)
	id, errOut, code := c.run("", "create", "--memory", "256M", "--disk", "128M")
	id = strings.TrimSpace(id)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("create: %q %s", id, errOut)
	}
	if _, e, code := c.run("data\n", "cp", "-", id+":in/x.txt"); code != 0 {
		t.Fatalf("cp in: %s", e)
	}
	if out, e, _ := c.run("", "exec", "--workdir", "/home/user/in", id, "--", "cat x.txt; pwd"); out != "data\n/home/user/in\n" {
		t.Errorf("exec: %q %s", out, e)
	}
	dst := filepath.Join(t.TempDir(), "out.txt")
	if _, e, code := c.run("", "cp", id+":/home/user/in/x.txt", dst); code != 0 {
		t.Fatalf("cp out: %s", e)
	}
	if b, _ := os.ReadFile(dst); string(b) != "data\n" {
		t.Errorf("copied out %q", b)
	}
	out, _, _ := c.run("", "ls", "--json")
	var list []v1.Sandbox
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].ID != id || list[0].State != "running" {
		t.Fatalf("ls --json: %s", out)
	}
	for _, step := range [][]string{{"stop", id}, {"start", id}} {
		if _, e, code := c.run("", step...); code != 0 {
			t.Fatalf("%v: %s", step, e)
		}
	}
	if out, _, _ := c.run("", "exec", id, "--", "cat in/x.txt"); out != "data\n" {
		t.Errorf("after stop/start: %q", out)
	}
	if _, e, code := c.run("", "exec", "sb-000000000000", "--", "true"); code == 0 || !strings.Contains(e, "sb-000000000000") {
		t.Errorf("exec in unknown sandbox: %d %s", code, e)
	}
	if _, e, code := c.run("", "rm", id); code != 0 {
		t.Fatalf("rm: %s", e)
	}
}

// TestCLINotRootNoDaemon: without a daemon, a non-root user is told how to start one.
func TestCLINotRootNoDaemon(t *testing.T) {
	testutil.RequiresRoot(t)
	// A copy nobody can reach and run, wherever the checkout lives.
	dir, err := os.MkdirTemp("", "moat-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	data, err := os.ReadFile(filepath.Join(testutil.Binaries(t), "moat"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "moat")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--socket", "/nonexistent/moat.sock", "run", "--", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "moat serve") {
		t.Errorf("non-root without daemon: %v %s", err, out)
	}
}

// TestCLITemplatePull pulls an image from a registry on loopback and runs a command in it.
func TestCLITemplatePull(t *testing.T) {
	c := newCLI(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/moat/tiny:1"
	pushTinyImage(t, ref)

	out, e, code := c.run("", "template", "pull", "--insecure", ref)
	if code != 0 || strings.TrimSpace(out) != "tiny-1" {
		t.Fatalf("pull: %d %q %s", code, out, e)
	}
	if !strings.Contains(e, "layer") && !strings.Contains(e, "pull") {
		t.Logf("progress: %s", e)
	}
	out, e, _ = c.run("", "template", "ls", "--json")
	if !strings.Contains(out, `"tiny-1"`) {
		t.Errorf("template ls: %s %s", out, e)
	}
	// No "user" in the image: its configured user (root here) runs commands.
	out, e, code = c.run("", "run", "--template", "tiny-1", "--", "echo $BASH_VERSION $(</etc/motd) $UID")
	if code != 0 || !strings.Contains(out, "tiny image 0") {
		t.Errorf("run in pulled template: %d %q %s", code, out, e)
	}
}

// pushTinyImage pushes an image holding the host's bash and the libraries it needs.
func pushTinyImage(t *testing.T, ref string) {
	files := map[string]string{}
	ldd, err := exec.Command("ldd", "/usr/bin/bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(ldd), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				real, _ := filepath.EvalSymlinks(f)
				files[strings.TrimPrefix(f, "/")] = real
			}
		}
	}
	files["bin/bash"] = "/usr/bin/bash"
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte, mode int64) {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg})
		_, _ = tw.Write(data)
	}
	for dst, src := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		add(dst, data, 0o755)
	}
	add("etc/passwd", []byte("root:x:0:0:root:/root:/bin/bash\n"), 0o644)
	add("etc/group", []byte("root:x:0:\n"), 0o644)
	add("etc/motd", []byte("tiny image\n"), 0o644)
	_ = tw.WriteHeader(&tar.Header{Name: "root/", Mode: 0o700, Typeflag: tar.TypeDir})
	_ = tw.WriteHeader(&tar.Header{Name: "tmp/", Mode: 0o1777, Typeflag: tar.TypeDir})
	tw.Close()
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigFile()
	cfg.Config.Env = []string{"PATH=/bin"}
	cfg.Config.User = "root"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
}

// TestCLINetwork drives the egress flags end to end: a setup phase that may reach a
// loopback "registry", a run phase that may not, the lockfile report, the egress summary,
// and `moat egress` / `moat policy` on the kept sandbox.
func TestCLINetwork(t *testing.T) {
	c := newCLI(t)
	var mu sync.Mutex
	var seen []string
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		io.WriteString(w, `{"lockfileVersion": 3}`)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.2 registry.test\n"), 0o644)
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte("phases:\n  setup: {allow: [registry.test]}\n  run: {net: deny-all}\n"), 0o644)
	c.args = append(c.args, "--egress-hosts", hosts)

	out, errOut, code := c.run("", "run", "--keep", "--policy", pol,
		"--setup", "curl -sSf http://registry.test:"+port+"/pkg > package-lock.json",
		"--", "curl -sS --max-time 5 http://registry.test:"+port+"/after || echo main-blocked")
	if code != 0 || !strings.Contains(out, "main-blocked") {
		t.Fatalf("run: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{"setup changed lockfiles: package-lock.json (created)", "run phase: deny-all", "egress: 1 allowed", "BLOCKED", "registry.test (dns)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	mu.Lock()
	if strings.Join(seen, ",") != "/pkg" {
		t.Errorf("the registry saw %v, want only /pkg", seen)
	}
	mu.Unlock()
	id := ""
	for _, line := range strings.Split(errOut, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == "sandbox" && strings.HasPrefix(f[2], "sb-") {
			id = f[2]
		}
	}
	if id == "" {
		t.Fatalf("no sandbox id in %s", errOut)
	}
	defer c.run("", "rm", id)

	js, _, code := c.run("", "egress", "--json", id)
	var entries []v1.EgressEntry
	if err := json.Unmarshal([]byte(js), &entries); err != nil || code != 0 {
		t.Fatalf("egress --json: %v (code %d): %s", err, code, js)
	}
	var phases []string
	for _, e := range entries {
		phases = append(phases, e.Phase+"/"+e.Proto+"/"+strconv.FormatBool(e.Allowed))
	}
	if got := strings.Join(phases, " "); !strings.Contains(got, "setup/tcp/true") || !strings.Contains(got, "run/dns/false") {
		t.Errorf("egress log phases: %s", got)
	}
	if out, _, _ := c.run("", "egress", "--blocked", id); !strings.Contains(out, "BLOCKED") || strings.Contains(out, "allowed ") {
		t.Errorf("egress --blocked:\n%s", out)
	}
	if out, _, _ := c.run("", "policy", "show", id); !strings.Contains(out, "* run: deny-all") || !strings.Contains(out, "  setup: allow registry.test") {
		t.Errorf("policy show:\n%s", out)
	}
	if out, errOut, code := c.run("", "policy", "set", id, "--phase", "setup"); code != 0 || !strings.Contains(out, "phase setup") {
		t.Errorf("policy set --phase setup: %d %s %s", code, out, errOut)
	}
	if out, _, code := c.run("", "exec", id, "--", "curl -sSf http://registry.test:"+port+"/again"); code != 0 || !strings.Contains(out, "lockfileVersion") {
		t.Errorf("after switching back to setup: %d %s", code, out)
	}

	for _, tc := range []struct {
		args   []string
		errHas string
	}{
		{[]string{"run", "--net", "bogus", "--", "true"}, "--net"},
		{[]string{"run", "--policy", pol, "--allow", "x.test", "--", "true"}, "cannot be combined"},
		{[]string{"run", "--allow", "https://x.test/", "--", "true"}, "https://x.test/"},
		{[]string{"run", "--net", "deny-all", "--allow", "x.test", "--", "true"}, "deny-all"},
		{[]string{"policy", "set", id, "--phase", "nope"}, "no phase"},
		{[]string{"policy", "set", id}, "give a policy"},
	} {
		if _, errOut, code := c.run("", tc.args...); code == 0 || !strings.Contains(errOut, tc.errHas) {
			t.Errorf("moat %v: code %d, stderr %q; want an error naming %q", tc.args, code, errOut, tc.errHas)
		}
	}
}

// TestCLIPhases: a policy file with setup and run phases, used without --setup, puts the
// sandbox in "run" for moat run and moat create, and moat policy set with such a file keeps
// the sandbox's phase. registry.test is allowed only in setup: each verdict is read at
// its server's log and in the egress log.
func TestCLIPhases(t *testing.T) {
	c := newCLI(t)
	var mu sync.Mutex
	var seen []string
	ln, err := net.Listen("tcp4", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path)
		mu.Unlock()
		io.WriteString(w, "registry\n")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	reached := func(path string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range seen {
			if p == path {
				return true
			}
		}
		return false
	}
	url := "http://registry.test:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	os.WriteFile(hosts, []byte("127.0.0.2 registry.test\n"), 0o644)
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte("phases:\n  setup: {allow: [registry.test]}\n  run: {net: deny-all}\n"), 0o644)
	c.args = append(c.args, "--egress-hosts", hosts)
	egress := func(id string) []v1.EgressEntry {
		t.Helper()
		js, _, code := c.run("", "egress", "--json", id)
		var entries []v1.EgressEntry
		if err := json.Unmarshal([]byte(js), &entries); err != nil || code != 0 {
			t.Fatalf("egress --json: %v (code %d): %s", err, code, js)
		}
		return entries
	}
	blockedInRun := func(id string) bool {
		for _, e := range egress(id) {
			if e.Name == "registry.test" && e.Phase == "run" && !e.Allowed {
				return true
			}
			if e.Name == "registry.test" && e.Allowed {
				return false
			}
		}
		return false
	}

	// moat run without --setup: the main command runs in run.
	out, errOut, code := c.run("", "run", "--keep", "--policy", pol, "--", "curl -sS --max-time 5 "+url+"/by-run || echo main-blocked")
	if code != 0 || !strings.Contains(out, "main-blocked") || reached("/by-run") {
		t.Errorf("run: code %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	id := ""
	for _, line := range strings.Split(errOut, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == "sandbox" && strings.HasPrefix(f[2], "sb-") {
			id = f[2]
		}
	}
	if id == "" {
		t.Fatalf("no sandbox id in %s", errOut)
	}
	defer c.run("", "rm", id)
	if !blockedInRun(id) {
		t.Errorf("run: the egress log has no blocked registry.test in phase run: %+v", egress(id))
	}

	// moat create: the same.
	out, errOut, code = c.run("", "create", "--policy", pol)
	created := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(created, "sb-") {
		t.Fatalf("create: %q %s", out, errOut)
	}
	defer c.run("", "rm", created)
	if out, _, _ := c.run("", "exec", created, "--", "curl -sS --max-time 5 "+url+"/by-create || echo blocked"); !strings.Contains(out, "blocked") || reached("/by-create") {
		t.Errorf("create: %q", out)
	}
	if !blockedInRun(created) {
		t.Errorf("create: the egress log has no blocked registry.test in phase run: %+v", egress(created))
	}
	if out, _, _ := c.run("", "policy", "show", created); !strings.Contains(out, "* run: deny-all") {
		t.Errorf("policy show:\n%s", out)
	}

	// moat policy set with the file keeps run; switched to setup by name, the host is
	// reached (the control) and setting the file again keeps setup.
	if out, errOut, code := c.run("", "policy", "set", created, "--policy", pol); code != 0 || !strings.Contains(out, "phase run") {
		t.Errorf("policy set in run: %d %s %s", code, out, errOut)
	}
	if out, _, _ := c.run("", "exec", created, "--", "curl -sS --max-time 5 "+url+"/after-set || echo blocked"); !strings.Contains(out, "blocked") || reached("/after-set") {
		t.Errorf("after policy set in run: %q", out)
	}
	if _, errOut, code := c.run("", "policy", "set", created, "--phase", "setup"); code != 0 {
		t.Fatalf("policy set --phase setup: %s", errOut)
	}
	if out, errOut, code := c.run("", "policy", "set", created, "--policy", pol); code != 0 || !strings.Contains(out, "phase setup") {
		t.Errorf("policy set in setup: %d %s %s", code, out, errOut)
	}
	if out, _, code := c.run("", "exec", created, "--", "curl -sSf --max-time 5 "+url+"/in-setup"); code != 0 || !reached("/in-setup") {
		t.Errorf("in setup: %d %q", code, out)
	}
}

func TestParseChecksums(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	got := parseChecksums([]byte(sum + "  ./go.sum\n" + sum + " *./a b/yarn.lock\n\\" + sum + "  ./we\\nird/Cargo.lock\nnot a line\n" + "zz" + sum[2:] + "  x\n"))
	want := map[string]string{"go.sum": sum, "a b/yarn.lock": sum, "we\nird/Cargo.lock": sum}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q = %q", k, got[k])
		}
	}
	before := map[string]string{"go.sum": "1", "yarn.lock": "2", "gone.lock": "3"}
	after := map[string]string{"go.sum": "1", "yarn.lock": "9", "Cargo.lock": "4"}
	if d := strings.Join(diffChecksums(before, after), ", "); d != "Cargo.lock (created), gone.lock (deleted), yarn.lock (modified)" {
		t.Errorf("diff = %s", d)
	}
}

func FuzzParseChecksums(f *testing.F) {
	f.Add([]byte(strings.Repeat("0", 64) + "  ./go.sum\n"))
	f.Add([]byte("\\" + strings.Repeat("f", 64) + "  a\\\\b\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for path, sum := range parseChecksums(b) {
			if _, err := hex.DecodeString(sum); err != nil || len(sum) != 64 {
				t.Fatalf("bad entry %q → %q", path, sum)
			}
		}
	})
}

func TestCLISecrets(t *testing.T) {
	c := newCLI(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	if _, errOut, code := c.run(keyPEM, "secret", "set", "GH_APP", "--github-app", "123", "--installation", "456", "--hosts", "github.com,api.github.com", "--github-repo", "widget"); code != 0 {
		t.Fatalf("secret set --github-app: %d %s", code, errOut)
	}
	if _, errOut, code := c.run("plain-value-1", "secret", "set", "PLAIN", "--hosts", "API.test,*.example.org:8443", "--methods", "GET,POST"); code != 0 {
		t.Fatalf("secret set: %d %s", code, errOut)
	}
	// A new value without scope flags keeps the scope.
	if _, errOut, code := c.run("plain-value-2", "secret", "set", "PLAIN"); code != 0 {
		t.Fatalf("secret set of a new value: %d %s", code, errOut)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"not-a-key-value", []string{"secret", "set", "BAD", "--github-app", "123", "--installation", "456", "--hosts", "github.com"}, "PEM"},
		{keyPEM, []string{"secret", "set", "BAD", "--installation", "456"}, "give its ID"},
		{keyPEM, []string{"secret", "set", "BAD", "--github-app", "123"}, "needs --installation"},
		{"not-a-key-value", []string{"secret", "set", "BAD"}, "BAD is a new secret: give --hosts"},
		{"not-a-key-value", []string{"secret", "set", "BAD", "--methods", "GET"}, "give it too"},
		{"not-a-key-value", []string{"secret", "set", "BAD", "--hosts", "https://api.test/"}, "host \"https://api.test/\""},
		{"not-a-key-value", []string{"secret", "set", "BAD", "--hosts", "api.test", "--github-repo", "widget"}, "repositories scope a GitHub App key"},
		{"", []string{"secret", "scope", "PLAIN", "--path-prefix", "/v1/"}, "give it too"},
		{"", []string{"secret", "scope", "PLAIN"}, "give --hosts"},
		{"", []string{"secret", "scope", "NOPE", "--hosts", "api.test"}, "not found"},
		{"", []string{"run", "--github-repo", "widget", "--", "true"}, "give one"},
		{"", []string{"run", "--github-token", "GH_APP@github.com", "--", "true"}, "needs --github-repo"},
		{"", []string{"run", "--http", "api.test get", "--", "true"}, "not an HTTP method"},
		// Bindings outside a secret's scope are refused, for the operator too.
		{"", []string{"run", "--credential", "PLAIN@evil.test", "--", "true"}, "host evil.test (port 443) is outside the secret's scope (api.test, *.example.org:8443)"},
		{"", []string{"run", "--github-token", "GH_APP@github.com", "--github-repo", "gadget", "--", "true"}, "repository gadget is outside the GitHub App key's scope (widget)"},
		// The value goes into Authorization only, unless the scope names other headers.
		{"", []string{"run", "--credential", "PLAIN@api.test=User-Agent", "--", "true"}, "header User-Agent is outside the secret's scope (the value may be written into Authorization only)"},
		{"", []string{"run", "--credential-header", "PLAIN@api.test=Authorization: https://evil.test/{{value}}", "--", "true"}, "header template \"https://evil.test/{{value}}\" is not allowed"},
		{"", []string{"secret", "scope", "PLAIN", "--hosts", "api.test", "--headers", "Host"}, "not a header the value may be written into"},
	} {
		out, errOut, code := c.run(tc.stdin, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) || strings.Contains(out+errOut, "not-a-key-value") {
			t.Errorf("moat %v: code %d, stderr %q; want a failure naming %q (and never the value)", tc.args, code, errOut, tc.want)
		}
	}
	// Within the scope: the sandbox runs.
	if _, errOut, code := c.run("", "run", "--credential", "PLAIN@a.example.org:8443/v1/", "--", "true"); code != 0 {
		t.Errorf("run with a binding within the scope: %d %s", code, errOut)
	}
	if _, errOut, code := c.run("", "secret", "scope", "PLAIN", "--hosts", "api.test,*.example.org:8443", "--methods", "GET,POST", "--path-prefix", "/v1/", "--headers", "x-api-key,authorization"); code != 0 {
		t.Fatalf("secret scope: %d %s", code, errOut)
	}
	// A header the scope names may carry the value.
	if _, errOut, code := c.run("", "run", "--credential", "PLAIN@api.test/v1/=X-API-Key", "--credential-header", "PLAIN@api.test/v1/=Authorization: Bearer {{value}}", "--", "true"); code != 0 {
		t.Errorf("run with a header within the scope: %d %s", code, errOut)
	}
	out, _, code := c.run("", "secret", "ls")
	if code != 0 || !strings.Contains(out, "github-app 123 installation 456") || !strings.Contains(out, "github.com,api.github.com repos widget headers Authorization") ||
		!strings.Contains(out, "api.test,*.example.org:8443 GET,POST /v1/ headers X-Api-Key,Authorization") || strings.Contains(out, "BAD") || strings.Contains(out, "PRIVATE") {
		t.Errorf("secret ls:\n%s", out)
	}
	out, _, _ = c.run("", "secret", "ls", "--json")
	var list []v1.SecretInfo
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 2 || list[0].GitHubApp == nil || list[0].GitHubApp.InstallationID != 456 || list[0].Bindings == nil ||
		list[1].Scope == nil || list[1].Scope.PathPrefix != "/v1/" || strings.Join(list[0].Scope.Repositories, ",") != "widget" {
		t.Errorf("secret ls --json: %v\n%s", err, out)
	}

	// API keys: created with grants, changed by grant and revoke, listed with them.
	apiKey, errOut, code := c.run("", "apikey", "create", "--secrets", "PLAIN")
	if code != 0 || !strings.HasPrefix(apiKey, "e2b_") {
		t.Fatalf("apikey create: %d %q %s", code, apiKey, errOut)
	}
	out, _, _ = c.run("", "apikey", "ls", "--json")
	var keys []v1.APIKey
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 1 || strings.Join(keys[0].Secrets, ",") != "PLAIN" {
		t.Fatalf("apikey ls --json: %v\n%s", err, out)
	}
	id := keys[0].ID
	if out, errOut, code := c.run("", "apikey", "grant", id, "GH_APP"); code != 0 || !strings.Contains(out, id+" may bind: GH_APP,PLAIN") {
		t.Errorf("apikey grant: %d %q %s", code, out, errOut)
	}
	if out, errOut, code := c.run("", "apikey", "revoke", id, "PLAIN", "GH_APP"); code != 0 || !strings.Contains(out, id+" may bind: no secrets") {
		t.Errorf("apikey revoke: %d %q %s", code, out, errOut)
	}
	if _, errOut, code := c.run("", "apikey", "grant", "key-nope", "PLAIN"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("apikey grant of an unknown key: %d %s", code, errOut)
	}
	if _, errOut, code := c.run("", "apikey", "grant", id, "bad name"); code == 0 || !strings.Contains(errOut, "invalid secret name") {
		t.Errorf("apikey grant of an invalid name: %d %s", code, errOut)
	}
	if out, _, _ := c.run("", "apikey", "ls"); !strings.Contains(out, id) || !strings.Contains(out, "no secrets") || !strings.Contains(out, "no maxima of its own") {
		t.Errorf("apikey ls:\n%s", out)
	}

	// API key maxima: set at create, changed by limit (the others stay), listed.
	capped, errOut, code := c.run("", "apikey", "create", "--max-cpus", "0.5", "--max-memory", "1G", "--max-pids", "64")
	if code != 0 || !strings.HasPrefix(capped, "e2b_") {
		t.Fatalf("apikey create --max-*: %d %q %s", code, capped, errOut)
	}
	out, _, _ = c.run("", "apikey", "ls", "--json")
	keys = nil
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 2 || keys[1].Max != (v1.KeyMaxima{CPUs: 0.5, MemoryBytes: 1 << 30, Pids: 64}) {
		t.Fatalf("apikey ls --json with maxima: %v\n%s", err, out)
	}
	cid := keys[1].ID
	if out, errOut, code := c.run("", "apikey", "limit", cid, "--max-pids", "32", "--max-disk", "2G"); code != 0 || !strings.Contains(out, cid+": max cpus=0.5,memory=1.0 GiB,pids=32,disk=2.0 GiB") {
		t.Errorf("apikey limit: %d %q %s", code, out, errOut)
	}
	if _, errOut, code := c.run("", "apikey", "limit", cid, "--max-cpus", "-1"); code == 0 || !strings.Contains(errOut, "--max-cpus -1: must be positive") {
		t.Errorf("apikey limit --max-cpus -1: %d %s", code, errOut)
	}
	if out, _, _ := c.run("", "apikey", "ls"); !strings.Contains(out, "max cpus=0.5,memory=1.0 GiB,pids=32,disk=2.0 GiB") {
		t.Errorf("apikey ls with maxima:\n%s", out)
	}
}
