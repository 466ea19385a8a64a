package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/changes"
	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/egress/proxy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/fsutil"
	"github.com/moatdev/moat/internal/gitgate"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/tokens"
)

// SecretSource resolves stored secrets by name. Implemented by *secrets.Store.
type SecretSource interface {
	// Lookup returns a secret's value and kind, read together.
	Lookup(name string) (secrets.Value, secrets.Info, error)
}

// caValidity is how long a sandbox's interception CA is valid. The CA is kept (key file
// under CADir) for the sandbox's life, across daemon restarts.
const caValidity = 90 * 24 * time.Hour

// providers keeps the token providers of running sandboxes: by sandbox, then by the index
// of the binding in the sandbox's credentials.
type providers struct {
	mu sync.Mutex
	m  map[string]map[int]tokens.Provider
}

// set makes ps sandbox id's providers and returns those it replaces, for the caller to
// revoke.
func (p *providers) set(id string, ps map[int]tokens.Provider) []tokens.Provider {
	p.mu.Lock()
	defer p.mu.Unlock()
	var old []tokens.Provider
	for _, o := range p.m[id] {
		old = append(old, o)
	}
	if len(ps) == 0 {
		delete(p.m, id)
	} else {
		if p.m == nil {
			p.m = map[string]map[int]tokens.Provider{}
		}
		p.m[id] = ps
	}
	return old
}

func (p *providers) get(id string, i int) tokens.Provider {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id][i]
}

// gitHubProvider makes sandbox id's token provider for binding c to key, the private key
// of app. Mints and revocations are audited with the token's scope and expiry.
func (m *Manager) gitHubProvider(id string, c sandbox.Credential, key secrets.Value, app secrets.GitHubApp) (tokens.Provider, error) {
	return tokens.NewGitHubApp(tokens.GitHubAppConfig{
		AppID: app.AppID, InstallationID: app.InstallationID, APIURL: app.APIURL,
		PrivateKeyPEM: []byte(key.Reveal()),
		Repositories:  c.GitHub.Repositories, Permissions: c.GitHub.Permissions,
		HTTPClient: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			Proxy:           nil,
			TLSClientConfig: &tls.Config{RootCAs: m.cfg.RootCAs, MinVersion: tls.VersionTLS12},
		}},
		Logger: m.log,
		Events: func(kind string, exp time.Time) {
			if m.cfg.Audit == nil {
				return
			}
			perms := make([]string, 0, len(c.GitHub.Permissions))
			for _, k := range slices.Sorted(maps.Keys(c.GitHub.Permissions)) {
				perms = append(perms, k+":"+c.GitHub.Permissions[k])
			}
			m.cfg.Audit(id, "credential", fmt.Sprintf("%s: GitHub App %s installation token %s for %s (%s), expires %s",
				c.Secret, app.AppID, kind, strings.Join(c.GitHub.Repositories, ","), strings.Join(perms, ","), exp.UTC().Format(time.RFC3339)))
		},
	})
}

// revoke revokes sandbox id's tokens in the background (Close waits for it): a stop does
// not wait on GitHub.
func (m *Manager) revoke(id string, ps []tokens.Provider) {
	for _, p := range ps {
		m.revoking.Add(1)
		go func() {
			defer m.revoking.Done()
			if err := p.Revoke(context.Background()); err != nil {
				m.log.Warn("revoking a sandbox's token", "sandbox", id, "provider", p, "err", err)
			} else {
				m.log.Debug("token revoked", "sandbox", id, "provider", p)
			}
		}()
	}
}

// tokenSecret is the current token of a sandbox's binding, fetched for each request from
// the provider the sandbox has now: a provider dropped at stop (and revoked) is never
// asked again.
type tokenSecret struct {
	m     *Manager
	id    string
	index int
}

func (t tokenSecret) Fetch(ctx context.Context) (string, error) {
	p := t.m.provs.get(t.id, t.index)
	if p == nil {
		return "", errors.New("the sandbox's token provider is gone (it stopped)")
	}
	tok, err := p.Token(ctx)
	if err != nil {
		return "", err
	}
	return tok.Value.Reveal(), nil
}

// Reveal is Fetch without a caller's context; "" if it fails.
func (t tokenSecret) Reveal() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, _ := t.Fetch(ctx)
	return v
}

