package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/sdk"
)

// grantingSandboxes creates sandboxes after the manager's own grant check
// (sandbox.CheckGrants on the caller the request's context carries).
type grantingSandboxes struct{ fakeSandboxes }

func (g *grantingSandboxes) Create(ctx context.Context, o sandbox.CreateOptions) (*sandbox.Sandbox, error) {
	if err := sandbox.CheckGrants(sandbox.CallerFrom(ctx), o.Credentials); err != nil {
		return nil, err
	}
	return &sandbox.Sandbox{ID: "sb-new", State: sandbox.StateRunning, Runtime: "runc", Credentials: o.Credentials}, nil
}

// storeKeys serves the API key routes from the real store (as the daemon's adapter does).
type storeKeys struct{ st *store.Store }

func (k storeKeys) CreateAPIKey(ctx context.Context, secrets []string, _ v1.KeyMaxima) (v1.APIKey, error) {
	key, a, err := k.st.CreateAPIKey(ctx, secrets, sandbox.Limits{})
	return v1.APIKey{ID: a.ID, Key: key, Created: a.Created, Secrets: a.Secrets}, err
}

func (k storeKeys) ListAPIKeys(ctx context.Context) ([]v1.APIKey, error) {
	list, err := k.st.ListAPIKeys(ctx)
	var out []v1.APIKey
	for _, a := range list {
		out = append(out, v1.APIKey{ID: a.ID, Created: a.Created, Secrets: a.Secrets})
	}
	return out, err
}

func (k storeKeys) DeleteAPIKey(ctx context.Context, id string) error {
	return k.st.DeleteAPIKey(ctx, id)
}

func (k storeKeys) SetAPIKeyMax(ctx context.Context, id string, _ v1.KeyMaxima) (v1.APIKey, error) {
	a, err := k.st.SetAPIKeyMax(ctx, id, sandbox.Limits{})
	return v1.APIKey{ID: a.ID, Created: a.Created, Secrets: a.Secrets}, err
}

func (k storeKeys) SetAPIKeySecrets(ctx context.Context, id string, secrets []string) (v1.APIKey, error) {
	a, err := k.st.SetAPIKeySecrets(ctx, id, secrets)
	return v1.APIKey{ID: a.ID, Created: a.Created, Secrets: a.Secrets}, err
}

// operatorKeys is an authenticator that claims every key is the operator: the gate must
// not believe it.
type operatorKeys struct{}

func (operatorKeys) Authenticate(context.Context, string) (sandbox.Caller, error) {
	return sandbox.Caller{Operator: true, APIKey: "key-claims"}, nil
}

// TestCreateGrants: over TCP an API key binds only the secrets it is granted (none by
// default), answered 403 naming the secret, the key and the command that grants it; the
// unix socket binds any; grants are changed on the unix socket only.
func TestCreateGrants(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := New(Deps{Sandboxes: &grantingSandboxes{}, Keys: storeKeys{st}, Log: slog.New(slog.DiscardHandler)})
	unix := httptest.NewServer(s.Handler(nil))
	defer unix.Close()
	tcp := httptest.NewServer(s.Handler(st))
	defer tcp.Close()
	claims := httptest.NewServer(s.Handler(operatorKeys{}))
	defer claims.Close()

	ctx := context.Background()
	op := sdk.NewHTTP(unix.URL, "")
	none, err := op.CreateAPIKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	granted, err := op.CreateAPIKey(ctx, "A_TOKEN")
	if err != nil {
		t.Fatal(err)
	}
	if len(none.Secrets) != 0 || strings.Join(granted.Secrets, ",") != "A_TOKEN" {
		t.Fatalf("created keys grant %v and %v", none.Secrets, granted.Secrets)
	}
	bind := func(names ...string) v1.CreateSandboxRequest {
		var req v1.CreateSandboxRequest
		for _, n := range names {
			req.Credentials = append(req.Credentials, v1.Credential{Secret: n, Hosts: []string{"api.test"}})
		}
		return req
	}
	create := func(c *sdk.Client, names ...string) error {
		_, err := c.Create(ctx, bind(names...))
		return err
	}
	refused := func(what string, err error, secret, keyID string) {
		t.Helper()
		var e *sdk.Error
		if !errors.As(err, &e) || e.Status != 403 || !errors.Is(err, sdk.ErrPermissionDenied) ||
			!strings.Contains(e.Message, "API key "+keyID+" is not granted secret "+secret) || !strings.Contains(e.Message, "moat apikey grant "+keyID+" "+secret) {
			t.Errorf("%s: %v, want 403 naming %s, %s and the grant command", what, err, secret, keyID)
		}
	}

	noGrants := sdk.NewHTTP(tcp.URL, none.Key)
	refused("a key without grants binds A_TOKEN", create(noGrants, "A_TOKEN"), "A_TOKEN", none.ID)
	if err := create(noGrants); err != nil {
		t.Errorf("a key without grants, no bindings: %v", err)
	}
	withGrant := sdk.NewHTTP(tcp.URL, granted.Key)
	if err := create(withGrant, "A_TOKEN"); err != nil {
		t.Errorf("a key granted A_TOKEN binds it: %v", err)
	}
	refused("a key granted A_TOKEN binds B_TOKEN too", create(withGrant, "A_TOKEN", "B_TOKEN"), "B_TOKEN", granted.ID)
	if err := create(op, "A_TOKEN", "B_TOKEN"); err != nil {
		t.Errorf("the unix socket binds any secret: %v", err)
	}
	if err := create(sdk.NewHTTP(claims.URL, "whatever"), "A_TOKEN"); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("an authenticator's claim to be the operator was believed: %v", err)
	}

	// Grants change on the unix socket only, and apply to the key's next request.
	if _, err := withGrant.SetAPIKeySecrets(ctx, none.ID, []string{"B_TOKEN"}); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("a TCP client changed grants: %v", err)
	}
	if _, err := withGrant.CreateAPIKey(ctx, "B_TOKEN"); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("a TCP client made a key: %v", err)
	}
	if k, err := op.SetAPIKeySecrets(ctx, none.ID, []string{"B_TOKEN"}); err != nil || strings.Join(k.Secrets, ",") != "B_TOKEN" {
		t.Fatalf("SetAPIKeySecrets: %+v, %v", k, err)
	}
	if err := create(noGrants, "B_TOKEN"); err != nil {
		t.Errorf("after the grant: %v", err)
	}
	refused("after the grant, another secret", create(noGrants, "A_TOKEN"), "A_TOKEN", none.ID)
	if _, err := op.SetAPIKeySecrets(ctx, none.ID, nil); err != nil {
		t.Fatal(err)
	}
	refused("after revoking all", create(noGrants, "B_TOKEN"), "B_TOKEN", none.ID)

	if _, err := op.CreateAPIKey(ctx, "not-a-name"); !errors.Is(err, sdk.ErrInvalidArgument) {
		t.Errorf("a grant of an invalid name: %v", err)
	}
	if _, err := op.SetAPIKeySecrets(ctx, "key-nope", []string{"A_TOKEN"}); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("grants of an unknown key: %v", err)
	}
	list, err := op.APIKeys(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("APIKeys: %+v, %v", list, err)
	}
	for _, k := range list {
		if k.ID == granted.ID && strings.Join(k.Secrets, ",") != "A_TOKEN" || k.ID == none.ID && len(k.Secrets) != 0 || k.Secrets == nil {
			t.Errorf("listed %+v", k)
		}
	}
}
