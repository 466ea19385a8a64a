package daemon_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/testutil"
)

// toolsImageBinaries are the host programs the tools image carries (with their libraries):
// enough for the harness's bash -l -c and for sandboxView.
var toolsImageBinaries = []string{"bash", "env", "sort", "id", "grep", "ls", "cat", "hostname", "cmp", "echo", "mawk"}

// importToolsImage imports, as template tmpl, a small image made of host programs and
// their libraries, a passwd with root and user, and /etc/moat-version holding version (a
// new version is a new layer, so a new template content).
func importToolsImage(t *testing.T, e *env, tmpl, version string) {
	t.Helper()
	im := newHostImage(t)
	for _, b := range toolsImageBinaries {
		p, err := exec.LookPath(b)
		if err != nil {
			t.Skipf("no %s on this host", b)
		}
		im.program(p)
	}
	im.path("/bin/bash") // the harness runs /bin/bash (on a usr-merged host, /bin is a link)
	mawk, _ := exec.LookPath("mawk")
	im.path(filepath.Join(filepath.Dir(mawk), "mawk"))
	im.homes("/bin/bash")
	im.file("etc/moat-version", version+"\n", 0o644)
	data, _ := os.ReadFile(mawk)
	im.file(strings.TrimPrefix(filepath.Join(filepath.Dir(mawk), "awk"), "/"), string(data), 0o755)
	importLayerImage(t, e, tmpl, "tools", im.layer())
}

// poolStat is the counters of the pool of rt and tmpl.
func (e *env) poolStat(rt, tmpl string) sandbox.PoolStat {
	for _, s := range e.d.Manager.PoolStats() {
		if s.Runtime == rt && s.Template == tmpl {
			return s
		}
	}
	e.t.Fatalf("no pool %s:%s in %+v", rt, tmpl, e.d.Manager.PoolStats())
	return sandbox.PoolStat{}
}

// TestWarmTemplatePool: a pool of a template that is not the host's (here "debian",
// imported by the test) fills once the template exists, serves a matching create (the
// pool's hit counter proves the path, not timing) with a sandbox of that template, and
// refills; creates that do not match (another disk size, another template) go cold; a
// re-imported template replaces the warm sandboxes of its old version; the daemon's
// shutdown deletes the warm sandboxes. For runc and runsc.
func TestWarmTemplatePool(t *testing.T) {
	rts := runtimesUnderTest(t)
	e := newEnvWith(t, func(c *daemon.Config) {
		c.Warm = map[string]int{}
		for _, rt := range rts {
			c.Warm[rt+":debian"] = 1
		}
	})
	// No debian template yet: the pools wait for it.
	time.Sleep(300 * time.Millisecond)
	for _, rt := range rts {
		if s := e.poolStat(rt, "debian"); s.Ready != 0 || s.Built != 0 {
			t.Fatalf("pool of a missing template: %+v", s)
		}
	}
	importToolsImage(t, e, "debian", "v1")
	for _, rt := range rts {
		e.run(rt, func(t *testing.T, e *env) { warmTemplate(t, e, rt) })
	}

	// Shutdown deletes every warm sandbox: no drive, run directory or container remains.
	var warm []v1.Sandbox
	for _, rt := range rts {
		for _, id := range e.warmOf(rt) {
			warm = append(warm, v1.Sandbox{ID: id})
		}
	}
	if len(warm) != len(rts) {
		t.Fatalf("warm sandboxes before shutdown: %v", warm)
	}
	e.stop()
	e.stop = func() {}
	e.d.Manager.Wait()
	e.assertNoLeaks(warm)
}

func warmTemplate(t *testing.T, e *env, rt string) {
	ctx := context.Background()
	testutil.WaitFor(t, 90*time.Second, "the debian pool to fill", func() bool { return e.poolStat(rt, "debian").Ready == 1 })
	before := e.poolStat(rt, "debian")
	warm := e.warmOf(rt)
	sb, err := e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt, Template: "debian", Env: map[string]string{"OWNER": "me"}})
	if err != nil {
		t.Fatal(err)
	}
	after := e.poolStat(rt, "debian")
	if after.Hits != before.Hits+1 || !slices.Contains(warm, sb.ID) {
		t.Fatalf("the create was not served by the pool: %s not in %v; counters %+v → %+v", sb.ID, warm, before, after)
	}
	if sb.Template != "debian" || sb.Runtime != rt {
		t.Errorf("claimed record: %+v", sb)
	}
	if out := e.mustSh(sb.ID, "echo $OWNER $(id -un) $(cat /etc/moat-version)"); out != "me user v1\n" {
		t.Errorf("the claimed sandbox: %q", out)
	}
	testutil.WaitFor(t, 90*time.Second, "the pool to refill", func() bool {
		s := e.poolStat(rt, "debian")
		return s.Ready == 1 && s.Built == before.Built+1
	})

	// Not matching: another disk size, another template. Neither takes the warm one nor
	// counts as a hit.
	before = e.poolStat(rt, "debian")
	warm = e.warmOf(rt)
	other := e.create(v1.CreateSandboxRequest{Runtime: rt, Template: "debian", DiskBytes: 200 << 20, MemoryBytes: 0})
	host, err := e.c.Create(ctx, v1.CreateSandboxRequest{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	if s := e.poolStat(rt, "debian"); s.Hits != before.Hits || slices.Contains(warm, other.ID) || slices.Contains(warm, host.ID) || !slices.Equal(e.warmOf(rt), warm) {
		t.Errorf("a create that does not match took the warm sandbox: counters %+v → %+v, warm %v → %v, got %s and %s", before, s, warm, e.warmOf(rt), other.ID, host.ID)
	}
	if out := e.mustSh(other.ID, "cat /etc/moat-version"); out != "v1\n" {
		t.Errorf("cold debian sandbox: %q", out)
	}
	for _, id := range []string{sb.ID, other.ID, host.ID} {
		if err := e.c.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWarmTemplateChange: when the template is imported again, the warm sandbox of the old
// version is deleted (never handed over) and the pool refills with the new version.
func TestWarmTemplateChange(t *testing.T) {
	e := newEnvWith(t, func(c *daemon.Config) { c.Warm = map[string]int{"runc:debian": 1} })
	importToolsImage(t, e, "debian", "v1")
	testutil.WaitFor(t, 90*time.Second, "the debian pool to fill", func() bool { return e.poolStat("runc", "debian").Ready == 1 })
	old := e.warmOf("runc")
	importToolsImage(t, e, "debian", "v2")
	testutil.WaitFor(t, 90*time.Second, "the pool to refill with v2", func() bool {
		s := e.poolStat("runc", "debian")
		return s.Stale == 1 && s.Ready == 1 && s.Built == 2
	})
	sb, err := e.c.Create(context.Background(), v1.CreateSandboxRequest{Template: "debian"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(old, sb.ID) || e.poolStat("runc", "debian").Hits != 1 {
		t.Errorf("old warm sandbox %v, got %s, counters %+v", old, sb.ID, e.poolStat("runc", "debian"))
	}
	if out := e.mustSh(sb.ID, "cat /etc/moat-version"); out != "v2\n" {
		t.Errorf("the claimed sandbox has template version %q, want v2", out)
	}
}
