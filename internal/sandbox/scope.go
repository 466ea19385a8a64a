package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/secrets"
)

// Caller is who asks the daemon for something, as the API edge authenticated it: the
// operator on the unix socket, or a TCP client with an API key. The zero Caller may bind no
// secret.
type Caller struct {
	// Operator is the unix socket's peer (root on the daemon's host): it may bind every
	// secret, each within its scope.
	Operator bool
	// APIKey is the id of the API key a TCP client authenticated with.
	APIKey string
	// Secrets are the secrets that API key is granted: the only ones it may bind.
	Secrets []string
	// Max are the API key's maxima of the limits its sandboxes may have (zero fields:
	// only the daemon's and the host's apply).
	Max Limits
	// Approver: the API key may decide approvals (internal/approvals), except those it
	// asked or of sandboxes it owns.
	Approver bool
	// Name is the API key's owner name (shown as its sandboxes' owner; owners.go) and
	// Admin whether the key may see, use and manage every sandbox, as the operator.
	Name  string
	Admin bool
}

type callerKey struct{}

// WithCaller returns ctx carrying c. Only the API edge calls it, once per request.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries; the zero Caller (no grants) if none.
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// Owner is the owner a sandbox created by c records: c's API key, or "" for the operator
// (and for a caller without identity, whose sandbox only the operator can then use).
func (c Caller) Owner() string {
	if c.Operator {
		return ""
	}
	return c.APIKey
}

// CheckGrants returns an error of class errdefs.ErrPermissionDenied, naming the first
// secret and how to grant it, unless c may bind every secret creds name: the operator may
// bind any, an API key those it is granted, anybody else none.
func CheckGrants(c Caller, creds []Credential) error {
	if c.Operator {
		return nil
	}
	for _, cr := range creds {
		if slices.Contains(c.Secrets, cr.Secret) {
			continue
		}
		if c.APIKey == "" {
			return fmt.Errorf("credential %s: this request carries no identity that may bind secrets: %w", cr.Secret, errdefs.ErrPermissionDenied)
		}
		return fmt.Errorf("credential %s: API key %s is not granted secret %s; the daemon's operator can grant it with `moat apikey grant %s %s`: %w",
			cr.Secret, c.APIKey, cr.Secret, c.APIKey, cr.Secret, errdefs.ErrPermissionDenied)
	}
	return nil
}

// WithinScope returns binding c (hosts normalized, as validateCredentials leaves them)
// limited to sc, the scope of the secret it binds, or an error of class
// errdefs.ErrPermissionDenied naming the secret, what lies outside and the fix when c
// could send the value anywhere sc does not allow:
//
//   - hosts: every host c names must be within a host of sc: a name within itself or a
//     wildcard above it (a.example.org within *.example.org), a wildcard within the same or
//     a wider wildcard (*.a.example.org within *.example.org; *.org is not);
//   - ports, as in bindings (no port: 443, and 80 with plain HTTP): each port c may use for
//     a host must be one sc gives a host covering it; plain HTTP only if sc allows it;
//   - methods: c's must be among sc's; c without methods takes sc's;
//   - path prefix: c's must start with sc's; c without one takes sc's;
//   - a GitHub App binding's repositories must be among sc's (GitHub's names ignore case)
//     when sc names some;
//   - header: the one c writes the value into (Header for a header binding, else
//     PlaceholderHeader, else Authorization) must be among sc's (AllowedHeaders; names
//     ignore case), and a header binding's template must be "{{value}}" or
//     "SCHEME {{value}}" (SCHEME a token, as Bearer), so the value is the header's whole
//     credential and not part of a URL or other data a host may log or send back.
//
// A nil sc (a secret stored without one) admits no binding. The result shares nothing
// with c's slices.
func WithinScope(c Credential, sc *secrets.Scope) (Credential, error) {
	deny := func(format string, args ...any) (Credential, error) {
		return Credential{}, fmt.Errorf("credential %s: "+format+": %w", append(append([]any{c.Secret}, args...), errdefs.ErrPermissionDenied)...)
	}
	if sc == nil {
		return deny("the secret has no scope (it was stored before moat kept one, or without hosts), so it cannot be bound; the daemon's operator can say where it may be sent with `moat secret scope %s --hosts HOST[,HOST...]`", c.Secret)
	}
	widen := fmt.Sprintf("bind it within the scope, or the daemon's operator can widen it with `moat secret scope %s ...`", c.Secret)
	if c.PlainHTTP && !sc.PlainHTTP {
		return deny("plain HTTP is outside the secret's scope (TLS only): drop plain_http (http:// on the command line), or %s --plain-http", widen)
	}
	for _, h := range c.Hosts {
		name, ports := hostPorts(h, c.PlainHTTP)
		for _, p := range ports {
			if !scopeAllows(sc, name, p) {
				return deny("host %s (port %d) is outside the secret's scope (%s); %s", name, p, strings.Join(sc.Hosts, ", "), widen)
			}
		}
	}
	out := c
	out.Hosts = slices.Clone(c.Hosts)
	out.Methods = slices.Clone(c.Methods)
	if len(sc.Methods) > 0 {
		if len(out.Methods) == 0 {
			out.Methods = slices.Clone(sc.Methods)
		}
		for _, m := range out.Methods {
			if !slices.Contains(sc.Methods, m) {
				return deny("method %s is outside the secret's scope (%s); %s", m, strings.Join(sc.Methods, ", "), widen)
			}
		}
	}
	if sc.PathPrefix != "" {
		if out.PathPrefix == "" {
			out.PathPrefix = sc.PathPrefix
		}
		if !strings.HasPrefix(out.PathPrefix, sc.PathPrefix) {
			return deny("path prefix %s is outside the secret's scope (%s); %s", out.PathPrefix, sc.PathPrefix, widen)
		}
	}
	header := c.Header
	if header == "" {
		header = c.PlaceholderHeader
	}
	if header == "" {
		header = secrets.DefaultHeader
	}
	allowed := sc.AllowedHeaders()
	if !slices.ContainsFunc(allowed, func(h string) bool { return strings.EqualFold(h, header) }) {
		return deny("header %s is outside the secret's scope (the value may be written into %s only); bind it to one of those, or %s --headers HEADER[,HEADER...]", header, strings.Join(allowed, ", "), widen)
	}
	if c.Header != "" && !credentialTemplate(c.Template) {
		return deny("header template %.80q is not allowed: the value must be the header's whole credential, as \"{{value}}\" or \"SCHEME {{value}}\" (e.g. \"Bearer {{value}}\")", c.Template)
	}
	if g := c.GitHub; g != nil {
		cp := *g
		cp.Repositories = slices.Clone(g.Repositories)
		out.GitHub = &cp
		if len(sc.Repositories) > 0 {
			for _, r := range g.Repositories {
				if !slices.ContainsFunc(sc.Repositories, func(s string) bool { return strings.EqualFold(s, r) }) {
					return deny("repository %s is outside the GitHub App key's scope (%s); %s", r, strings.Join(sc.Repositories, ", "), widen)
				}
			}
		}
	}
	return out, nil
}

