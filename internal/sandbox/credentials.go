package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/moatdev/moat/internal/egress/intercept"
	"github.com/moatdev/moat/internal/egress/policy"
	"github.com/moatdev/moat/internal/errdefs"
	"github.com/moatdev/moat/internal/secrets"
	"github.com/moatdev/moat/internal/tokens"
)

// Credential binds a stored secret to the hosts it may be sent to: "HOST", "*.DOMAIN" or
// either with ":PORT" (without a port: 443, and 80 for plain HTTP bindings). The sandbox
// never holds the secret: with a placeholder binding its environment variable Secret holds
// Placeholder, which the egress proxy replaces with the real value in requests to the
// bound hosts only, and there only in PlaceholderHeader ("Bearer PH", "PH", Basic
// credentials, ...); with a header binding the proxy sets Header (Template with
// "{{value}}" filled in) on requests to them. Either way the proxy terminates TLS to those
// hosts with the sandbox's own CA, on every port (MatchesName): the value is scrubbed from
// the responses of the other ports too.
type Credential struct {
	Secret     string   `json:"secret"`
	Hosts      []string `json:"hosts"`
	Header     string   `json:"header,omitempty"`
	Template   string   `json:"template,omitempty"`
	PathPrefix string   `json:"path_prefix,omitempty"`
	Methods    []string `json:"methods,omitempty"`
	// GitHub is set when Secret is a GitHub App's private key: the value injected is then
	// an installation token limited to this scope, minted by the daemon while the sandbox
	// runs and revoked when it stops.
	GitHub *GitHubScope `json:"github,omitempty"`
	// PlainHTTP lets the value into plain HTTP requests to the hosts too (in clear, to an
	// upstream nobody verifies): for internal services without TLS. Off by default.
	PlainHTTP bool `json:"plain_http,omitempty"`
	// Placeholder is generated at create for placeholder bindings; it is worthless
	// anywhere but at the bound hosts.
	Placeholder string `json:"placeholder,omitempty"`
	// PlaceholderHeader is the header a placeholder binding's placeholder is swapped in
	// (empty: Authorization); the placeholder anywhere else reaches the host unchanged.
	PlaceholderHeader string `json:"placeholder_header,omitempty"`
	// Approve: every request the value would be injected into waits for a person's
	// approval (egress.AskCredential); denied or unanswered, it gets 403 and is not sent.
	Approve bool `json:"approve,omitempty"`
}

// GitHubScope is what the installation tokens of one sandbox may touch.
type GitHubScope struct {
	Repositories []string          `json:"repositories"`
	Permissions  map[string]string `json:"permissions"`
}

