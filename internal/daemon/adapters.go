package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/egress"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/storage"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/internal/tokens"
	"github.com/moatdev/moat/sdk"
)

var (
	_ sandbox.Secrets         = (*secrets.Store)(nil)
	_ apiserver.Authenticator = (*store.Store)(nil)
)

// events adapts the store's event and egress logs to the API.
type events struct {
	st *store.Store
	eg *egress.Manager
}

func (e events) Events(ctx context.Context, id string) ([]v1.Event, error) {
	if _, err := e.st.Get(ctx, id); err != nil {
		return nil, err
	}
	evs, err := e.st.Events(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]v1.Event, 0, len(evs))
	for _, ev := range evs {
		out = append(out, v1.Event{Seq: ev.Seq, Time: ev.Time, Kind: ev.Kind, Detail: ev.Detail})
	}
	return out, nil
}

func (e events) Egress(ctx context.Context, id string, after int64, limit int) ([]v1.EgressEntry, error) {
	e.eg.Flush() // what the proxy recorded before this call is in the answer
	list, err := e.st.Egress(ctx, id, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]v1.EgressEntry, len(list))
	for i, x := range list {
		out[i] = v1.EgressEntry{
			Seq: x.Seq, Time: x.Time, Phase: x.Phase, Proto: x.Proto, Name: x.Name, Addr: x.Addr, Port: x.Port,
			Allowed: x.Allowed, Rule: x.Rule, Reason: x.Reason, Upstream: x.Upstream, BytesUp: x.Up, BytesDown: x.Down,
			DurationMS: float64(x.Duration) / float64(time.Millisecond), Open: x.Open, Error: x.Error, User: x.User,
		}
	}
	return out, nil
}

// apiKeys adapts the store's API keys to the API.
type apiKeys struct{ st *store.Store }

func (a apiKeys) CreateAPIKey(ctx context.Context, secrets []string, max v1.KeyMaxima) (v1.APIKey, error) {
	key, k, err := a.st.CreateAPIKey(ctx, secrets, fromKeyMaxima(max))
	if err != nil {
		return v1.APIKey{}, err
	}
	out := toAPIKey(k)
	out.Key = key
	return out, nil
}

func (a apiKeys) SetAPIKeySecrets(ctx context.Context, id string, secrets []string) (v1.APIKey, error) {
	k, err := a.st.SetAPIKeySecrets(ctx, id, secrets)
	if err != nil {
		return v1.APIKey{}, err
	}
	return toAPIKey(k), nil
}

func (a apiKeys) SetAPIKeyMax(ctx context.Context, id string, max v1.KeyMaxima) (v1.APIKey, error) {
	k, err := a.st.SetAPIKeyMax(ctx, id, fromKeyMaxima(max))
	if err != nil {
		return v1.APIKey{}, err
	}
	return toAPIKey(k), nil
}

func toAPIKey(k store.APIKey) v1.APIKey {
	return v1.APIKey{ID: k.ID, Created: k.Created, Secrets: k.Secrets, Max: v1.KeyMaxima{
		MemoryBytes: k.Max.MemoryBytes, CPUs: k.Max.CPUs, Pids: k.Max.Pids, DiskBytes: k.Max.DiskBytes,
	}}
}

func fromKeyMaxima(m v1.KeyMaxima) sandbox.Limits {
	return sandbox.Limits{MemoryBytes: m.MemoryBytes, CPUs: m.CPUs, Pids: m.Pids, DiskBytes: m.DiskBytes}
}

func (a apiKeys) ListAPIKeys(ctx context.Context) ([]v1.APIKey, error) {
	keys, err := a.st.ListAPIKeys(ctx)
	if err != nil {
		return nil, err
	}
	approvers, err := a.st.APIKeyApprovers(ctx)
	if err != nil {
		return nil, err
	}
	owners, err := a.st.APIKeyOwners(ctx) // issue 17: owner names, admin keys
	if err != nil {
		return nil, err
	}
	out := make([]v1.APIKey, 0, len(keys))
	for _, k := range keys {
		ak := toAPIKey(k)
		ak.Approver = approvers[k.ID]
		ak.Owner, ak.Admin = owners[k.ID].Name, owners[k.ID].Admin
		out = append(out, ak)
	}
	return out, nil
}

// SetAPIKeyApprover gives key id the approver permission (apiserver's keyApprover).
func (a apiKeys) SetAPIKeyApprover(ctx context.Context, id string, approver bool) error {
	return a.st.SetAPIKeyApprover(ctx, id, approver)
}

// SetAPIKeyOwner gives key id its owner name and admin flag (apiserver's keyOwner).
func (a apiKeys) SetAPIKeyOwner(ctx context.Context, id, owner string, admin bool) error {
	return a.st.SetAPIKeyOwner(ctx, id, store.KeyOwner{Name: owner, Admin: admin})
}

func (a apiKeys) DeleteAPIKey(ctx context.Context, id string) error {
	return a.st.DeleteAPIKey(ctx, id)
}

// templates adapts storage's template operations to the API; changed is called after a
// template was made (the warm pools look at their templates again).
type templates struct {
	s       *storage.Store
	changed func()
	// For removal and builds (templates.go).
	m      *sandbox.Manager
	locks  *nameLocks
	client *sdk.Client // the daemon's own API on its socket (build sandboxes' RUN steps)
	log    *slog.Logger
}

