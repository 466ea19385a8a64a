package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// Per-user egress (issue 15), end to end on runc: two accounts in one sandbox, alice with
// rules that let her reach allowed.test and the bound API, bob with rules that let him
// reach the API only, and without its credential. Every outcome is asserted at the
// receiving server's log.

// addTestUser adds user name to sandbox id with `moat user add`'s route and returns its uid.
func addTestUser(t *testing.T, e *env, id, name string, sudo bool) uint32 {
	t.Helper()
	u, err := e.c.AddUser(context.Background(), id, v1.UserRequest{Name: name, Sudo: sudo})
	if err != nil {
		t.Fatalf("adding user %s: %v", name, err)
	}
	return u.UID
}

func TestUserEgress(t *testing.T) {
	const secret = "user-secret-5d2b8e0c71"
	in := newInternet(t)
	up := testutil.NewUpstreamCA(t, "api.test")
	apiPort := tlsServe(t, up, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.log.add("api path=%s auth=%s from=%s", r.URL.Path, r.Header.Get("Authorization"), r.RemoteAddr)
		fmt.Fprintln(w, "ok")
	}))
	caFile := upstreamCAFile(t, up)
	configure := func(c *daemon.Config) {
		in.configure(c)
		c.EgressHosts["api.test"] = append(c.EgressHosts["api.test"], netip.MustParseAddr("127.0.0.4"))
		c.EgressCA = caFile
	}
	e := newEnvWith(t, configure)
	ctx := context.Background()
	scope := &v1.SecretScope{Hosts: []string{fmt.Sprintf("api.test:%d", apiPort)}}
	if err := e.c.SetSecret(ctx, "API_TOKEN", secret, scope); err != nil {
		t.Fatal(err)
	}
	if err := e.c.SetSecret(ctx, "OTHER", "other-value-1", scope); err != nil {
		t.Fatal(err)
	}
	sb := e.create(v1.CreateSandboxRequest{
		Runtime:     "runc",
		Policy:      &v1.Policy{Phase: "run", Phases: map[string]v1.PolicyRules{"run": {Allow: []string{"allowed.test", "api.test"}}}},
		Credentials: []v1.Credential{{Secret: "API_TOKEN", Hosts: []string{fmt.Sprintf("api.test:%d", apiPort)}}},
	})
	aliceUID := addTestUser(t, e, sb.ID, "alice", false)
	bobUID := addTestUser(t, e, sb.ID, "bob", false)
	addTestUser(t, e, sb.ID, "sudoer", true)
	if _, err := e.c.SetUserEgress(ctx, sb.ID, "alice", v1.SetUserEgressRequest{Allow: []string{"allowed.test", "api.test"}, Credentials: []string{"API_TOKEN"}}); err != nil {
		t.Fatal(err)
	}
	res, err := e.c.SetUserEgress(ctx, sb.ID, "bob", v1.SetUserEgressRequest{Allow: []string{"api.test"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.User != "bob" || res.UID != bobUID || res.Egress == nil || strings.Join(res.Egress.Allow, ",") != "api.test" {
		t.Errorf("answer: %+v", res)
	}
	get := func(user, path string) result {
		return e.sh(sb.ID, user, fmt.Sprintf("curl -sS --max-time 5 http://allowed.test:%d%s", in.httpPort, path))
	}

	e.run("a user's rules narrow the sandbox's", func(t *testing.T, e *env) {
		if r := get("alice", "/alice-1"); r.code != 0 || !in.log.contains("path=/alice-1") {
			t.Fatalf("alice did not reach allowed.test: %+v", r)
		}
		if r := get("bob", "/bob-1"); r.code == 0 || in.log.contains("path=/bob-1") {
			t.Errorf("bob reached allowed.test: %+v", r)
		}
		// The names bob's rules deny do not resolve for him.
		if r := e.sh(sb.ID, "bob", "getent hosts allowed.test"); r.code == 0 {
			t.Errorf("allowed.test resolved for bob: %+v", r)
		}
		if r := e.sh(sb.ID, "alice", "getent hosts allowed.test"); r.code != 0 {
			t.Errorf("allowed.test did not resolve for alice: %+v", r)
		}
		if x, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
			return x.Proto == "dns" && !x.Allowed && x.User == "bob" && x.Name == "allowed.test"
		}); !ok {
			t.Errorf("no blocked DNS entry of bob: %+v", x)
		}
		// root (and a user without rules of its own) has the sandbox's policy.
		if r := get("root", "/root-1"); r.code != 0 || !in.log.contains("path=/root-1") {
			t.Errorf("root did not reach allowed.test: %+v", r)
		}
		if r := get("sudoer", "/sudoer-1"); r.code != 0 || !in.log.contains("path=/sudoer-1") {
			t.Errorf("a user without rules of its own did not reach allowed.test: %+v", r)
		}
	})

	e.run("the egress log names the user", func(t *testing.T, e *env) {
		if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
			return x.Allowed && x.User == "alice" && x.Name == "allowed.test"
		}); !ok {
			t.Error("no allowed entry of alice")
		}
		x, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
			return !x.Allowed && x.User == "bob" && x.Name == "allowed.test"
		})
		if !ok || !strings.Contains(x.Reason, "user bob") {
			t.Errorf("no blocked entry of bob naming his rules: %+v", x)
		}
		if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
			return x.Allowed && x.User == "" && x.Name == "allowed.test"
		}); !ok {
			t.Error("no entry of root (no user)")
		}
	})

	e.run("a credential only for the users it is given to", func(t *testing.T, e *env) {
		call := func(user, path string) result {
			return e.sh(sb.ID, user, fmt.Sprintf(`curl -sS --max-time 10 -H "Authorization: Bearer $API_TOKEN" https://api.test:%d%s`, apiPort, path))
		}
		if r := call("alice", "/alice-cred"); r.code != 0 || !in.log.contains("path=/alice-cred auth=Bearer "+secret) {
			t.Errorf("alice's request did not carry the credential: %+v %v", r, in.log.all())
		}
		if r := call("bob", "/bob-cred"); r.code != 0 || !in.log.contains("path=/bob-cred auth=Bearer moat-placeholder-") {
			t.Errorf("bob's request did not reach the API with the placeholder: %+v %v", r, in.log.all())
		}
		if in.log.contains("path=/bob-cred auth=Bearer " + secret) {
			t.Error("bob's request carried the credential")
		}
		// Each user's requests go over upstream connections of its own: bob's never rides
		// the connection alice's credential went over (a server may authenticate a
		// connection, not each request).
		from := func(path string) string {
			for _, l := range in.log.all() {
				if strings.Contains(l, "path="+path+" ") {
					_, f, _ := strings.Cut(l, " from=")
					return f
				}
			}
			return ""
		}
		if a, b := from("/alice-cred"), from("/bob-cred"); a == "" || a == b {
			t.Errorf("alice's and bob's requests came over one upstream connection: %q %q", a, b)
		}
		if r := call("alice", "/alice-cred-2"); r.code != 0 || from("/alice-cred-2") != from("/alice-cred") {
			t.Logf("alice's second request did not reuse her upstream connection (%s, %s): pooling is not asserted", from("/alice-cred-2"), from("/alice-cred"))
		}
		evs, err := e.c.Events(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		var uses []string
		for _, ev := range evs {
			if ev.Kind == "credential" {
				uses = append(uses, ev.Detail)
			}
		}
		joined := strings.Join(uses, "\n")
		if !strings.Contains(joined, "/alice-cred → 200 by user alice") || strings.Contains(joined, "bob-cred") {
			t.Errorf("credential audit: %q", joined)
		}
	})

	e.run("a user cannot take another's source ports", func(t *testing.T, e *env) {
		// bob binds a port of alice's range, then one of root's: each is rewritten into
		// his own range, so the proxy still sees bob.
		alicePorts, _ := sandbox.PortMap([]sandbox.User{{Name: "alice", UID: aliceUID}})
		// bob cannot resolve the name: he dials the address root got for it (the proxy
		// maps it back to the name).
		addr := strings.Fields(e.sh(sb.ID, "root", "getent hosts allowed.test").stdout)
		if len(addr) == 0 {
			t.Fatal("root could not resolve allowed.test")
		}
		for i, port := range []uint16{alicePorts[0].Lo + 7, sandbox.DefaultPorts.Lo + 11} {
			path := fmt.Sprintf("/bob-spoof-%d", i)
			r := e.sh(sb.ID, "bob", fmt.Sprintf(`python3 -c '
import socket
s = socket.socket()
s.bind(("0.0.0.0", %d))
s.connect(("%s", %d))
print(s.getsockname()[1], flush=True)
try:
    s.sendall(b"GET %s HTTP/1.0\r\nHost: allowed.test\r\n\r\n")
    print(s.recv(100))
except OSError as e:
    print(e)'`, port, addr[0], in.httpPort, path))
			if in.log.contains("path=" + path) {
				t.Errorf("bob reached allowed.test from port %d: %+v", port, r)
			}
			if !strings.Contains(r.stdout, fmt.Sprint(port)) {
				t.Errorf("bob did not bind port %d: %+v", port, r)
			}
		}
	})

	e.run("root inside cannot remove the rules", func(t *testing.T, e *env) {
		// The capability over S is not in root's bounding set: no program it runs
		// (setuid or with file capabilities) can get it back.
		bnd := strings.TrimSpace(e.sh(sb.ID, "root", `awk '/^CapBnd/ {print $2}' /proc/self/status`).stdout)
		if v, err := strconv.ParseUint(bnd, 16, 64); err != nil || v&(1<<12) != 0 || v&(1<<13) != 0 {
			t.Errorf("root's bounding set %q holds CAP_NET_ADMIN or CAP_NET_RAW", bnd)
		}
		for _, line := range []string{
			"nft flush ruleset",
			"nft delete table ip moat-users",
			"nft list ruleset",
			"ip link set eth0 down",
			"ip addr add 198.18.0.6/30 dev eth0",
			"sysctl -w net.ipv4.ip_local_port_range='2000 3000'",
			"echo '2000 3000' > /proc/sys/net/ipv4/ip_local_port_range",
			// A user namespace of its own owns none of S.
			"unshare -Ur nft flush ruleset",
			"unshare -Ur ip link set eth0 down",
		} {
			r := e.sh(sb.ID, "root", line)
			if r.code == 0 {
				t.Errorf("root inside: %q succeeded: %+v", line, r)
			} else {
				t.Logf("root inside: %q refused: %s", line, strings.TrimSpace(r.stderr+r.stdout))
			}
		}
		if r := get("bob", "/bob-2"); r.code == 0 || in.log.contains("path=/bob-2") {
			t.Errorf("bob reached allowed.test after root's attempts: %+v", r)
		}
		if r := get("alice", "/alice-2"); r.code != 0 || !in.log.contains("path=/alice-2") {
			t.Errorf("alice lost allowed.test after root's attempts: %+v", r)
		}
	})

	e.run("refusals", func(t *testing.T, e *env) {
		for _, c := range []struct {
			user string
			req  v1.SetUserEgressRequest
			want string
			is   error
		}{
			{"sudoer", v1.SetUserEgressRequest{Allow: []string{"api.test"}}, "has sudo", sdk.ErrInvalidArgument},
			{"carol", v1.SetUserEgressRequest{Allow: []string{"api.test"}}, "no user", sdk.ErrNotFound},
			{"bob", v1.SetUserEgressRequest{Allow: []string{"api.test", "denied.test"}}, "denied.test", sdk.ErrInvalidArgument},
			{"bob", v1.SetUserEgressRequest{Allow: []string{"http://x"}}, "rule", sdk.ErrInvalidArgument},
			{"bob", v1.SetUserEgressRequest{Allow: []string{"api.test"}, Credentials: []string{"OTHER"}}, "not bound", sdk.ErrInvalidArgument},
		} {
			_, err := e.c.SetUserEgress(ctx, sb.ID, c.user, c.req)
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.is) {
				t.Errorf("%s %+v: %v, want %q (%v)", c.user, c.req, err, c.want, c.is)
			}
		}
		// bob's rules are unchanged by the refusals.
		if r := get("bob", "/bob-3"); r.code == 0 || in.log.contains("path=/bob-3") {
			t.Errorf("bob reached allowed.test after refused changes: %+v", r)
		}
	})

	e.run("rules apply at every start", func(t *testing.T, e *env) {
		if _, err := e.c.Stop(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Start(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if r := get("bob", "/bob-4"); r.code == 0 || in.log.contains("path=/bob-4") {
			t.Errorf("bob reached allowed.test after a restart: %+v", r)
		}
		if r := get("alice", "/alice-4"); r.code != 0 || !in.log.contains("path=/alice-4") {
			t.Errorf("alice did not reach allowed.test after a restart: %+v", r)
		}
	})

	e.run("open connections are decided again when a user's rules change", func(t *testing.T, e *env) {
		// bob may reach allowed.test; he holds an echo connection open; his rules then
		// drop it: the connection is cut (the echo server sees it close).
		if _, err := e.c.SetUserEgress(ctx, sb.ID, "bob", v1.SetUserEgressRequest{Allow: []string{"api.test", "allowed.test"}}); err != nil {
			t.Fatal(err)
		}
		done := make(chan result, 1)
		go func() {
			done <- e.sh(sb.ID, "bob", fmt.Sprintf(`python3 -c '
import socket
s = socket.create_connection(("allowed.test", %d))
s.sendall(b"bob-held\n")
print(s.recv(100), flush=True)
print("closed:", s.recv(100))'`, in.echoPort))
		}()
		testutil.WaitFor(t, 10*time.Second, "bob's echo line", func() bool { return in.log.contains("echo line=bob-held") })
		res, err := e.c.SetUserEgress(ctx, sb.ID, "bob", v1.SetUserEgressRequest{Allow: []string{"api.test"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.ConnectionsCut != 1 {
			t.Errorf("connections cut: %d, want 1", res.ConnectionsCut)
		}
		select {
		case r := <-done:
			if !strings.Contains(r.stdout, "closed:") {
				t.Errorf("bob's connection: %+v", r)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("bob's connection was not cut")
		}
		testutil.WaitFor(t, 10*time.Second, "the echo connection closing", func() bool { return in.log.contains("echo closed") })
	})

	e.run("the CLI", func(t *testing.T, e *env) {
		moat := func(args ...string) (string, string, int) {
			cmd := exec.Command(filepath.Join(testutil.Binaries(t), "moat"), append([]string{"--run-dir", e.runDir}, args...)...)
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return out.String(), errb.String(), code
		}
		js, stderr, code := moat("user", "egress", sb.ID, "alice", "--allow", "allowed.test", "--allow", "api.test", "--credential", "API_TOKEN", "--json")
		var res v1.UserEgressResponse
		if err := json.Unmarshal([]byte(js), &res); err != nil || code != 0 || res.Egress == nil || strings.Join(res.Egress.Credentials, ",") != "API_TOKEN" {
			t.Errorf("user egress --json: %d %q %q", code, js, stderr)
		}
		if out, _, code := moat("user", "egress", sb.ID, "bob", "--allow", "api.test"); code != 0 || !strings.Contains(out, "user bob of "+sb.ID+": allow api.test (within the sandbox's policy); no credentials") {
			t.Errorf("user egress: %d %q", code, out)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"user", "egress", sb.ID, "bob"}, "--allow"},
			{[]string{"user", "egress", sb.ID, "bob", "--clear", "--allow", "x.test"}, "--clear takes no"},
			{[]string{"user", "egress", sb.ID, "sudoer", "--allow", "api.test"}, "has sudo"},
			{[]string{"user", "egress", sb.ID, "bob", "--allow", "denied.test"}, "allows nothing that denied.test names"},
		} {
			if _, stderr, code := moat(c.args...); code == 0 || !strings.Contains(stderr, c.want) {
				t.Errorf("%v: %d %q, want %q", c.args, code, stderr, c.want)
			}
		}
		e.d.Egress.Flush()
		out, _, code := moat("egress", "--user", "bob", "--blocked", sb.ID)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || !strings.Contains(lines[0], "USER") || len(lines) < 2 {
			t.Fatalf("egress --user bob: %d %q", code, out)
		}
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) < 4 || f[2] != "BLOCKED" || f[3] != "bob" {
				t.Errorf("egress --user bob --blocked row: %q", l)
			}
		}
	})

	// A new daemon adopts the running sandbox with its users: the table in S stayed, the
	// proxy learns the users again.
	e.stop()
	restarted := time.Now()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), configure)
	e.run("a daemon restart keeps the rules", func(t *testing.T, e *env) {
		if r := get("bob", "/bob-6"); r.code == 0 || in.log.contains("path=/bob-6") {
			t.Errorf("bob reached allowed.test after a daemon restart: %+v", r)
		}
		if r := get("alice", "/alice-6"); r.code != 0 || !in.log.contains("path=/alice-6") {
			t.Errorf("alice did not reach allowed.test after a daemon restart: %+v", r)
		}
		if _, ok := e.egressEntry(sb.ID, func(x v1.EgressEntry) bool {
			return x.Allowed && x.User == "alice" && x.Name == "allowed.test" && x.Time.After(restarted)
		}); !ok {
			t.Error("alice's connection after the restart is not logged as hers")
		}
	})

	e.run("clearing gives the sandbox's egress back", func(t *testing.T, e *env) {
		res, err := e.c.ClearUserEgress(ctx, sb.ID, "bob")
		if err != nil || res.Egress != nil {
			t.Fatalf("clear: %+v %v", res, err)
		}
		if r := get("bob", "/bob-5"); r.code != 0 || !in.log.contains("path=/bob-5") {
			t.Errorf("bob did not reach allowed.test once cleared: %+v", r)
		}
	})

	e.run("runsc is refused", func(t *testing.T, e *env) {
		if _, err := exec.LookPath("runsc"); err != nil {
			t.Skip("no runsc")
		}
		g := e.create(v1.CreateSandboxRequest{Runtime: "runsc"})
		addTestUser(t, e, g.ID, "alice", false)
		_, err := e.c.SetUserEgress(ctx, g.ID, "alice", v1.SetUserEgressRequest{Allow: []string{"allowed.test"}})
		if err == nil || !strings.Contains(err.Error(), "gVisor") || !errors.Is(err, sdk.ErrUnavailable) {
			t.Errorf("runsc: %v", err)
		}
	})

	for _, s := range in.log.all() {
		if strings.Contains(s, "REACHED") {
			t.Errorf("upstream log: %s", s)
		}
	}
}
