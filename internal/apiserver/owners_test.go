package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/sdk"
)

// TestSandboxRoutesClassified: every route of the table that names a sandbox is declared
// in sandboxClasses, and only reading routes (GET) and envd (exec, terminal, files) are
// use routes: a new route, or one reclassified by mistake, fails here instead of opening a
// team sandbox to every key.
// (The E2B connect, which hands out the envd token, is a manage route.)
func TestSandboxRoutesClassified(t *testing.T) {
	envd := httptest.NewServer(http.NotFoundHandler())
	defer envd.Close()
	s := New(Deps{Sandboxes: &fakeSandboxes{envd: envd}, Log: slog.New(slog.DiscardHandler)})
	n := 0
	for _, r := range s.routes {
		if !strings.Contains(r.pattern, "/sandboxes/{id}") {
			continue
		}
		n++
		class, ok := sandboxClasses[r.pattern]
		if !ok {
			t.Errorf("route %q is not declared in sandboxClasses (owners.go): say whether a team member may call it", r.pattern)
			continue
		}
		method, _, _ := strings.Cut(r.pattern, " ")
		mayBeUse := method == "GET" || strings.Contains(r.pattern, "/envd/")
		if class == useRoute && !mayBeUse {
			t.Errorf("route %q changes the sandbox but is a use route", r.pattern)
		}
	}
	if n < 40 {
		t.Errorf("only %d routes name a sandbox: is the table read?", n)
	}
	for _, p := range []string{"DELETE /v1/sandboxes/{id}", "POST /v1/sandboxes/{id}/stop", "PUT /v1/sandboxes/{id}/policy",
		"PUT /v1/sandboxes/{id}/visibility", "POST /v1/sandboxes/{id}/fork", "DELETE /sandboxes/{id}"} {
		if sandboxClasses[p] != manageRoute {
			t.Errorf("%s is not a manage route", p)
		}
	}
	for _, p := range []string{"GET /v1/sandboxes/{id}", "/v1/sandboxes/{id}/envd/{rest...}", "GET /v1/sandboxes/{id}/egress", "GET /v1/sandboxes/{id}/events", "GET /v1/sandboxes/{id}/stats"} {
		if sandboxClasses[p] != useRoute {
			t.Errorf("%s is not a use route", p)
		}
	}
}

