package daemon_test

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/internal/doctor"
	"github.com/moatdev/moat/internal/testutil"
	"github.com/moatdev/moat/sdk"
)

// TestCheckpointFallback, with runc and runsc: on a host where neither runtime can
// checkpoint a moat sandbox's memory (runc: CRIU; runsc: hostinet), `moat checkpoint` is a
// filesystem snapshot saying so — method "filesystem", the runtime's reason, the same
// reason `moat doctor` gives — and the sandbox goes on undisturbed (a background counter
// keeps counting). Restoring the checkpoint brings the files back with the sandbox's
// posture unchanged, and its processes start afresh, as the note says.
func TestCheckpointFallback(t *testing.T) {
	e := newSnapEnv(t, nil)
	ctx := context.Background()
	var rep doctor.Report
	if err := e.c.Doctor(ctx, &rep); err != nil {
		t.Fatal(err)
	}
	checks := map[string]doctor.Check{}
	for _, c := range rep.Storage {
		if strings.HasPrefix(c.Name, "memory checkpoint (") {
			checks[c.Name] = c
		}
	}
	for _, rt := range []string{"runc", "runsc"} {
		e.run(rt, func(t *testing.T, e *env) {
			check, ok := checks["memory checkpoint ("+rt+")"]
			if !ok {
				t.Fatalf("doctor has no memory checkpoint line for %s: %+v", rt, rep.Storage)
			}
			if check.OK {
				t.Skipf("%s can checkpoint memory here (%s): the fallback is not what runs", rt, check.Detail)
			}
			// The runtime cannot (runc: CRIU; runsc 2022-12: hostinet), or it could (a
			// current runsc on its own network stack) but moat's restore from memory is not
			// built: either way the checkpoint is a filesystem one, saying why.
			could := strings.Contains(check.Detail, "not built")
			want := map[string]string{"runc": "criu", "runsc": "hostinet"}[rt]
			if !could && (!strings.Contains(strings.ToLower(check.Detail), want) || check.Fix == "") {
				t.Errorf("doctor's line %+v: want the reason (%q) and a fix", check, want)
			}

			sb := e.create(v1.CreateSandboxRequest{Runtime: rt})
			e.mustSh(sb.ID, `mkdir -p ~/ck && head -c 100000 /dev/urandom > ~/ck/data && sha256sum ~/ck/data > ~/ck/sum`)
			e.mustSh(sb.ID, `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > ~/ck/count; sleep 0.05; done' >/dev/null 2>&1 &`)
			wantSum := e.mustSh(sb.ID, `cat ~/ck/sum`)
			before, _ := readPosture(t, e, sb.ID)

			cp, err := e.c.Checkpoint(ctx, sb.ID, "ck1")
			if err != nil {
				t.Fatal(err)
			}
			if cp.Method != "filesystem" {
				t.Errorf("method %q, want filesystem", cp.Method)
			}
			reason, found := strings.CutPrefix(cp.Reason, rt+": ")
			if could && !strings.Contains(reason, "not built") {
				t.Errorf("checkpoint's reason %q does not say that moat's memory restore is not built", cp.Reason)
			} else if !found || reason == "" || !could && !strings.Contains(check.Detail, reason) {
				t.Errorf("checkpoint's reason %q is not the runtime's as doctor gives it: %q", cp.Reason, check.Detail)
			}
			if !strings.Contains(cp.Note, "moat restore") || !strings.Contains(cp.Note, "afresh") {
				t.Errorf("note %q", cp.Note)
			}
			if cp.Snapshot.ID == "" || cp.Snapshot.Name != "ck1" || cp.Snapshot.Sandbox != sb.ID || cp.Snapshot.Method != "reflink" {
				t.Errorf("checkpoint's snapshot %+v", cp.Snapshot)
			}
			snaps, err := e.c.Snapshots(ctx)
			if err != nil || len(snaps) != 1 || snaps[0].ID != cp.Snapshot.ID {
				t.Errorf("snapshot ls after the checkpoint: %+v %v", snaps, err)
			}
			// The sandbox was not disturbed: still running, the counter still counts.
			got, err := e.c.Get(ctx, sb.ID)
			if err != nil || got.State != "running" {
				t.Fatalf("after the checkpoint: %+v %v", got, err)
			}
			n0 := counter(t, e, sb.ID)
			testutil.WaitFor(t, 10*time.Second, "the counter to go on", func() bool { return counter(t, e, sb.ID) > n0 })
			evs, err := e.c.Events(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !hasEvent(evs, "checkpoint", "filesystem "+cp.Snapshot.ID) {
				t.Errorf("no checkpoint event: %+v", evs)
			}

			// Restore: the files come back, the posture is the same, processes start afresh.
			e.mustSh(sb.ID, `echo changed > ~/ck/data`)
			if _, err := e.c.Restore(ctx, sb.ID, cp.Snapshot.ID); err != nil {
				t.Fatal(err)
			}
			if got := e.mustSh(sb.ID, `sha256sum ~/ck/data`); got != wantSum {
				t.Errorf("after restoring the checkpoint: %q, want %q", got, wantSum)
			}
			if ps := e.mustSh(sb.ID, `ps -eo args | grep -c "[w]hile :" || true`); strings.TrimSpace(ps) != "0" {
				t.Errorf("the counter process survived a filesystem restore (%s): the note would be wrong", ps)
			}
			after, _ := readPosture(t, e, sb.ID)
			if !reflect.DeepEqual(before, after) {
				t.Errorf("posture changed by the restore:\n%+v\n%+v", before, after)
			}
			if err := e.c.DeleteSnapshot(ctx, cp.Snapshot.ID); err != nil {
				t.Fatal(err)
			}
			if err := e.c.Delete(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// counter reads the background counter ~/ck/count of sandbox id (0 while it is rewritten).
func counter(t *testing.T, e *env, id string) int {
	t.Helper()
	n, _ := strconv.Atoi(strings.TrimSpace(e.sh(id, "", "cat ~/ck/count").stdout))
	return n
}

func hasEvent(evs []v1.Event, kind, detailPrefix string) bool {
	for _, ev := range evs {
		if ev.Kind == kind && strings.HasPrefix(ev.Detail, detailPrefix) {
			return true
		}
	}
	return false
}

// TestCheckpointOwnership: an API key cannot checkpoint another key's sandbox (404, no
// snapshot made); the owner's checkpoint is a snapshot only the owner (and the operator)
// sees.
func TestCheckpointOwnership(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newSnapEnv(t, func(c *daemon.Config) { c.Listen = addr })
	ctx := context.Background()
	keyA, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := e.c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := sdk.NewHTTP("http://"+addr, keyA.Key), sdk.NewHTTP("http://"+addr, keyB.Key)
	sb, err := a.Create(ctx, v1.CreateSandboxRequest{MemoryBytes: 256 << 20, DiskBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Checkpoint(ctx, sb.ID, "b"); !isNotFound(err) {
		t.Errorf("key B checkpoints key A's sandbox: %v, want not found", err)
	}
	if list, err := e.c.Snapshots(ctx); err != nil || len(list) != 0 {
		t.Errorf("after key B's attempt: snapshots %+v %v", list, err)
	}
	cp, err := a.Checkpoint(ctx, sb.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	if list, err := b.Snapshots(ctx); err != nil || len(list) != 0 {
		t.Errorf("key B sees %+v (%v)", list, err)
	}
	if list, err := a.Snapshots(ctx); err != nil || len(list) != 1 || list[0].ID != cp.Snapshot.ID {
		t.Errorf("key A sees %+v (%v), want its checkpoint %s", list, err, cp.Snapshot.ID)
	}
	if err := a.DeleteSnapshot(ctx, cp.Snapshot.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}