// credentialTemplate reports whether a header binding's template t is "{{value}}" or
// "SCHEME {{value}}": one token (an authentication scheme), one space, the value.
func credentialTemplate(t string) bool {
	if t == "{{value}}" {
		return true
	}
	scheme, ok := strings.CutSuffix(t, " {{value}}")
	return ok && intercept.IsToken(scheme)
}

// hostPorts splits a normalized host entry into its name pattern and the ports it covers:
// the one it names, else 443, and 80 too when plain is set.
func hostPorts(h string, plain bool) (string, []uint16) {
	name, portText, hasPort := strings.Cut(h, ":")
	if hasPort {
		p, _ := strconv.ParseUint(portText, 10, 16)
		return name, []uint16{uint16(p)}
	}
	if plain {
		return name, []uint16{443, 80}
	}
	return name, []uint16{443}
}

// scopeAllows reports whether some host of sc covers every name pattern name matches, on
// port.
func scopeAllows(sc *secrets.Scope, name string, port uint16) bool {
	for _, h := range sc.Hosts {
		sname, ports := hostPorts(h, sc.PlainHTTP)
		if slices.Contains(ports, port) && nameWithin(name, sname) {
			return true
		}
	}
	return false
}

// nameWithin reports whether every host name pattern b matches ("HOST" itself, "*.D" any
// name ending in ".D") is matched by pattern s.
func nameWithin(b, s string) bool {
	suffix, wild := strings.CutPrefix(s, "*.")
	if !wild {
		return b == s
	}
	// "*.E" matches names ending in ".E": within "*.S" when ".E" ends in ".S".
	if e, ok := strings.CutPrefix(b, "*."); ok {
		return strings.HasSuffix("."+e, "."+suffix)
	}
	return strings.HasSuffix(b, "."+suffix)
}

// checkBindings decides whether the caller of ctx may create a sandbox with creds (hosts
// normalized): each secret must be granted to the caller and exist, and each binding must
// lie within its secret's scope. It narrows creds in place to their scopes (methods and path
// prefix a binding leaves out). Errors name the secret and the fix: permission denied,
// not found, or unavailable without a secret store.
func (m *Manager) checkBindings(ctx context.Context, creds []Credential) error {
	if len(creds) == 0 {
		return nil
	}
	if err := CheckGrants(CallerFrom(ctx), creds); err != nil {
		return err
	}
	if m.cfg.Secrets == nil {
		return fmt.Errorf("credential bindings need the daemon's secret store: %w", errdefs.ErrUnavailable)
	}
	for i, c := range creds {
		info, err := m.cfg.Secrets.Stat(c.Secret)
		if errdefs.IsNotFound(err) {
			return fmt.Errorf("credential %s: %w (the daemon's operator stores it with `moat secret set %s --hosts HOST[,HOST...]`)", c.Secret, err, c.Secret)
		}
		if err != nil {
			return fmt.Errorf("credential %s: %w", c.Secret, err)
		}
		if creds[i], err = WithinScope(c, info.Scope); err != nil {
			return err
		}
	}
	return nil
}
