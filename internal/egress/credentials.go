package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/egress/proxy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/fsutil"
	"github.com/moatdev/moat/internal/sandbox"
	"github.com/moatdev/moat/internal/secrets"
)

// SecretSource resolves stored secrets by name. Implemented by *secrets.Store.
type SecretSource interface {
	Get(name string) (secrets.Value, error)
}

// caValidity is how long a sandbox's interception CA is valid. The CA is kept (key file
// under CADir) for the sandbox's life, across daemon restarts.
const caValidity = 90 * 24 * time.Hour

// cas keeps the interception CAs of sandboxes with credential bindings.
type cas struct {
	mu sync.Mutex
	m  map[string]*intercept.CA
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
	for _, c := range creds {
		if _, err := m.cfg.Secrets.Get(c.Secret); err != nil {
			return "", fmt.Errorf("credential %s: %w (store it with `moat secret set %s`)", c.Secret, err, c.Secret)
		}
	}
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
	defer m.cas.mu.Unlock()
	if ca := m.cas.m[id]; ca != nil {
		return ca, nil
	}
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
	if m.cas.m == nil {
		m.cas.m = map[string]*intercept.CA{}
	}
	m.cas.m[id] = ca
	return ca, nil
}

// Forget drops what the boundary keeps of deleted sandbox id: its CA. Idempotent.
func (m *Manager) Forget(id string) {
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
// neither a binding names host nor an HTTP rule of the current phase covers it.
func (m *Manager) interceptorFor(b *boundary, creds []sandbox.Credential, host string, port uint16) proxy.Interceptor {
	var bound []sandbox.Credential
	for _, c := range creds {
		if c.MatchesHost(host) {
			bound = append(bound, c)
		}
	}
	if _, pol := b.current(); len(bound) == 0 && !pol.Inspects(host, port) {
		return nil
	}
	return interceptor{m: m, b: b, id: b.id, creds: bound}
}

// interceptor serves one sandbox's connections to one host whose requests moat sees.
type interceptor struct {
	m     *Manager
	b     *boundary
	id    string
	creds []sandbox.Credential
}

// check decides one request with the current phase's HTTP rules; requests to a host the
// rules cover are logged in the egress log, allowed or not.
func (ic interceptor) check(host string, port int) func(method, path string) (bool, string) {
	return func(method, path string) (bool, string) {
		phase, pol := ic.b.current()
		req := policy.Request{Name: host, Port: uint16(port)}
		if d := pol.Decide(req); !d.Allow {
			return false, d.Reason
		}
		if !pol.Inspects(host, uint16(port)) {
			return true, ""
		}
		d := pol.DecideHTTP(host, uint16(port), method, path)
		e := &Entry{
			Time: time.Now(), Sandbox: ic.id, Phase: phase, Proto: "http", Name: host, Port: port,
			Allowed: d.Allow, Rule: d.Rule, Reason: method + " " + path + ": " + d.Reason,
		}
		if !d.Allow {
			ic.m.log.Info("egress request denied", "sandbox", ic.id, "name", host, "method", method, "path", path, "reason", d.Reason)
		}
		ic.m.journal.add(e)
		return d.Allow, d.Reason
	}
}

func (ic interceptor) Serve(ctx context.Context, client net.Conn, head []byte, host string, port int, dial func(context.Context) (net.Conn, error)) (int64, int64, error) {
	ca, err := ic.m.loadCA(ic.id)
	if err != nil {
		return 0, 0, err
	}
	var inj []intercept.Injection
	for _, c := range ic.creds {
		v, err := ic.m.cfg.Secrets.Get(c.Secret)
		if err != nil {
			return 0, 0, fmt.Errorf("credential %s: %w", c.Secret, err)
		}
		inj = append(inj, intercept.Injection{
			Secret: c.Secret, Value: v, Placeholder: c.Placeholder, Header: c.Header, Template: c.Template,
			PathPrefix: c.PathPrefix, Methods: c.Methods,
		})
	}
	return intercept.Serve(ctx, client, head, host, port, dial, intercept.Config{
		CA: ca, RootCAs: ic.m.cfg.RootCAs, Injections: inj, Log: ic.m.log.With("sandbox", ic.id),
		Check: ic.check(host, port),
		Audit: func(u intercept.Use) {
			if ic.m.cfg.Audit != nil && u.Injected {
				ic.m.cfg.Audit(ic.id, fmt.Sprintf("%s %s https://%s%s → %d", u.Secret, u.Method, u.Host, u.Path, u.Status))
			}
		},
	})
}
