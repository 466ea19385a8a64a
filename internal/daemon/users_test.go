package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestUsers: accounts moat adds to a sandbox (issue 15), on every runtime: private homes
// (EACCES between users, content never shown), shared group directories (members write,
// others cannot), sudo only for a --sudo user, exec/PTY/file API as the user, users kept
// over stop/start and a daemon restart (the record re-applied over root's edits), removal
// with and without the home, and bad inputs.
func TestUsers(t *testing.T) {
	e := newEnv(t)
	for _, rt := range runtimesUnderTest(t) {
		e.run(rt, func(t *testing.T, e *env) { usersOn(t, e, rt) })
	}
}

// TestUsersRestart: users survive a daemon restart, and the record is re-applied to the
// adopted sandbox over root's edits.
func TestUsersRestart(t *testing.T) {
	e := newEnv(t)
	usersAcrossRestart(t, e)
}

// rootSh runs line as root inside and fails the test unless it exits 0; it returns stdout.
func (e *env) rootSh(id, line string) string {
	e.t.Helper()
	r := e.sh(id, "root", line)
	if r.code != 0 {
		e.t.Fatalf("%q as root exited %d\nstdout: %s\nstderr: %s", line, r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// asUser runs a shell line as user.
func (e *env) asUser(id, user, line string) result {
	e.t.Helper()
	return e.sh(id, user, line)
}

func usersOn(t *testing.T, e *env, rt string) {
	ctx := context.Background()
	sb := e.create(v1.CreateSandboxRequest{Runtime: rt, Users: []v1.UserRequest{{Name: "carol", Groups: []string{"ops"}}}})
	if len(sb.Users) != 1 || sb.Users[0].Name != "carol" || sb.Users[0].UID < 2000 || len(sb.SharedGroups) != 1 || sb.SharedGroups[0].GID < 3000 {
		t.Fatalf("create-time user: %+v %+v", sb.Users, sb.SharedGroups)
	}
	alice, err := e.c.AddUser(ctx, sb.ID, v1.UserRequest{Name: "alice", Groups: []string{"team"}, Sudo: true})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := e.c.AddUser(ctx, sb.ID, v1.UserRequest{Name: "bob", Groups: []string{"team"}})
	if err != nil {
		t.Fatal(err)
	}
	if alice.UID == bob.UID || alice.UID < 2000 || bob.UID > 2999 || alice.Home != "/home/alice" {
		t.Fatalf("ids: alice %+v bob %+v", alice, bob)
	}

	e.run("identity", func(t *testing.T, e *env) {
		r := e.asUser(sb.ID, "alice", `id -un; id -u; echo $HOME; pwd; stat -c '%a %U:%G' /home/alice`)
		want := "alice\n" + itoa(alice.UID) + "\n/home/alice\n/home/alice\n700 alice:alice\n"
		if r.code != 0 || r.stdout != want {
			t.Fatalf("as alice: %d %q (stderr %q), want %q", r.code, r.stdout, r.stderr, want)
		}
		if out := e.asUser(sb.ID, "bob", "id -nG").stdout; !strings.Contains(out, "team") || strings.Contains(out, "sudo") {
			t.Fatalf("bob's groups: %q", out)
		}
	})

	e.run("private homes", func(t *testing.T, e *env) {
		if r := e.asUser(sb.ID, "alice", `echo alice-secret-4711 > ~/secret.txt; chmod 644 ~/secret.txt`); r.code != 0 {
			t.Fatalf("alice writing: %+v", r)
		}
		r := e.asUser(sb.ID, "bob", `cat /home/alice/secret.txt; echo "rc=$?"; ls /home/alice; echo "ls=$?"`)
		if strings.Contains(r.stdout+r.stderr, "alice-secret-4711") || strings.Contains(r.stdout, "secret.txt") {
			t.Fatalf("bob read alice's home: %+v", r)
		}
		if !strings.Contains(r.stderr, "Permission denied") || !strings.Contains(r.stdout, "rc=1") || !strings.Contains(r.stdout, "ls=2") {
			t.Fatalf("bob's reads were not refused with EACCES: %+v", r)
		}
		// The file API as bob: refused, without the content.
		f, err := e.c.ReadFile(ctx, sb.ID, "/home/alice/secret.txt", "bob")
		if err == nil {
			var b bytes.Buffer
			_, _ = b.ReadFrom(f)
			f.Close()
			t.Fatalf("file API as bob read alice's file: %q", b.String())
		}
		if strings.Contains(err.Error(), "alice-secret-4711") {
			t.Fatalf("the refusal holds the content: %v", err)
		}
		// The file API as alice: hers, written as her.
		if err := e.c.WriteFile(ctx, sb.ID, "/home/alice/api.txt", "alice", strings.NewReader("via api\n")); err != nil {
			t.Fatal(err)
		}
		if out := e.rootSh(sb.ID, `stat -c '%U %a' /home/alice/api.txt`); out != "alice 644\n" {
			t.Fatalf("file written through the API as alice: %q", out)
		}
	})

	e.run("shared group", func(t *testing.T, e *env) {
		if out := e.mustSh(sb.ID, `stat -c '%a %U:%G' /shared/team`); out != "2770 root:team\n" {
			t.Fatalf("/shared/team: %q", out)
		}
		for _, u := range []string{"alice", "bob"} {
			if r := e.asUser(sb.ID, u, `echo from-`+u+` > /shared/team/`+u+`.txt && stat -c %G /shared/team/`+u+`.txt`); r.code != 0 || r.stdout != "team\n" {
				t.Fatalf("%s writing /shared/team: %+v", u, r)
			}
		}
		if out := e.asUser(sb.ID, "bob", `cat /shared/team/alice.txt`).stdout; out != "from-alice\n" {
			t.Fatalf("bob reading alice's shared file: %q", out)
		}
		r := e.asUser(sb.ID, "carol", `echo x > /shared/team/carol.txt; echo "rc=$?"; cat /shared/team/alice.txt`)
		if !strings.Contains(r.stderr, "Permission denied") || !strings.Contains(r.stdout, "rc=1") || strings.Contains(r.stdout, "from-alice") {
			t.Fatalf("carol (not in team) was not refused: %+v", r)
		}
		if r := e.asUser(sb.ID, "carol", `echo c > /shared/ops/c.txt`); r.code != 0 {
			t.Fatalf("carol writing her own group's directory: %+v", r)
		}
	})

	e.run("sudo", func(t *testing.T, e *env) {
		for _, u := range []string{"bob", "carol"} {
			if r := e.asUser(sb.ID, u, `sudo -n true`); r.code == 0 {
				t.Fatalf("%s (no sudo) could sudo: %+v", u, r)
			}
		}
		if out := e.rootSh(sb.ID, `stat -c '%a %U' /etc/sudoers.d/moat-alice; ls /etc/sudoers.d | grep -c moat-`); out != "440 root\n1\n" {
			t.Fatalf("sudoers files: %q, want alice's only", out)
		}
		// gVisor never honours set-id here (THREAT_MODEL.md): sudo elevates under runc only.
		if r := e.asUser(sb.ID, "alice", `sudo -n true && sudo -n cat /home/bob/.bashrc >/dev/null && echo ok`); rt != "runsc" && (r.code != 0 || r.stdout != "ok\n") {
			t.Fatalf("alice (sudo) cannot sudo: %+v", r)
		}
	})

	e.run("pty", func(t *testing.T, e *env) {
		var out bytes.Buffer
		code, err := e.c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "/bin/bash", Args: []string{"-c", "tty >/dev/null && id -un"}, User: "bob",
			Stdout: &out, TTY: &sdk.TermSize{Cols: 80, Rows: 24}})
		if err != nil || code != 0 || !strings.Contains(out.String(), "bob") {
			t.Fatalf("PTY as bob: %d %v %q", code, err, out.String())
		}
	})

	e.run("bad inputs", func(t *testing.T, e *env) {
		for _, bad := range []v1.UserRequest{
			{Name: "Alice"}, {Name: "root"}, {Name: ""}, {Name: "a b"}, {Name: "1abc"}, {Name: strings.Repeat("a", 33)},
			{Name: "daemon"},                         // an account of the template
			{Name: "dave", Groups: []string{"sudo"}}, // a group of the template
			{Name: "dave", Groups: []string{"Bad"}},
			{Name: "team"}, // a shared group's name
		} {
			if _, err := e.c.AddUser(ctx, sb.ID, bad); !errors.Is(err, sdk.ErrInvalidArgument) {
				t.Errorf("AddUser(%+v) = %v, want invalid argument", bad, err)
			}
		}
		if _, err := e.c.AddUser(ctx, sb.ID, v1.UserRequest{Name: "alice"}); !errors.Is(err, sdk.ErrConflict) {
			t.Errorf("duplicate: %v, want conflict (already exists)", err)
		}
		if _, err := e.c.AddUser(ctx, "sb-000000000000", v1.UserRequest{Name: "zed"}); !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("unknown sandbox: %v", err)
		}
		if err := e.c.RemoveUser(ctx, sb.ID, "nobody-here", false); !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("removing an unknown user: %v", err)
		}
		// Nothing of the refused users was made.
		if out := e.mustSh(sb.ID, `grep -c 'moat user' /etc/passwd`); out != "3\n" {
			t.Errorf("moat accounts in /etc/passwd: %q, want 3", out)
		}
	})

	e.run("stop start", func(t *testing.T, e *env) {
		// Root inside edits the files; the record is the truth at the next start.
		e.rootSh(sb.ID, `sed -i '/^bob:/d' /etc/passwd && chmod 755 /home/alice && rm -f /etc/sudoers.d/moat-alice`)
		if _, err := e.c.Stop(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.AddUser(ctx, sb.ID, v1.UserRequest{Name: "erin"}); !errors.Is(err, sdk.ErrConflict) {
			t.Errorf("adding to a stopped sandbox: %v, want conflict", err)
		}
		if _, err := e.c.Start(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if r := e.asUser(sb.ID, "bob", `id -u; cat /shared/team/bob.txt`); r.code != 0 || r.stdout != itoa(bob.UID)+"\nfrom-bob\n" {
			t.Fatalf("bob after stop/start: %+v", r)
		}
		if out := e.mustSh(sb.ID, `stat -c %a /home/alice`); out != "700\n" {
			t.Fatalf("alice's home mode after start: %q", out)
		}
		if r := e.asUser(sb.ID, "alice", `cat ~/secret.txt`); r.code != 0 || r.stdout != "alice-secret-4711\n" {
			t.Fatalf("alice after stop/start: %+v", r)
		}
		if out := e.rootSh(sb.ID, `test -f /etc/sudoers.d/moat-alice && echo back`); out != "back\n" {
			t.Fatalf("alice's sudoers file after start: %q", out)
		}
		list, err := e.c.Users(ctx, sb.ID)
		if err != nil || len(list.Users) != 3 || list.Users[1].UID != alice.UID || len(list.Groups) != 2 {
			t.Fatalf("users after start: %+v %v", list, err)
		}
	})

	e.run("fork", func(t *testing.T, e *env) {
		rep, err := e.c.Fork(ctx, sb.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		child := rep.Forks[0]
		defer e.c.Delete(ctx, child.ID)
		if len(child.Users) != 3 || child.Users[1].Name != "alice" || child.Users[1].UID != alice.UID || len(child.SharedGroups) != 2 {
			t.Fatalf("fork's users: %+v %+v", child.Users, child.SharedGroups)
		}
		if r := e.asUser(child.ID, "alice", `cat ~/secret.txt`); r.code != 0 || r.stdout != "alice-secret-4711\n" {
			t.Fatalf("alice in the fork: %+v", r)
		}
		if r := e.asUser(child.ID, "bob", `cat /home/alice/secret.txt`); r.code == 0 || strings.Contains(r.stdout, "alice-secret") {
			t.Fatalf("bob read alice's home in the fork: %+v", r)
		}
		if _, err := e.c.AddUser(ctx, child.ID, v1.UserRequest{Name: "alice"}); !errors.Is(err, sdk.ErrConflict) {
			t.Errorf("alice again in the fork: %v, want already exists", err)
		}
	})

	e.run("remove", func(t *testing.T, e *env) {
		e.asUser(sb.ID, "bob", `nohup sleep 1000 >/dev/null 2>&1 &`)
		if err := e.c.RemoveUser(ctx, sb.ID, "bob", true); err != nil {
			t.Fatal(err)
		}
		r := e.sh(sb.ID, "root", `id bob; echo "id=$?"; pgrep -u `+itoa(bob.UID)+`; echo "pgrep=$?"; test -d /home/bob && echo kept`)
		if !strings.Contains(r.stdout, "id=1") || !strings.Contains(r.stdout, "pgrep=1") || !strings.Contains(r.stdout, "kept") {
			t.Fatalf("after removing bob (keep home): %+v", r)
		}
		if err := e.c.RemoveUser(ctx, sb.ID, "carol", false); err != nil {
			t.Fatal(err)
		}
		if out := e.mustSh(sb.ID, `test -e /home/carol && echo left; grep -c carol /etc/passwd /etc/group /etc/shadow | tr '\n' ' '`); strings.Contains(out, "left") || strings.Contains(out, ":1") {
			t.Fatalf("after removing carol: %q", out)
		}
		if _, err := e.c.Exec(ctx, sb.ID, sdk.ExecRequest{Cmd: "true", User: "carol"}); err == nil {
			t.Fatal("exec as a removed user worked")
		}
		// A new user never gets a removed user's uid: bob's kept home stays out of reach.
		gail, err := e.c.AddUser(ctx, sb.ID, v1.UserRequest{Name: "gail"})
		if err != nil || gail.UID == bob.UID || gail.UID == sb.Users[0].UID {
			t.Fatalf("gail: %+v %v (bob had %d, carol %d)", gail, err, bob.UID, sb.Users[0].UID)
		}
		if r := e.asUser(sb.ID, "gail", `ls /home/bob`); r.code == 0 || !strings.Contains(r.stderr, "Permission denied") {
			t.Fatalf("gail reached bob's kept home: %+v", r)
		}
		evs, err := e.c.Events(ctx, sb.ID)
		var kinds []string
		for _, ev := range evs {
			if strings.HasPrefix(ev.Kind, "user_") {
				kinds = append(kinds, ev.Kind+" "+ev.Detail)
			}
		}
		if err != nil || !strings.Contains(strings.Join(kinds, ","), "user_added alice,user_added bob") ||
			!strings.Contains(strings.Join(kinds, ","), "user_removed bob,user_removed carol,user_added gail") {
			t.Errorf("user events: %v %v", kinds, err)
		}
		got, err := e.c.Get(ctx, sb.ID)
		if err != nil || len(got.Users) != 2 || got.Users[0].Name != "alice" {
			t.Fatalf("record after removals: %+v %v", got.Users, err)
		}
	})
}

func usersAcrossRestart(t *testing.T, e *env) {
	ctx := context.Background()
	sb := e.create(v1.CreateSandboxRequest{Users: []v1.UserRequest{{Name: "frank"}}})
	e.rootSh(sb.ID, `sed -i '/^frank:/d' /etc/passwd`)
	if r := e.sh(sb.ID, "", "id frank"); r.code == 0 {
		t.Fatal("frank still there after root removed him")
	}
	e.stop()
	e.start(filepath.Join(testutil.Binaries(t), "moat-init"), nil)
	got, err := e.c.Get(ctx, sb.ID)
	if err != nil || got.State != "running" || len(got.Users) != 1 {
		t.Fatalf("after a restart: %+v %v", got, err)
	}
	if r := e.sh(sb.ID, "frank", "id -un"); r.code != 0 || r.stdout != "frank\n" {
		t.Fatalf("frank after a daemon restart: %+v", r)
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// TestUsersE2B: the E2B `username` of a file request through the E2B envd gateway
// (E2b-Sandbox-Id, X-Access-Token: what the e2b SDK sends) selects a user moat added:
// alice reads her file, bob is refused without its content.
func TestUsersE2B(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) { c.Listen = addr })
	ctx := context.Background()
	sb := e.create(v1.CreateSandboxRequest{Users: []v1.UserRequest{{Name: "alice"}, {Name: "bob"}}})
	if r := e.sh(sb.ID, "alice", `echo e2b-secret-8812 > ~/s.txt`); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	rec, err := e.d.Store.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	get := func(user string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/files?path=/home/alice/s.txt&username="+user, nil)
		req.Header.Set("E2b-Sandbox-Id", sb.ID)
		req.Header.Set("X-Access-Token", rec.AccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("alice"); code != 200 || body != "e2b-secret-8812\n" {
		t.Fatalf("as alice: %d %q", code, body)
	}
	if code, body := get("bob"); code != http.StatusForbidden || strings.Contains(body, "e2b-secret-8812") {
		t.Fatalf("as bob: %d %q, want 403 without the content", code, body)
	}
}