func toAPITemplate(t storage.TemplateInfo) v1.Template {
	return v1.Template{Name: t.Name, Source: t.Source, Builtin: t.Builtin, Created: t.Created, Layers: t.Layers,
		Labels: t.Labels, Cmd: t.Cmd, Entrypoint: t.Entrypoint}
}

func (t templates) List(ctx context.Context) ([]v1.Template, error) {
	list, err := t.s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]v1.Template, 0, len(list))
	for _, ti := range list {
		out = append(out, toAPITemplate(ti))
	}
	return out, nil
}

func (t templates) Build(ctx context.Context, req v1.TemplateRequest, progress func(string)) (v1.Template, error) {
	return t.serialized(ctx, req.Name, progress, func() (v1.Template, error) {
		ti, err := t.s.Build(ctx, req.Name, progress, storage.BuildOptions{Mirror: req.Mirror})
		t.changed()
		return toAPITemplate(ti), err
	})
}

// Import reads a file of the daemon's host: only the operator (unix socket) may.
func (t templates) Import(ctx context.Context, req v1.TemplateRequest, progress func(string)) (v1.Template, error) {
	if !sandbox.CallerFrom(ctx).Operator {
		return v1.Template{}, fmt.Errorf("template import reads a file on the daemon's host: unix socket only: %w", errdefs.ErrPermissionDenied)
	}
	return t.serialized(ctx, req.Name, progress, func() (v1.Template, error) {
		ti, err := t.s.Import(ctx, req.Name, req.Path, progress)
		t.changed()
		return toAPITemplate(ti), err
	})
}

func (t templates) Pull(ctx context.Context, req v1.TemplateRequest, progress func(string)) (v1.Template, error) {
	return t.serialized(ctx, req.Name, progress, func() (v1.Template, error) {
		ti, err := t.s.Pull(ctx, req.Name, req.Ref, progress, storage.PullOptions{Insecure: req.Insecure})
		t.changed()
		return toAPITemplate(ti), err
	})
}

// secretStore adapts the secret store to the API; sandboxes says who binds what.
type secretStore struct {
	s         *secrets.Store
	sandboxes *sandbox.Manager
}

func (a secretStore) SetSecret(_ context.Context, name string, v secrets.Value, app *v1.GitHubApp, scope *v1.SecretScope) error {
	sc := fromAPIScope(scope)
	if app == nil {
		return a.s.Put(name, v, nil, sc)
	}
	if err := tokens.CheckApp(app.AppID, app.InstallationID, []byte(v.Reveal()), app.APIURL); err != nil {
		return fmt.Errorf("secret %s: %w", name, err)
	}
	return a.s.Put(name, v, &secrets.GitHubApp{AppID: app.AppID, InstallationID: app.InstallationID, APIURL: app.APIURL}, sc)
}

func (a secretStore) SetSecretScope(_ context.Context, name string, scope v1.SecretScope) error {
	return a.s.SetScope(name, *fromAPIScope(&scope))
}

// fromAPIScope converts a wire scope (nil stays nil); the store checks it.
func fromAPIScope(in *v1.SecretScope) *secrets.Scope {
	if in == nil {
		return nil
	}
	return &secrets.Scope{Hosts: in.Hosts, Methods: in.Methods, PathPrefix: in.PathPrefix, PlainHTTP: in.PlainHTTP, Repositories: in.Repositories, Headers: in.Headers}
}

func toAPIScope(sc *secrets.Scope) *v1.SecretScope {
	if sc == nil {
		return nil
	}
	return &v1.SecretScope{Hosts: sc.Hosts, Methods: sc.Methods, PathPrefix: sc.PathPrefix, PlainHTTP: sc.PlainHTTP, Repositories: sc.Repositories, Headers: sc.Headers}
}

func (a secretStore) ListSecrets(ctx context.Context) ([]v1.SecretInfo, error) {
	list, err := a.s.List()
	if err != nil {
		return nil, err
	}
	sbs, err := a.sandboxes.List(ctx)
	if err != nil {
		return nil, err
	}
	bindings := map[string][]v1.SecretBinding{}
	for _, sb := range sbs {
		for _, c := range sb.Credentials {
			kind := "placeholder"
			switch {
			case c.GitHub != nil:
				kind = "github"
			case c.Header != "":
				kind = "header"
			}
			bindings[c.Secret] = append(bindings[c.Secret], v1.SecretBinding{Sandbox: sb.ID, Hosts: c.Hosts, Kind: kind})
		}
	}
	out := make([]v1.SecretInfo, 0, len(list))
	for _, in := range list {
		info := v1.SecretInfo{Name: in.Name, Created: in.Created, Updated: in.Updated, Scope: toAPIScope(in.Scope), Bindings: bindings[in.Name]}
		if info.Bindings == nil {
			info.Bindings = []v1.SecretBinding{}
		}
		if g := in.GitHubApp; g != nil {
			info.GitHubApp = &v1.GitHubApp{AppID: g.AppID, InstallationID: g.InstallationID, APIURL: g.APIURL}
		}
		out = append(out, info)
	}
	return out, nil
}

func (a secretStore) DeleteSecret(_ context.Context, name string) error {
	return a.s.Delete(name)
}