// validateCredentials checks bindings and gives placeholder bindings their placeholder.
func validateCredentials(creds []Credential) error {
	seen := map[string]bool{}
	for i := range creds {
		c := &creds[i]
		where := fmt.Sprintf("credential %q", c.Secret)
		if err := secrets.CheckName(c.Secret); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if len(c.Hosts) == 0 {
			return fmt.Errorf("%s: bind it to at least one host: %w", where, errdefs.ErrInvalidArgument)
		}
		for j, h := range c.Hosts {
			n, err := secrets.NormalizeHost(h)
			if err != nil {
				return fmt.Errorf("%s: %v: %w", where, err, errdefs.ErrInvalidArgument)
			}
			c.Hosts[j] = n
		}
		if c.PathPrefix != "" && !policy.CleanHTTPPath(c.PathPrefix) {
			return fmt.Errorf("%s: path prefix %q must start with / and have no empty, '.' or '..' segment, backslash or encoded '/', '\\' or '.': %w", where, c.PathPrefix, errdefs.ErrInvalidArgument)
		}
		for _, m := range c.Methods {
			if !policy.IsMethod(m) {
				return fmt.Errorf("%s: %q is not an HTTP method (upper case, e.g. GET): %w", where, m, errdefs.ErrInvalidArgument)
			}
		}
		if g := c.GitHub; g != nil {
			if len(g.Permissions) == 0 {
				g.Permissions = map[string]string{"contents": "read"}
			}
			if err := tokens.CheckScope(g.Repositories, g.Permissions); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
		switch {
		case c.Header == "" && c.Template != "":
			return fmt.Errorf("%s: a template needs a header: %w", where, errdefs.ErrInvalidArgument)
		case c.Header != "" && !intercept.IsToken(c.Header):
			return fmt.Errorf("%s: header name %q is invalid: %w", where, c.Header, errdefs.ErrInvalidArgument)
		case c.Header != "" && !strings.Contains(c.Template, "{{value}}"):
			return fmt.Errorf("%s: the header template must contain {{value}}: %w", where, errdefs.ErrInvalidArgument)
		case c.Header != "" && strings.ContainsAny(c.Template, "\r\n"):
			return fmt.Errorf("%s: the header template must be one line: %w", where, errdefs.ErrInvalidArgument)
		case c.PlaceholderHeader != "" && c.Header != "":
			return fmt.Errorf("%s: a placeholder header is for placeholder bindings; a header binding sets %s itself: %w", where, c.Header, errdefs.ErrInvalidArgument)
		case c.PlaceholderHeader != "" && !intercept.SwappableHeader(c.PlaceholderHeader):
			return fmt.Errorf("%s: %q is not a header a placeholder can be swapped in (a header name; not Host, Content-Length, Proxy-* or another that frames or routes the request): %w", where, c.PlaceholderHeader, errdefs.ErrInvalidArgument)
		}
		if c.Header == "" {
			if reservedEnv(c.Secret) {
				return fmt.Errorf("%s: %s is an environment variable the sandbox needs for itself; store the secret under another name: %w", where, c.Secret, errdefs.ErrInvalidArgument)
			}
			if seen[c.Secret] {
				return fmt.Errorf("%s is bound twice as an environment variable: %w", where, errdefs.ErrInvalidArgument)
			}
			seen[c.Secret] = true
			if c.Placeholder == "" {
				var b [24]byte
				_, _ = rand.Read(b[:])
				c.Placeholder = "moat-placeholder-" + hex.EncodeToString(b[:])
			}
		}
	}
	return nil
}

// reservedEnv reports whether name is an environment variable a placeholder must not
// take over: the basics of a login, the dynamic loader's, the trust variables moat sets,
// and moat's own.
func reservedEnv(name string) bool {
	switch name {
	case "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "PWD", "TMPDIR",
		"SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS":
		return true
	}
	return slices.Contains(bundleEnv(), name) || strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "MOAT_") || strings.HasPrefix(name, "LC_")
}

// MatchesHost reports whether the credential is bound to host (a normalized name) on
// port. A host entry without a port binds port 443 (HTTPS), and port 80 too when the
// binding allows plain HTTP; "HOST:PORT" binds that port only (hostPorts).
func (c Credential) MatchesHost(host string, port uint16) bool {
	for _, h := range c.Hosts {
		name, ports := hostPorts(h, c.PlainHTTP)
		if slices.Contains(ports, port) && nameMatches(name, host) {
			return true
		}
	}
	return false
}

// MatchesName reports whether the credential is bound to host (a normalized name) on
// some port: the proxy then terminates TLS to host on every port, and scrubs the value
// from responses even where MatchesHost says it is not sent.
func (c Credential) MatchesName(host string) bool {
	for _, h := range c.Hosts {
		name, _, _ := strings.Cut(h, ":")
		if nameMatches(name, host) {
			return true
		}
	}
	return false
}

// nameMatches reports whether the host name pattern name ("HOST", or "*.D" for the names
// under D) matches host.
func nameMatches(name, host string) bool {
	return name == host || strings.HasPrefix(name, "*.") && strings.HasSuffix(host, name[1:])
}

// bundleEnv are the trust variables pointed at the CA bundle (credentialEnv); a
// placeholder may not take their names (reservedEnv).
func bundleEnv() []string {
	return []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT", "NPM_CONFIG_CAFILE", "CARGO_HTTP_CAINFO"}
}

// credentialEnv adds the placeholders of env-var bindings to env and, when the sandbox has
// an interception CA, points the usual trust variables at the files moat-init writes
// (/etc/moat/ca-bundle.pem: the system roots and the CA; /etc/moat/ca.pem: the CA). The
// package managers' own variables are among them (pip, npm — whose cafile setting, if a
// config file has one, would replace Node's roots — and cargo), so that they work through
// the registries set, whose hosts moat inspects.
func credentialEnv(env map[string]string, creds []Credential, ca bool) map[string]string {
	for _, c := range creds {
		if c.Header == "" {
			env[c.Secret] = c.Placeholder
		}
	}
	if ca {
		for _, k := range bundleEnv() {
			env[k] = "/etc/moat/ca-bundle.pem"
		}
		env["NODE_EXTRA_CA_CERTS"] = "/etc/moat/ca.pem"
	}
	return env
}