// cas keeps the interception CAs of running sandboxes.
type cas struct {
	mu sync.Mutex
	m  map[string]*intercept.CA
	// loading serializes the loading or making of one sandbox's CA (its file is written
	// and fsynced then), so that creates of different sandboxes never wait for each other.
	loading map[string]*sync.Mutex
}

// credentials prepares sandbox id's TLS interception: its CA (loaded from CADir, or made
// and saved there), which every sandbox gets so that credential bindings and HTTP rules,
// also those a later policy change brings, find it in the sandbox's trust store; and a
// check that every bound secret exists. A Manager without CADir has no CA to give, and
// refuses bindings and HTTP rules.
func (m *Manager) credentials(id string, spec policy.Spec, creds []sandbox.Credential) (string, error) {
	if m.cfg.CADir == "" {
		switch {
		case len(creds) > 0:
			return "", fmt.Errorf("credential bindings need the daemon's secret store: %w", errdefs.ErrUnavailable)
		case spec.HasHTTPRules():
			return "", fmt.Errorf("HTTP rules need the daemon's interception CA directory: %w", errdefs.ErrUnavailable)
		}
		return "", nil
	}
	if len(creds) > 0 && m.cfg.Secrets == nil {
		return "", fmt.Errorf("credential bindings need the daemon's secret store: %w", errdefs.ErrUnavailable)
	}
	var provs map[int]tokens.Provider
	for i, c := range creds {
		key, info, err := m.cfg.Secrets.Lookup(c.Secret)
		if err != nil {
			return "", fmt.Errorf("credential %s: %w (store it with `moat secret set %s`)", c.Secret, err, c.Secret)
		}
		switch {
		case info.GitHubApp != nil && c.GitHub == nil:
			return "", fmt.Errorf("credential %s: the secret is a GitHub App key; bind it with --github-token and name the repositories its tokens may touch: %w", c.Secret, errdefs.ErrInvalidArgument)
		case info.GitHubApp == nil && c.GitHub != nil:
			return "", fmt.Errorf("credential %s: the secret is not a GitHub App key (store one with `moat secret set %s --github-app ID --installation ID`): %w", c.Secret, c.Secret, errdefs.ErrInvalidArgument)
		case info.GitHubApp == nil:
			continue
		}
		p, err := m.gitHubProvider(id, c, key, *info.GitHubApp)
		if err != nil {
			return "", fmt.Errorf("credential %s: %w", c.Secret, err)
		}
		if provs == nil {
			provs = map[int]tokens.Provider{}
		}
		provs[i] = p
	}
	m.revoke(id, m.provs.set(id, provs))
	ca, err := m.loadCA(id)
	if err != nil {
		return "", err
	}
	return string(ca.CertPEM()), nil
}

func (m *Manager) caPath(id string) string { return filepath.Join(m.cfg.CADir, id+".pem") }

// loadCA returns sandbox id's CA, from memory, from its file, or new (and saved).
func (m *Manager) loadCA(id string) (*intercept.CA, error) {
	m.cas.mu.Lock()
	if ca := m.cas.m[id]; ca != nil {
		m.cas.mu.Unlock()
		return ca, nil
	}
	if m.cas.loading == nil {
		m.cas.loading = map[string]*sync.Mutex{}
	}
	l := m.cas.loading[id]
	if l == nil {
		l = &sync.Mutex{}
		m.cas.loading[id] = l
	}
	m.cas.mu.Unlock()
	l.Lock()
	defer l.Unlock()
	m.cas.mu.Lock()
	ca := m.cas.m[id] // made while this waited for l
	m.cas.mu.Unlock()
	if ca != nil {
		return ca, nil
	}
	ca, err := m.readOrMakeCA(id)
	if err != nil {
		return nil, err
	}
	m.cas.mu.Lock()
	defer m.cas.mu.Unlock()
	if m.cas.m == nil {
		m.cas.m = map[string]*intercept.CA{}
	}
	m.cas.m[id] = ca
	delete(m.cas.loading, id)
	return ca, nil
}

