package apiserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/safegit"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/sdk"
)

// fakeChanges serves one held change per sandbox, ch-0123abcd, and counts calls.
type fakeChanges struct {
	mu      sync.Mutex
	calls   int
	decided map[string]string
}

func (f *fakeChanges) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeChanges) rec(id, cid string) (changes.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if cid != "ch-0123abcd" {
		return changes.Record{}, fmt.Errorf("change %s: %w", cid, errdefs.ErrNotFound)
	}
	d := changes.Held
	if f.decided[id] != "" {
		d = f.decided[id]
	}
	return changes.Record{ID: cid, Sandbox: id, Kind: changes.KindPush, Decision: d, Time: time.Unix(1, 0),
		Refs: []changes.Ref{{Ref: "refs/heads/agent/x/w", Files: 1, Added: 2, Report: &safegit.ChangeReport{Tip: "t", Files: []safegit.FileChange{{Path: "a", Added: 2}}}}}}, nil
}

func (f *fakeChanges) Changes(id string) ([]changes.Record, error) {
	r, _ := f.rec(id, "ch-0123abcd")
	return []changes.Record{r}, nil
}
func (f *fakeChanges) Change(id, cid string) (changes.Record, error) { return f.rec(id, cid) }
func (f *fakeChanges) ChangePatch(_ context.Context, id, cid, ref string) (io.Reader, error) {
	if _, err := f.rec(id, cid); err != nil {
		return nil, err
	}
	return strings.NewReader("diff --git a/a b/a\n+x\n"), nil
}
func (f *fakeChanges) decide(id, cid, to string) (changes.Record, error) {
	r, err := f.rec(id, cid)
	if err != nil {
		return r, err
	}
	if _, err := changes.Transition(r.Decision, map[string]string{changes.Approved: changes.ActApprove, changes.Denied: changes.ActDeny}[to]); err != nil {
		return changes.Record{}, err
	}
	f.mu.Lock()
	if f.decided == nil {
		f.decided = map[string]string{}
	}
	f.decided[id] = to
	f.mu.Unlock()
	r.Decision = to
	return r, nil
}
func (f *fakeChanges) ApproveChange(_ context.Context, id, cid, by, reason string) (changes.Record, error) {
	return f.decide(id, cid, changes.Approved)
}
func (f *fakeChanges) DenyChange(id, cid, by, reason string) (changes.Record, error) {
	return f.decide(id, cid, changes.Denied)
}

// TestChangeRoutes: the list omits reports, one change has them, the patch is
// text/x-patch, a bad change id is 400, an unknown one 404, deciding twice 409, and a
// change of a sandbox that does not exist 404.
func TestChangeRoutes(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sbs := &storedSandboxes{st: st}
	s := New(Deps{Sandboxes: sbs, Events: noEvents{}, Keys: storeKeys{st}, Log: slog.New(slog.DiscardHandler)})
	s.SetChanges(&fakeChanges{})
	srv := httptest.NewServer(s.Handler(nil))
	defer srv.Close()
	ctx := context.Background()
	c := sdk.NewHTTP(srv.URL, "")
	sb, err := c.Create(ctx, v1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Changes(ctx, sb.ID)
	if err != nil || len(list) != 1 || list[0].Refs[0].Report != nil || list[0].Added != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	ch, err := c.Change(ctx, sb.ID, "ch-0123abcd")
	if err != nil || ch.Refs[0].Report == nil || ch.Refs[0].Report.Files[0].Path != "a" {
		t.Fatalf("change: %+v %v", ch, err)
	}
	resp, err := http.Get(srv.URL + "/v1/sandboxes/" + sb.ID + "/changes/ch-0123abcd/patch")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/x-patch") || string(body) != "diff --git a/a b/a\n+x\n" {
		t.Errorf("patch: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	for path, want := range map[string]int{
		"/v1/sandboxes/" + sb.ID + "/changes/ch-ffffffff":       404,
		"/v1/sandboxes/" + sb.ID + "/changes/..%2f..%2fx":       400,
		"/v1/sandboxes/" + sb.ID + "/changes/CH-0123ABCD":       400,
		"/v1/sandboxes/sb-000000000999/changes/ch-0123abcd":     404,
		"/v1/sandboxes/sb-000000000999/changes":                 404,
		"/v1/sandboxes/" + sb.ID + "/changes/ch-ffffffff/patch": 404,
	} {
		if code, body := call(t, "GET", srv.URL+path, "", nil); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		}
	}
	if ch, err := c.DenyChange(ctx, sb.ID, "ch-0123abcd", "no"); err != nil || ch.Decision != "denied" {
		t.Fatalf("deny: %+v %v", ch, err)
	}
	if code, body := call(t, "POST", srv.URL+"/v1/sandboxes/"+sb.ID+"/changes/ch-0123abcd/approve", "", nil); code != 409 {
		t.Errorf("approve after deny: %d %s, want 409", code, body)
	}
	resp, err = http.Post(srv.URL+"/v1/sandboxes/"+sb.ID+"/changes/ch-0123abcd/deny", "application/json", strings.NewReader(`{"reason": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("a bad body: %d, want 400", resp.StatusCode)
	}

	// The owner's API key may deny its sandbox's held change, never approve it: the agent
	// may hold that key.
	fc := &fakeChanges{}
	s.SetChanges(fc)
	tcp := httptest.NewServer(s.Handler(st))
	defer tcp.Close()
	key, err := c.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owned, err := sdk.NewHTTP(tcp.URL, key.Key).Create(ctx, v1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	approve := tcp.URL + "/v1/sandboxes/" + owned.ID + "/changes/ch-0123abcd/approve"
	if code, body := call(t, "POST", approve, key.Key, nil); code != 403 || !strings.Contains(body, "operator") {
		t.Errorf("approve with the owner's key: %d %s, want 403", code, body)
	}
	if n := fc.count(); n != 0 {
		t.Errorf("a key's approve reached the change records %d times", n)
	}
	if code, body := call(t, "POST", tcp.URL+"/v1/sandboxes/"+owned.ID+"/changes/ch-0123abcd/deny", key.Key, nil); code != 200 {
		t.Errorf("deny with the owner's key: %d %s, want 200", code, body)
	}
}