// TestMayAccess: the gate's decision for each kind of caller on use and manage routes of
// private and team sandboxes: 404 where the caller may not use it, 403 where it may use
// but not manage it, and an unclassified pattern is a manage route.
func TestMayAccess(t *testing.T) {
	private := &sandbox.Sandbox{ID: "sb-1", Owner: "key-a", OwnerName: "alice"}
	team := &sandbox.Sandbox{ID: "sb-2", Owner: "key-a", OwnerName: "alice", Visibility: sandbox.VisibilityTeam}
	owner, other, admin := sandbox.Caller{APIKey: "key-a"}, sandbox.Caller{APIKey: "key-b"}, sandbox.Caller{APIKey: "key-c", Admin: true}
	const use, manage, unknown = "GET /v1/sandboxes/{id}", "DELETE /v1/sandboxes/{id}", "POST /v1/sandboxes/{id}/new-thing"
	ok := func(err error) bool { return err == nil }
	for _, tc := range []struct {
		name    string
		c       sandbox.Caller
		sb      *sandbox.Sandbox
		pattern string
		want    func(error) bool
	}{
		{"owner use", owner, private, use, ok},
		{"owner manage", owner, private, manage, ok},
		{"owner unknown", owner, team, unknown, ok},
		{"other private use", other, private, use, errdefs.IsNotFound},
		{"other private manage", other, private, manage, errdefs.IsNotFound},
		{"other team use", other, team, use, ok},
		{"other team envd", other, team, "/v1/sandboxes/{id}/envd/{rest...}", ok},
		{"other team manage", other, team, manage, isDenied},
		{"other team unknown", other, team, unknown, isDenied},
		{"other team e2b kill", other, team, "DELETE /sandboxes/{id}", isDenied},
		{"admin private manage", admin, private, manage, ok},
		{"nobody team use", sandbox.Caller{}, team, use, errdefs.IsNotFound},
	} {
		err := mayAccess(tc.c, tc.sb, tc.pattern)
		if !tc.want(err) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if err := mayAccess(other, team, manage); err == nil || !strings.Contains(err.Error(), "team sandbox of alice") {
		t.Errorf("the 403 does not say whose team sandbox it is: %v", err)
	}
}

func isDenied(err error) bool {
	status, _ := StatusOf(err)
	return status == http.StatusForbidden
}

// teamSandboxes are storedSandboxes that record owner names and visibility as the manager
// does, and change visibility.
type teamSandboxes struct{ *storedSandboxes }

func (s teamSandboxes) Create(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	sb, err := s.storedSandboxes.Create(ctx, o)
	if err != nil {
		return nil, err
	}
	c := sandbox.CallerFrom(ctx)
	v, _ := sandbox.CheckVisibility(o.Visibility)
	return s.st.Update(ctx, sb.ID, func(sb *sandbox.Sandbox) error { sb.OwnerName, sb.Visibility = c.Name, v; return nil })
}

func (s teamSandboxes) SetVisibility(ctx context.Context, id, v string) (*sandbox.Sandbox, error) {
	v, err := sandbox.CheckVisibility(v)
	if err != nil {
		return nil, err
	}
	return s.st.Update(ctx, id, func(sb *sandbox.Sandbox) error { sb.Visibility = v; return nil })
}

func (k storeKeys) SetAPIKeyOwner(ctx context.Context, id, owner string, admin bool) error {
	return k.st.SetAPIKeyOwner(ctx, id, store.KeyOwner{Name: owner, Admin: admin})
}

// TestTeamVisibility: over TCP, key B neither sees nor uses key A's private sandbox (404);
// once A makes it a team sandbox B sees it (get, list, E2B list), runs a process in it and
// reads its files, but every manage route answers 403 and leaves the record as it was, and
// B cannot make it private again; admin key C (made with an owner name) sees and deletes
// it. Key creation with an owner and admin flag is checked and recorded in the audit log.
func TestTeamVisibility(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var seen []string
	envd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Host+" "+r.URL.Path)
		fmt.Fprint(w, "{}")
	}))
	defer envd.Close()
	sbs := teamSandboxes{&storedSandboxes{fakeSandboxes: fakeSandboxes{envd: envd}, st: st}}
	s := New(Deps{Sandboxes: sbs, Events: noEvents{}, Keys: storeKeys{st}, Log: slog.New(slog.DiscardHandler)})
	audit := &recordingAudit{}
	s.SetAudit(audit)
	unix := httptest.NewServer(s.Handler(nil))
	defer unix.Close()
	tcp := httptest.NewServer(s.Handler(st))
	defer tcp.Close()
	ctx := context.Background()
	op := sdk.NewHTTP(unix.URL, "")
	mkKey := func(req v1.APIKeyRequest) v1.APIKey {
		k, err := op.CreateAPIKeyWith(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return *k
	}
	keyA, keyB := mkKey(v1.APIKeyRequest{Owner: "alice"}), mkKey(v1.APIKeyRequest{Owner: "bob"})
	keyC := mkKey(v1.APIKeyRequest{Owner: "carol (admin)", Admin: true})
	if keyC.Owner != "carol (admin)" || !keyC.Admin {
		t.Errorf("the admin key's record: %+v", keyC)
	}
	if _, err := op.CreateAPIKeyWith(ctx, v1.APIKeyRequest{Owner: "evil\x1b[2J"}); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("an owner name with an escape: %v", err)
	}
	if list, _ := st.ListAPIKeys(ctx); len(list) != 3 {
		t.Errorf("a refused key was stored: %d keys", len(list))
	}
	if !audit.has("apikey", fmt.Sprintf("created %s owner=%q admin=true", keyC.ID, "carol (admin)")) {
		t.Errorf("the admin key's creation is not in the audit log: %v", audit.all())
	}

	a := sdk.NewHTTP(tcp.URL, keyA.Key)
	sb, err := a.Create(ctx, v1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Owner != keyA.ID || sb.OwnerName != "alice" || sb.Visibility != v1.VisibilityPrivate {
		t.Fatalf("key A's sandbox: owner %q %q, visibility %q", sb.Owner, sb.OwnerName, sb.Visibility)
	}
	req := func(key, method, path, body string) (int, string) {
		t.Helper()
		if strings.Contains(path, "%s") {
			path = fmt.Sprintf(path, sb.ID)
		}
		rq, err := http.NewRequest(method, tcp.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		rq.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(rq)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	listed := func(key, path string) bool {
		code, body := req(key, "GET", path, "")
		return code == 200 && strings.Contains(body, sb.ID)
	}
	// Private: B is refused as if it did not exist.
	for _, p := range []string{"/v1/sandboxes/%s", "/v1/sandboxes/%s/envd/files?path=/etc/passwd", "/sandboxes/%s"} {
		if code, _ := req(keyB.Key, "GET", p, ""); code != 404 {
			t.Errorf("key B GET %s of a private sandbox: %d", p, code)
		}
	}
	if listed(keyB.Key, "/v1/sandboxes") || listed(keyB.Key, "/v2/sandboxes") {
		t.Errorf("key B lists key A's private sandbox")
	}
	if code, body := req(keyB.Key, "PUT", "/v1/sandboxes/%s/visibility", `{"visibility":"team"}`); code != 404 {
		t.Errorf("key B makes A's private sandbox team: %d %s", code, body)
	}
	if code, body := req(keyA.Key, "PUT", "/v1/sandboxes/%s/visibility", `{"visibility":"everyone"}`); code != 400 {
		t.Errorf("a bad visibility: %d %s", code, body)
	}

	// Team: B sees and uses it, and manages nothing.
	if code, body := req(keyA.Key, "PUT", "/v1/sandboxes/%s/visibility", `{"visibility":"team"}`); code != 200 || !strings.Contains(body, `"visibility":"team"`) {
		t.Fatalf("key A makes its sandbox team: %d %s", code, body)
	}
	if code, body := req(keyB.Key, "GET", "/v1/sandboxes/%s", ""); code != 200 || !strings.Contains(body, `"owner_name":"alice"`) {
		t.Errorf("key B gets the team sandbox: %d %s", code, body)
	}
	if !listed(keyB.Key, "/v1/sandboxes") || !listed(keyB.Key, "/v2/sandboxes") {
		t.Errorf("key B does not list the team sandbox")
	}
	for _, p := range []string{"/v1/sandboxes/%s/envd/process.Process/Start", "/v1/sandboxes/%s/envd/files?path=/etc/passwd"} {
		if code, body := req(keyB.Key, "POST", p, "{}"); code != 200 {
			t.Errorf("key B POST %s: %d %s", p, code, body)
		}
	}
	if len(seen) != 2 {
		t.Errorf("moat-init saw %v, want key B's two requests", seen)
	}
	// The E2B detail shows B the sandbox but not its envd access token (which would keep
	// working after the sandbox is made private); A gets it.
	if code, body := req(keyB.Key, "GET", "/sandboxes/%s", ""); code != 200 || !strings.Contains(body, `"envdAccessToken":""`) || strings.Contains(body, "token-of-") {
		t.Errorf("key B's E2B detail of the team sandbox: %d %s", code, body)
	}
	if code, body := req(keyA.Key, "GET", "/sandboxes/%s", ""); code != 200 || !strings.Contains(body, `"envdAccessToken":"token-of-`+sb.ID) {
		t.Errorf("key A's E2B detail: %d %s", code, body)
	}
	before, _ := st.Get(ctx, sb.ID)
	for _, m := range []struct{ method, path, body string }{
		{"DELETE", "/v1/sandboxes/%s", ""},
		{"POST", "/v1/sandboxes/%s/stop", ""},
		{"POST", "/v1/sandboxes/%s/pause", ""},
		{"PUT", "/v1/sandboxes/%s/policy", `{"phase":"run"}`},
		{"PUT", "/v1/sandboxes/%s/visibility", `{"visibility":"private"}`},
		{"POST", "/v1/sandboxes/%s/fork", `{}`},
		{"POST", "/v1/sandboxes/%s/snapshot", `{}`},
		{"DELETE", "/sandboxes/%s", ""},
		{"POST", "/sandboxes/%s/timeout", `{"timeout":60}`},
		{"POST", "/sandboxes/%s/connect", `{"timeout":60}`},
	} {
		code, body := req(keyB.Key, m.method, m.path, m.body)
		if code != 403 || !strings.Contains(body, "only its owner, an admin key or the daemon's operator") {
			t.Errorf("key B %s %s of a team sandbox: %d %s, want 403", m.method, m.path, code, body)
		}
	}
	after, err := st.Get(ctx, sb.ID)
	if err != nil || after.State != before.State || after.Visibility != sandbox.VisibilityTeam || after.Policy != nil || after.ExpiresAt != nil || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("key B's refused requests changed the sandbox: %+v %v", after, err)
	}
	if len(seen) != 2 {
		t.Errorf("a refused request reached moat-init: %v", seen)
	}
	// Prune by B skips it even when stopped.
	if _, err := op.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if code, body := req(keyB.Key, "POST", "/v1/sandboxes/prune", `{}`); code != 200 || strings.Contains(body, sb.ID) {
		t.Errorf("key B prunes key A's team sandbox: %d %s", code, body)
	}
	if _, err := st.Get(ctx, sb.ID); err != nil {
		t.Fatalf("the sandbox is gone after B's prune: %v", err)
	}

	// Admin C: sees and deletes it, private again or not.
	if code, body := req(keyA.Key, "PUT", "/v1/sandboxes/%s/visibility", `{"visibility":"private"}`); code != 200 {
		t.Fatalf("key A makes its sandbox private: %d %s", code, body)
	}
	if code, _ := req(keyB.Key, "GET", "/v1/sandboxes/%s", ""); code != 404 {
		t.Errorf("key B still sees the sandbox made private: %d", code)
	}
	if !listed(keyC.Key, "/v1/sandboxes") {
		t.Errorf("admin key C does not list key A's private sandbox")
	}
	if code, body := req(keyC.Key, "DELETE", "/v1/sandboxes/%s", ""); code != 204 {
		t.Errorf("admin key C deletes it: %d %s", code, body)
	}
	if _, err := st.Get(ctx, sb.ID); !errdefs.IsNotFound(err) {
		t.Errorf("after the admin's delete: %v", err)
	}
	// The API keys' routes stay the operator's.
	if code, _ := req(keyC.Key, "GET", "/v1/apikeys", ""); code != 403 {
		t.Errorf("admin key C lists API keys over TCP: %d", code)
	}
}

// recordingAudit is an AuditLog that keeps what is recorded.
type recordingAudit struct {
	mu   sync.Mutex
	recs []string
}

func (a *recordingAudit) Audit(context.Context, string, time.Time, int64, int) ([]v1.AuditRecord, error) {
	return nil, nil
}
func (a *recordingAudit) VerifyAudit(context.Context) (v1.AuditVerification, error) {
	return v1.AuditVerification{}, nil
}
func (a *recordingAudit) Record(_ context.Context, sandbox, kind, detail string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, sandbox+"|"+kind+"|"+detail)
}
func (a *recordingAudit) has(kind, detail string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.recs {
		if strings.HasSuffix(r, "|"+kind+"|"+detail) {
			return true
		}
	}
	return false
}
func (a *recordingAudit) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.recs...)
}