// readOrMakeCA reads sandbox id's CA from its file, or makes a new one and saves it. The
// caller holds id's loading lock.
func (m *Manager) readOrMakeCA(id string) (*intercept.CA, error) {
	path := m.caPath(id)
	data, err := os.ReadFile(path)
	var ca *intercept.CA
	switch {
	case err == nil:
		if ca, err = intercept.LoadCA(data); err != nil {
			return nil, fmt.Errorf("interception CA of sandbox %s: %w", id, err)
		}
	case errors.Is(err, os.ErrNotExist):
		if ca, err = intercept.NewCA(id, caValidity); err != nil {
			return nil, err
		}
		pem, err := ca.MarshalPEM()
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(m.cfg.CADir, 0o700); err != nil {
			return nil, err
		}
		if err := fsutil.WriteFileAtomic(path, pem, 0o600); err != nil {
			return nil, fmt.Errorf("saving the interception CA of sandbox %s: %w", id, err)
		}
	default:
		return nil, err
	}
	return ca, nil
}

// Forget drops what the boundary keeps of deleted sandbox id: its CA, its git
// quarantines, and its tokens, revoked. Idempotent.
func (m *Manager) Forget(id string) {
	m.revoke(id, m.provs.set(id, nil))
	m.forgetGit(id)
	m.cas.mu.Lock()
	delete(m.cas.m, id)
	m.cas.mu.Unlock()
	if m.cfg.CADir != "" {
		if err := os.Remove(m.caPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.log.Warn("removing the interception CA of a deleted sandbox", "sandbox", id, "err", err)
		}
	}
}

// interceptorFor returns the interceptor of sandbox b for host and port, or nil when
// neither a binding names host (on any port) nor an HTTP rule of the current phase covers
// it. Bindings that name host but not port are scrubbed there and never injected: the
// host may serve on one port what it stored from a request on another.
func (m *Manager) interceptorFor(b *boundary, creds []sandbox.Credential, host string, port uint16) proxy.Interceptor {
	var bound []boundCred
	for i, c := range creds {
		switch {
		case c.MatchesHost(host, port):
			bound = append(bound, boundCred{Credential: c, index: i})
		case c.MatchesName(host):
			bound = append(bound, boundCred{Credential: c, index: i, scrubOnly: true})
		}
	}
	if _, pol := b.current(); len(bound) == 0 && !pol.Inspects(host, port) {
		return nil
	}
	return interceptor{m: m, b: b, creds: bound, host: host, port: port}
}

// interceptor serves one sandbox's connections to one host whose requests moat sees.
type interceptor struct {
	m     *Manager
	b     *boundary
	creds []boundCred
	host  string // canonical
	port  uint16
	user  string // the sandbox user whose connection it serves (users.go)
}

// boundCred is a binding and its index in the sandbox's credentials.
type boundCred struct {
	sandbox.Credential
	index int
	// scrubOnly: the binding names the host but not this port.
	scrubOnly bool
}

// PlainHTTP says whether the host's plain HTTP connections are served (read and checked
// in clear): when an HTTP rule covers it, when a binding for this port allows plain HTTP,
// or when the bindings are all for other ports (nothing is injected here; responses are
// scrubbed). A binding for this port without plain HTTP keeps it TLS only.
func (ic interceptor) PlainHTTP() bool {
	otherPorts := len(ic.creds) > 0
	for _, c := range ic.creds {
		if !c.scrubOnly && c.PlainHTTP {
			return true
		}
		otherPorts = otherPorts && c.scrubOnly
	}
	if otherPorts {
		return true
	}
	_, pol := ic.b.current()
	return pol.Inspects(ic.host, ic.port)
}

// check decides one request with the current phase's policy and HTTP rules; requests to
// a host the rules cover are logged in the egress log, allowed or not.
func (ic interceptor) check(method, path string) (bool, string) {
	return ic.checkRequest(method, path, false)
}

