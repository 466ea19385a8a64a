package daemon_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/daemon"
	"github.com/moatdev/moat/sdk"
)

// TestNamesAcrossOwners: names are unique per owner, and names and ID prefixes resolve only
// among the caller's sandboxes. Over the TCP listener, keys A and B each name a sandbox "web"
// (A's from the warm pool); A's second "web" is refused; A reaches its own by name (exec
// through the envd route too) but not B's by B's ID prefix; the operator, who sees both, is
// told the name is ambiguous with both IDs. A's prune leaves B's stopped sandbox; B's
// deletes it. Two creates racing for one name: exactly one wins.
func TestNamesAcrossOwners(t *testing.T) {
	addr := freeLoopbackAddr(t)
	e := newEnvWith(t, func(c *daemon.Config) {
		c.Listen = addr
		c.Warm = map[string]int{"runc": 1}
	})
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
	req := v1.CreateSandboxRequest{Name: "web", Labels: map[string]string{"team": "x"}}
	sa, err := a.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sbB, err := b.Create(ctx, v1.CreateSandboxRequest{Name: "web", MemoryBytes: 512 << 20, DiskBytes: 256 << 20})
	if err != nil {
		t.Fatalf("key B's sandbox named like key A's: %v", err)
	}
	if _, err := a.Create(ctx, req); !isAlreadyExists(err) || !strings.Contains(err.Error(), sa.ID) {
		t.Errorf("key A's second web: %v, want already exists naming %s", err, sa.ID)
	}
	if got, err := a.Get(ctx, "web"); err != nil || got.ID != sa.ID || got.Labels["team"] != "x" {
		t.Errorf("key A's web: %+v %v", got, err)
	}
	if got, err := b.Get(ctx, "web"); err != nil || got.ID != sbB.ID {
		t.Errorf("key B's web: %+v %v", got, err)
	}
	if code, err := a.Exec(ctx, "web", sdk.ExecRequest{Cmd: "/bin/true"}); err != nil || code != 0 {
		t.Errorf("exec by name: %d %v", code, err)
	}
	for _, ref := range []string{sbB.ID[:9], sbB.ID} {
		if _, err := a.Get(ctx, ref); !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("key A reached key B's sandbox by %q: %v", ref, err)
		}
	}
	_, err = e.c.Get(ctx, "web")
	if err == nil || !strings.Contains(err.Error(), sa.ID) || !strings.Contains(err.Error(), sbB.ID) {
		t.Errorf("the operator's ambiguous name: %v, want both IDs", err)
	}
	if list, err := a.ListFiltered(ctx, []string{"name=web"}); err != nil || len(list) != 1 || list[0].ID != sa.ID {
		t.Errorf("key A's ls --filter name=web: %+v %v", list, err)
	}
	if _, err := b.Stop(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if res, err := a.Prune(ctx, v1.PruneRequest{}); err != nil || len(res.Deleted) != 0 {
		t.Errorf("key A's prune: %+v %v, want nothing (B's stopped sandbox is not A's)", res, err)
	}
	if res, err := b.Prune(ctx, v1.PruneRequest{}); err != nil || len(res.Deleted) != 1 || res.Deleted[0].ID != sbB.ID {
		t.Errorf("key B's prune: %+v %v", res, err)
	}

	// The store's unique index holds when two creates pass the manager's check at once.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	ids := make([]string, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := e.c.Create(ctx, v1.CreateSandboxRequest{Name: "race", MemoryBytes: 512 << 20, DiskBytes: 256 << 20})
			errs[i] = err
			if err == nil {
				ids[i] = sb.ID
			}
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !isAlreadyExists(err):
			t.Errorf("racing create %d: %v, want already exists", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d racing creates of one name succeeded (%v, %v)", won, ids, errs)
	}
}

// isAlreadyExists reports whether err is the daemon's already_exists class.
func isAlreadyExists(err error) bool {
	var se *sdk.Error
	return errors.As(err, &se) && se.Code == "already_exists"
}