// TestResolveOwnFirst: a name the caller's own sandbox has resolves to it even when
// another key's team sandbox has the same name; a name only a team sandbox has resolves
// to that one; two own sandboxes of the same name stay ambiguous.
func TestResolveOwnFirst(t *testing.T) {
	mine := &sandbox.Sandbox{ID: "sb-aaaa00000001", Owner: "key-a", Name: "web"}
	theirs := &sandbox.Sandbox{ID: "sb-bbbb00000002", Owner: "key-b", Name: "web", Visibility: sandbox.VisibilityTeam}
	only := &sandbox.Sandbox{ID: "sb-cccc00000003", Owner: "key-b", Name: "db", Visibility: sandbox.VisibilityTeam}
	list := []*sandbox.Sandbox{theirs, mine, only}
	a := sandbox.Caller{APIKey: "key-a"}
	if sb, err := resolveOwnFirst(a, list, "web"); err != nil || sb != mine {
		t.Errorf("web: %v %v", sb, err)
	}
	if sb, err := resolveOwnFirst(a, list, "db"); err != nil || sb != only {
		t.Errorf("db: %v %v", sb, err)
	}
	if _, err := resolveOwnFirst(sandbox.Caller{Operator: true}, list, "web"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("the operator's web is ambiguous: %v", err)
	}
	twin := &sandbox.Sandbox{ID: "sb-dddd00000004", Owner: "key-a", Name: "web"}
	if _, err := resolveOwnFirst(a, append(list, twin), "web"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("two own webs: %v", err)
	}
	if _, err := resolveOwnFirst(a, list, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("nope: %v", err)
	}
}