// checkRequest is check; approved: the connection was let through by a person while the
// policy asks about it (ask mode), so its ask counts as allow.
func (ic interceptor) checkRequest(method, path string, approved bool) (bool, string) {
	phase, pol := ic.b.current()
	if d := pol.Decide(policy.Request{Name: ic.host, Port: ic.port}); !d.Allow && !(approved && d.Ask) {
		return false, d.Reason
	}
	if !pol.Inspects(ic.host, ic.port) {
		return true, ""
	}
	d := pol.DecideHTTP(ic.host, ic.port, method, path)
	ic.m.journal.add(&Entry{
		Time: time.Now(), Sandbox: ic.b.id, Phase: phase, Proto: "http", Name: ic.host, Port: int(ic.port),
		Allowed: d.Allow, Rule: d.Rule, Reason: method + " " + path + ": " + d.Reason, User: ic.user,
	})
	if !d.Allow {
		ic.m.log.Info("egress request denied", "sandbox", ic.b.id, "name", ic.host, "method", method, "path", path, "reason", d.Reason)
	}
	return d.Allow, d.Reason
}

func (ic interceptor) Serve(ctx context.Context, client net.Conn, head []byte, host string, port int, dial func(context.Context) (net.Conn, error)) (int64, int64, error) {
	ic.user = proxy.UserFrom(ctx)
	cfg, err := ic.config()
	if err != nil {
		return 0, 0, err
	}
	if proxy.Approved(ctx) {
		cfg.Check = func(method, path string) (bool, string) { return ic.checkRequest(method, path, true) }
	}
	return intercept.Serve(ctx, client, head, host, port, dial, cfg)
}

// replay sends r, a held push a person approved, as the sandbox's request to the host:
// with the same configuration as Serve (injections, Check, git gate), over a connection
// the sandbox's proxy checks as it would the sandbox's own (DialName).
func (ic interceptor) replay(ctx context.Context, r *http.Request) (intercept.ReplayResult, error) {
	cfg, err := ic.config()
	if err != nil {
		return intercept.ReplayResult{}, err
	}
	dial := func(ctx context.Context) (net.Conn, error) { return ic.b.proxy.DialName(ctx, ic.host, ic.port) }
	return intercept.Replay(ctx, r, ic.host, int(ic.port), dial, cfg)
}

// recordApply logs the outcome of applying an approved change in the egress log.
func (ic interceptor) recordApply(r changes.Record, rep gitgate.Report, err error) {
	phase, _ := ic.b.current()
	e := &Entry{Time: time.Now(), Sandbox: ic.b.id, Phase: phase, Proto: "git", Name: ic.host, Port: int(ic.port), Rule: "approved"}
	switch {
	case err != nil:
		e.Reason = fmt.Sprintf("%s: apply failed: %v", r.ID, err)
	case rep.Failed():
		e.Reason = fmt.Sprintf("%s: apply failed: %s", r.ID, applyFailure(rep))
	default:
		e.Allowed, e.Reason = true, fmt.Sprintf("%s: applied", r.ID)
	}
	if len(e.Reason) > maxGitReason {
		e.Reason = e.Reason[:maxGitReason] + "..."
	}
	ic.m.journal.add(e)
}

