package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// newSnapEnv is a daemon whose drives live in an XFS pool (copy-free snapshots).
func newSnapEnv(t *testing.T, configure func(*daemon.Config)) *env {
	return newEnvWith(t, func(c *daemon.Config) {
		c.DrivePool = 3 << 30
		if configure != nil {
			configure(c)
		}
	})
}

// hashTree is what the test compares between sandboxes: a file of random bytes, a small
// one, a directory, ownership (by name) of a file the default user wrote.
const writeTree = `set -e; mkdir -p ~/t/sub; head -c 3000000 /dev/urandom > ~/t/big; echo "$RANDOM" > ~/t/sub/small; ln -sf big ~/t/link`
const hashTree = `cd ~/t && sha256sum big sub/small && readlink link && find big sub -printf '%u:%g %m %p\n' | sort`

// TestSnapshotCreateFromRestore, with runc and runsc: a snapshot of a running sandbox is
// copy-free (reflink) and a sandbox made from it holds the same files (hashes, links,
// owners by name: its files moved into its own uid range); a rollback puts the parent's
// files back in place, keeping its id; snapshot rm leaves sandboxes made from it intact.
func TestSnapshotCreateFromRestore(t *testing.T) {
	e := newSnapEnv(t, nil)
	ctx := context.Background()
	for _, rt := range []string{"runc", "runsc"} {
		e.run(rt, func(t *testing.T, e *env) {
			sb := e.create(v1.CreateSandboxRequest{Runtime: rt})
			e.mustSh(sb.ID, writeTree)
			want := e.mustSh(sb.ID, hashTree)
			sn, err := e.c.Snapshot(ctx, sb.ID, "first")
			if err != nil {
				t.Fatal(err)
			}
			if sn.Method != "reflink" || sn.Sandbox != sb.ID || sn.Name != "first" {
				t.Errorf("snapshot %+v: want a reflink of %s named first", sn, sb.ID)
			}
			// Changes after the snapshot are not in it.
			e.mustSh(sb.ID, `echo changed > ~/t/sub/small; rm ~/t/big; echo new > ~/t/new`)

			from := e.create(v1.CreateSandboxRequest{FromSnapshot: sn.ID, Runtime: rt})
			if from.Snapshot != sn.ID {
				t.Errorf("sandbox from the snapshot says snapshot %q, want %s", from.Snapshot, sn.ID)
			}
			if got := e.mustSh(from.ID, hashTree); got != want {
				t.Errorf("sandbox from the snapshot:\n%s\nwant\n%s", got, want)
			}
			if r := e.sh(from.ID, "", "test -e ~/t/new"); r.code == 0 {
				t.Error("a file written after the snapshot is in the sandbox made from it")
			}
			// It writes on its own drive: the parent does not see it.
			e.mustSh(from.ID, "echo mine > ~/t/mine")
			if r := e.sh(sb.ID, "", "test -e ~/t/mine"); r.code == 0 {
				t.Error("a write of the sandbox made from the snapshot shows in the parent")
			}

			restored, err := e.c.Restore(ctx, sb.ID, sn.ID)
			if err != nil {
				t.Fatal(err)
			}
			if restored.ID != sb.ID || restored.State != "running" {
				t.Errorf("restored: %+v", restored)
			}
			if got := e.mustSh(sb.ID, hashTree); got != want {
				t.Errorf("after the rollback:\n%s\nwant\n%s", got, want)
			}
			if r := e.sh(sb.ID, "", "test -e ~/t/new"); r.code == 0 {
				t.Error("after the rollback a file written after the snapshot is still there")
			}

			list, err := e.c.Snapshots(ctx)
			if err != nil || len(list) != 1 || list[0].ID != sn.ID {
				t.Errorf("snapshot ls: %+v %v", list, err)
			}
			if err := e.c.DeleteSnapshot(ctx, sn.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(e.dataDir, "drives", sn.ID+".snap")); !os.IsNotExist(err) {
				t.Errorf("snapshot image after rm: %v", err)
			}
			if got := e.mustSh(from.ID, hashTree); got != want {
				t.Errorf("after snapshot rm, the sandbox made from it:\n%s\nwant\n%s", got, want)
			}
			for _, id := range []string{sb.ID, from.ID} {
				if err := e.c.Delete(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// posture is a sandbox's security posture as its runtime was given it (bundle
// config.json): seccomp, capabilities, resources, namespaces, and the uid map's size.
type posture struct {
	Seccomp    string
	Caps       string
	Resources  string // the drive's loop device numbers taken out
	NS         []string
	MapSize    []uint32
	NoNewPrivs bool
	User       string
}

var loopDevice = regexp.MustCompile(`"major":\s*7,\s*"minor":\s*\d+`)

func readPosture(t *testing.T, e *env, id string) (posture, []uint32) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.runDir, "sandboxes", id, "bundle", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Process struct {
			Capabilities    json.RawMessage `json:"capabilities"`
			NoNewPrivileges bool            `json:"noNewPrivileges"`
			User            json.RawMessage `json:"user"`
		} `json:"process"`
		Linux struct {
			Seccomp     json.RawMessage `json:"seccomp"`
			Resources   json.RawMessage `json:"resources"`
			UIDMappings []struct {
				ContainerID uint32 `json:"containerID"`
				HostID      uint32 `json:"hostID"`
				Size        uint32 `json:"size"`
			} `json:"uidMappings"`
			Namespaces []struct {
				Type string `json:"type"`
			} `json:"namespaces"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	p := posture{Seccomp: string(spec.Linux.Seccomp), Caps: string(spec.Process.Capabilities),
		Resources:  loopDevice.ReplaceAllString(string(spec.Linux.Resources), `"loop"`),
		NoNewPrivs: spec.Process.NoNewPrivileges, User: string(spec.Process.User)}
	if p.Seccomp == "" || p.Caps == "" || p.Resources == "" {
		t.Fatalf("sandbox %s: no seccomp, capabilities or resources in its spec", id)
	}
	for _, m := range spec.Linux.UIDMappings {
		p.MapSize = append(p.MapSize, m.ContainerID, m.Size)
	}
	for _, n := range spec.Linux.Namespaces {
		p.NS = append(p.NS, n.Type)
	}
	// The host uids as the sandbox's own processes are mapped (runc from 1.2 is given the
	// pinned user namespace by path alone, without mappings in the spec).
	var hosts []uint32
	for _, l := range strings.Split(strings.TrimSpace(e.mustSh(id, "cat /proc/self/uid_map")), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			h, _ := strconv.ParseUint(f[1], 10, 32)
			hosts = append(hosts, uint32(h))
		}
	}
	if len(hosts) == 0 {
		t.Fatalf("sandbox %s: no uid map inside", id)
	}
	return p, hosts
}

// TestForkIdentity, with runc and runsc: three forks of a running sandbox hold its files
// and its posture (seccomp, capabilities, cgroup limits, namespaces, uid map size, egress
// policy and phase, user), and each gets its own identity: id, host uid range, access
// token (moat-init accepts only its own), interception CA, credential placeholder and
// /etc/machine-id. Deleting the parent leaves the forks working.
func TestForkIdentity(t *testing.T) {
	in := newInternet(t)
	e := newSnapEnv(t, func(c *daemon.Config) {
		in.configure(c)
		c.EgressHosts["api.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.4")}
	})
	ctx := context.Background()
	if err := e.c.SetSecret(ctx, "TOKEN", "fork-secret-81c2", &v1.SecretScope{Hosts: []string{"api.test:443"}}); err != nil {
		t.Fatal(err)
	}
	pol := &v1.Policy{Phase: "build", Phases: map[string]v1.PolicyRules{"build": {Allow: []string{"api.test"}}, "run": {}}}
	for _, rt := range []string{"runc", "runsc"} {
		e.run(rt, func(t *testing.T, e *env) {
			parent := e.create(v1.CreateSandboxRequest{Runtime: rt, Policy: pol, CPUs: 0.5, Pids: 300,
				Credentials: []v1.Credential{{Secret: "TOKEN", Hosts: []string{"api.test:443"}}}})
			e.mustSh(parent.ID, writeTree)
			if r := e.sh(parent.ID, "root", "head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /etc/machine-id"); r.code != 0 {
				t.Fatalf("writing machine-id: %+v", r)
			}
			want := e.mustSh(parent.ID, hashTree)
			rep, err := e.c.Fork(ctx, parent.ID, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Forks) != 3 || rep.Parent != parent.ID || len(rep.Inherited) == 0 || len(rep.Renewed) == 0 {
				t.Fatalf("fork report: %+v", rep)
			}
			// A lazy fork is made stopped and started by its first use (the checks below).
			lazy, err := e.c.ForkWith(ctx, parent.ID, v1.ForkRequest{Count: 1, Lazy: true})
			if err != nil {
				t.Fatal(err)
			}
			if f := lazy.Forks; len(f) != 1 || f[0].State != "stopped" || f[0].StopReason != "idle" {
				t.Fatalf("lazy fork: %+v", lazy.Forks)
			}
			rep.Forks = append(rep.Forks, lazy.Forks...)
			pp, phosts := readPosture(t, e, parent.ID)
			seen := map[string]string{}
			unique := func(kind, v string) {
				t.Helper()
				if v == "" {
					t.Errorf("%s is empty", kind)
					return
				}
				if prev, ok := seen[kind+"="+v]; ok {
					t.Errorf("%s %q shared by %s", kind, v, prev)
				}
				seen[kind+"="+v] = kind
			}
			all := append([]v1.Sandbox{*parent}, rep.Forks...)
			for i, sb := range all {
				unique("id", sb.ID)
				if rt == "runc" {
					unique("host uid", fmt.Sprint(sb.HostUID))
				}
				unique("placeholder", strings.TrimSpace(e.mustSh(sb.ID, `echo "$TOKEN"`)))
				unique("ca", e.mustSh(sb.ID, `cat /etc/moat/ca.pem`))
				unique("machine-id", strings.TrimSpace(e.mustSh(sb.ID, `cat /etc/machine-id`)))
				full, err := e.d.Store.Get(ctx, sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				unique("token", full.AccessToken)
				if i == 0 {
					continue
				}
				if got := e.mustSh(sb.ID, hashTree); got != want {
					t.Errorf("fork %s files:\n%s\nwant\n%s", sb.ID, got, want)
				}
				if sb.ForkOf != parent.ID {
					t.Errorf("fork %s: fork_of %q", sb.ID, sb.ForkOf)
				}
				fp, fhosts := readPosture(t, e, sb.ID)
				if !reflect.DeepEqual(fp, pp) {
					t.Errorf("fork %s posture differs from the parent's:\n%s\n%s", sb.ID, diffPosture(fp, pp), "")
				}
				if rt == "runc" && reflect.DeepEqual(fhosts, phosts) {
					t.Errorf("fork %s has the parent's host uid map %v", sb.ID, phosts)
				}
				if sb.Policy.Phase != "build" || !reflect.DeepEqual(sb.Policy, parent.Policy) {
					t.Errorf("fork %s policy %+v, want the parent's %+v", sb.ID, sb.Policy, parent.Policy)
				}
				if sb.Limits != parent.Limits || sb.User != parent.User || sb.Template != parent.Template || sb.Runtime != rt {
					t.Errorf("fork %s: %+v, want the parent's settings %+v", sb.ID, sb, parent)
				}
			}
			if err := e.c.Delete(ctx, parent.ID); err != nil {
				t.Fatal(err)
			}
			for _, f := range rep.Forks {
				if got := e.mustSh(f.ID, hashTree); got != want {
					t.Errorf("fork %s after the parent's deletion:\n%s", f.ID, got)
				}
				_ = e.c.Delete(ctx, f.ID)
			}
		})
	}
}

// diffPosture names the fields of two postures that differ, with both values (short).
func diffPosture(a, b posture) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			x, y := fmt.Sprint(va.Field(i).Interface()), fmt.Sprint(vb.Field(i).Interface())
			out = append(out, fmt.Sprintf("%s: %.300s\n  vs %.300s", va.Type().Field(i).Name, x, y))
		}
	}
	return strings.Join(out, "\n")
}

// TestSnapshotForkKill9: a daemon killed with SIGKILL in the middle of a snapshot (drive
// frozen, image cloned; image made, record not yet written) or of a fork (its snapshot
// taken; a fork's record and drive made, not started) leaves no half-made snapshot or
// sandbox: after a restart only the parent is listed, running and writable (its drive
// thawed), no snapshot is listed, and the drives directory holds only the parent's drive.
func TestSnapshotForkKill9(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := testutil.Binaries(t)
	for _, tc := range []struct{ point, op string }{
		{"snapshot-frozen", "snapshot"},
		{"snapshot-image", "snapshot"},
		{"fork-snapshot", "fork"},
		{"create-from-drive", "fork"},
		{"create-from-drive", "create-from"},
		{"checkpoint-decided", "checkpoint"}, // moat checkpoint (its filesystem fallback)
		{"snapshot-image", "checkpoint"},
	} {
		t.Run(tc.op+"@"+tc.point, func(t *testing.T) {
			data := t.TempDir()
			run := "/run/moat-test-" + shortID()
			sock := filepath.Join(run, "moat.sock")
			idBase := strconv.FormatUint(uint64(testutil.IDBase(t)), 10)
			defer os.RemoveAll(run)
			c := sdk.NewUnix(sock)
			ctx := context.Background()
			start := func(failpoint string) *exec.Cmd {
				cmd := exec.Command(filepath.Join(bin, "moat"), "serve", "--data", data, "--run-dir", run, "--socket", sock,
					"--warm", "0", "--id-base", idBase, "--drive-pool", "2G")
				cmd.Env = append(os.Environ(), daemon.KillFailpointEnv+"="+failpoint)
				cmd.Stderr = testWriter{t}
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				testutil.WaitFor(t, 20*time.Second, "daemon socket", func() bool { return c.Ping(ctx) == nil })
				return cmd
			}
			// The snapshot create-from uses is taken by a daemon without the failpoint.
			snap := ""
			d := start("")
			parent, err := c.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 128 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, parent.ID, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo before > /home/user/f"}}); err != nil {
				t.Fatal(err)
			}
			if tc.op == "create-from" {
				sn, err := c.Snapshot(ctx, parent.ID, "")
				if err != nil {
					t.Fatal(err)
				}
				snap = sn.ID
			}
			_ = d.Process.Signal(syscall.SIGTERM)
			_ = d.Wait()
			d = start(tc.point)
			switch tc.op {
			case "snapshot":
				_, err = c.Snapshot(ctx, parent.ID, "")
			case "fork":
				_, err = c.Fork(ctx, parent.ID, 2)
			case "create-from":
				_, err = c.Create(ctx, v1.CreateSandboxRequest{FromSnapshot: snap, MemoryBytes: 256 << 20})
			case "checkpoint":
				_, err = c.Checkpoint(ctx, parent.ID, "")
			}
			if err == nil {
				t.Fatalf("%s succeeded: the failpoint %s was not reached", tc.op, tc.point)
			}
			if st, _ := d.Process.Wait(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("daemon ended %v, want killed at the failpoint", st)
			}
			d = start("")
			stopped := false
			stop := func() {
				if !stopped {
					stopped = true
					if t.Failed() {
						// Sandboxes outlive their daemon: a failed test deletes its own.
						dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
						if l, err := c.List(dctx); err == nil {
							for _, sb := range l {
								_ = c.Delete(dctx, sb.ID)
							}
							testutil.WaitFor(t, 60*time.Second, "deletions", func() bool { l, _ := c.List(dctx); return len(l) == 0 })
						}
						cancel()
					}
					_ = d.Process.Signal(syscall.SIGTERM)
					_ = d.Wait()
				}
			}
			defer stop()
			list, err := c.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0].ID != parent.ID || list[0].State != "running" {
				t.Fatalf("after the kill and a restart: %+v, want only %s running", list, parent.ID)
			}
			var out strings.Builder
			// Writable: a drive left frozen would block this write.
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			code, err := c.Exec(wctx, parent.ID, sdk.ExecRequest{Cmd: "/bin/sh", Args: []string{"-c", "echo after >> /home/user/f && sync && cat /home/user/f"}, Stdout: &out})
			cancel()
			if err != nil || code != 0 || out.String() != "before\nafter\n" {
				t.Fatalf("parent after the restart: code %d err %v out %q", code, err, out.String())
			}
			snaps, err := c.Snapshots(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, sn := range snaps {
				ids = append(ids, sn.ID)
			}
			if want := []string{snap}; (snap == "" && len(ids) != 0) || (snap != "" && !reflect.DeepEqual(ids, want)) {
				t.Errorf("snapshots after the restart: %v, want %v", ids, want)
			}
			entries, _ := os.ReadDir(filepath.Join(data, "drives"))
			for _, e := range entries {
				n := e.Name()
				switch {
				case n == parent.ID+".img", strings.HasPrefix(n, ".format-"), n == ".moat-pool":
				case snap != "" && (n == snap+".snap" || n == snap+".json"):
				default:
					t.Errorf("left in the drives directory: %s", n)
				}
			}
			if err := c.Delete(ctx, parent.ID); err != nil {
				t.Fatal(err)
			}
			if snap != "" {
				if err := c.DeleteSnapshot(ctx, snap); err != nil {
					t.Fatal(err)
				}
			}
			testutil.WaitFor(t, 30*time.Second, "deletion", func() bool {
				l, _ := c.List(ctx)
				return len(l) == 0
			})
			stop()
			e := &env{t: t, dataDir: data, runDir: run}
			e.assertNoLeaks([]v1.Sandbox{*parent})
		})
	}
}

// TestSnapshotSpacePromised: blocks a drive shares with a snapshot or a clone are promised
// (the sandbox may overwrite each of them once), so forks the pool could not honour are
// refused before anything is made. In a 2 GiB pool (~1.85 GiB free, 256 MiB reserve), a
// 512 MiB sandbox with 400 MB written (shared once cloned) and one fork (512 MiB: its
// holes and its shared blocks) fit; a second fork does not. Counting only holes, it would.
func TestSnapshotSpacePromised(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.DrivePool = 2 << 30 })
	ctx := context.Background()
	parent := e.create(v1.CreateSandboxRequest{DiskBytes: 512 << 20})
	e.mustSh(parent.ID, "head -c 400000000 /dev/urandom > ~/blob && sync")
	_, err := e.c.Fork(ctx, parent.ID, 2)
	if !isResourceExhausted(err) {
		t.Fatalf("two forks of a 512 MiB sandbox in a 2 GiB pool: %v, want resource_exhausted", err)
	}
	// The fork made before the refusal is deleted (in the background).
	testutil.WaitFor(t, 60*time.Second, "only the parent to remain", func() bool {
		list, _ := e.c.List(ctx)
		return len(list) == 1
	})
	rep, err := e.c.Fork(ctx, parent.ID, 1)
	if err != nil {
		t.Fatalf("one fork: %v", err)
	}
	if len(rep.Forks) != 1 {
		t.Fatalf("fork report %+v", rep)
	}
	// The fork can overwrite every block it shares: its whole drive.
	if r := e.sh(rep.Forks[0].ID, "", "dd if=/dev/urandom of=$HOME/blob bs=1M count=380 conv=notrunc status=none && sync"); r.code != 0 {
		t.Errorf("the fork overwriting its drive: %+v", r)
	}
}

func isResourceExhausted(err error) bool { return errors.Is(err, sdk.ErrResourceExhausted) }

// TestSnapshotLayerGC: a repository layer is kept while a snapshot uses it, after the
// sandbox it was made for is gone (a sandbox made from the snapshot still sees
// /workspace), and collected once nothing uses it (snapshot rm).
func TestSnapshotLayerGC(t *testing.T) {
	e := newSnapEnv(t, nil)
	r := newUserRepo(t)
	ctx := context.Background()
	sb := e.create(v1.CreateSandboxRequest{Repo: r.dir})
	e.mustSh(sb.ID, "echo edited >> /workspace/README")
	sn, err := e.c.Snapshot(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if sn.RepoLayer == "" {
		t.Fatalf("snapshot of a --repo sandbox names no repository layer: %+v", sn)
	}
	layer := filepath.Join(e.dataDir, "layers", sn.RepoLayer)
	if err := e.c.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 60*time.Second, "the sandbox to go", func() bool { l, _ := e.c.List(ctx); return len(l) == 0 })
	// Older than the grace a create gets between building a layer and storing its sandbox.
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(layer, old, old); err != nil {
		t.Fatal(err)
	}
	// A GC (run by any snapshot rm) keeps the layer the remaining snapshot uses.
	other := e.create(v1.CreateSandboxRequest{})
	osn, err := e.c.Snapshot(ctx, other.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteSnapshot(ctx, osn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layer); err != nil {
		t.Fatalf("the repository layer a snapshot uses was collected: %v", err)
	}
	from := e.create(v1.CreateSandboxRequest{FromSnapshot: sn.ID})
	if got := e.mustSh(from.ID, "tail -n1 /workspace/README; cat /workspace/keep.txt"); got != "edited\nkept\n" {
		t.Errorf("/workspace of the sandbox made from the snapshot: %q", got)
	}
	if err := e.c.Delete(ctx, from.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 60*time.Second, "the sandbox to go", func() bool { l, _ := e.c.List(ctx); return len(l) == 1 })
	if err := e.c.DeleteSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layer); !os.IsNotExist(err) {
		t.Errorf("the repository layer nothing uses any more is still there: %v", err)
	}
}