// ownerLedger is a UsageLedger that records the owner each query was limited to.
type ownerLedger struct{ owners []string }

func (l *ownerLedger) Usage(_ context.Context, _, _ time.Time, owner *string) ([]v1.UsageRow, map[string]int64, error) {
	o := "(all)"
	if owner != nil {
		o = *owner
	}
	l.owners = append(l.owners, o)
	return nil, nil, nil
}

// TestAdminUsage: an API key's GET /v1/usage is limited to its own usage, an admin key's
// and the operator's are not.
func TestAdminUsage(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	envd := httptest.NewServer(http.NotFoundHandler())
	defer envd.Close()
	s := New(Deps{Sandboxes: &fakeSandboxes{envd: envd}, Keys: storeKeys{st}, Log: slog.New(slog.DiscardHandler)})
	ledger := &ownerLedger{}
	s.SetUsage(ledger, nil)
	unix := httptest.NewServer(s.Handler(nil))
	defer unix.Close()
	tcp := httptest.NewServer(s.Handler(st))
	defer tcp.Close()
	op := sdk.NewHTTP(unix.URL, "")
	plain, err := op.CreateAPIKeyWith(context.Background(), v1.APIKeyRequest{Owner: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := op.CreateAPIKeyWith(context.Background(), v1.APIKeyRequest{Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{plain.Key, admin.Key} {
		if code, body := call(t, "GET", tcp.URL+"/v1/usage", k, nil); code != 200 {
			t.Fatalf("usage: %d %s", code, body)
		}
	}
	if code, body := call(t, "GET", unix.URL+"/v1/usage", "", nil); code != 200 {
		t.Fatalf("usage: %d %s", code, body)
	}
	if want := []string{plain.ID, "(all)", "(all)"}; !slices.Equal(ledger.owners, want) {
		t.Errorf("usage queried for %v, want %v", ledger.owners, want)
	}
}