// config is the interceptor's configuration for one connection (or replayed request).
func (ic interceptor) config() (intercept.Config, error) {
	ca, err := ic.m.loadCA(ic.b.id)
	if err != nil {
		return intercept.Config{}, err
	}
	var inj []intercept.Injection
	for _, c := range ic.creds {
		// Read for each connection, so a new value or scope applies to the next one. A
		// binding the secret's scope no longer covers is not injected; within it, it takes
		// the scope's limits.
		sv, info, err := ic.m.cfg.Secrets.Lookup(c.Secret)
		if err != nil {
			return intercept.Config{}, fmt.Errorf("credential %s: %w", c.Secret, err)
		}
		// The secret's scope no longer covering the binding stops injection, not scrubbing:
		// the host may hold the value from before.
		scrubOnly := c.scrubOnly
		if !ic.b.users.Load().injects(ic.user, c.Secret) {
			// The user's own credentials do not name it: scrubbed, never injected.
			scrubOnly = true
		}
		scoped, err := sandbox.WithinScope(c.Credential, info.Scope)
		if err != nil {
			ic.m.log.Warn("credential not injected", "sandbox", ic.b.id, "host", ic.host, "err", err)
			scoped, scrubOnly = c.Credential, true
		}
		var v intercept.Secret
		if c.GitHub != nil {
			v = tokenSecret{m: ic.m, id: ic.b.id, index: c.index}
		} else {
			// A secret replaced by a GitHub App key since the sandbox started is never sent
			// as is.
			if info.GitHubApp != nil {
				return intercept.Config{}, fmt.Errorf("credential %s: the secret is now a GitHub App key; restart the sandbox with --github-token to use it", c.Secret)
			}
			v = sv
		}
		inj = append(inj, intercept.Injection{
			Secret: c.Secret, Value: v, Placeholder: c.Placeholder, Header: c.Header, Template: c.Template,
			PathPrefix: scoped.PathPrefix, Methods: scoped.Methods, PlainHTTP: c.PlainHTTP,
			PlaceholderHeader: c.PlaceholderHeader, ScrubOnly: scrubOnly, Approve: c.Approve,
		})
	}
	return intercept.Config{
		CA: ca, RootCAs: ic.m.cfg.RootCAs, Injections: inj, Log: ic.m.log.With("sandbox", ic.b.id),
		Check: ic.check, Upstreams: ic.m.upstreamsFor(ic.b, ic.user), PlainHTTP: ic.PlainHTTP(),
		Git:     &intercept.GitGate{Policy: ic.b.git, Record: ic.recordGit, Objects: ic.m.gitObjects(ic.b)},
		Approve: ic.approveCredential,
		Audit: func(u intercept.Use) {
			if o := ic.m.cfg.Observer; o != nil && u.Injected {
				o.CredentialInjected()
			}
			if ic.m.cfg.Audit != nil && u.Injected {
				by := ""
				if ic.user != "" {
					by = " by user " + ic.user
				}
				ic.m.cfg.Audit(ic.b.id, "credential", fmt.Sprintf("%s %s %s://%s%s → %d%s", u.Secret, u.Method, u.Scheme, u.Host, u.Path, u.Status, by))
			}
		},
	}, nil
}

// recordGit logs one decision of the git gate in the egress log (proto "git": the
// repository, each ref with its rule, the reason of the first refusal) and in the audit
// log.
func (ic interceptor) recordGit(ev intercept.GitEvent) {
	phase, _ := ic.b.current()
	e := &Entry{Time: time.Now(), Sandbox: ic.b.id, Phase: phase, Proto: "git", Name: ic.host, Port: int(ic.port)}
	if ev.Err != nil {
		e.Rule, e.Reason = "invalid", fmt.Sprintf("%s %s: %v", ev.Service, ev.Repo, ev.Err)
	} else {
		e.Allowed = ev.Decision.Allow
		e.Rule, e.Reason = gitgate.RuleAgentPrefix, gitSummary(ev.Repo, ev.Decision)
		if r := ev.Decision.Refused(); len(r) > 0 {
			e.Rule = r[0].Rule
		}
	}
	if ev.Held {
		e.Reason = "held for approval as " + ev.ChangeID + ": " + e.Reason
	}
	if len(e.Reason) > maxGitReason {
		e.Reason = e.Reason[:maxGitReason] + "..."
	}
	ic.m.journal.add(e)
	ic.m.addChange(ic.b.id, ev)
	if ic.m.cfg.Audit != nil {
		verdict := "allowed"
		switch {
		case ev.Held:
			verdict = "held"
		case !e.Allowed:
			verdict = "refused"
		}
		d := fmt.Sprintf("git %s to %s:%d %s (%s): %s", ev.Service, ic.host, ic.port, verdict, e.Rule, e.Reason)
		if ev.ChangeID != "" {
			d += " [change " + ev.ChangeID + "]"
		}
		ic.m.cfg.Audit(ic.b.id, "git", d)
	}
}

// maxGitReason bounds the text of a git gate entry (a push may name 256 refs).
const maxGitReason = 4096

// gitSummary is a push decision in one line: "push /repo.git: refs/heads/x: agent-prefix;
// refs/heads/main: outside-prefix (this sandbox may push only ...)".
func gitSummary(repo string, d gitgate.Decision) string {
	parts := make([]string, 0, len(d.Verdicts))
	for _, v := range d.Verdicts {
		p := v.Command.Ref + ": " + v.Rule
		if !v.Allow && v.Rule != gitgate.RuleAllOrNothing {
			p += " (" + v.Reason + ")"
		}
		parts = append(parts, p)
	}
	return "push " + repo + ": " + strings.Join(parts, "; ")
}
