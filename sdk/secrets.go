package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// SetSecret stores value as the daemon's secret name, replacing any value it had. Names
// follow ^[A-Z_][A-Z0-9_]{0,63}$; values are 1 byte to 64 KiB. scope is where the value may
// be sent; nil keeps the scope the secret has (a new secret then has none and cannot be
// bound until SetSecretScope). Only the daemon's unix socket serves secrets, and no call
// returns a value.
func (c *Client) SetSecret(ctx context.Context, name, value string, scope *v1.SecretScope) error {
	return c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), v1.SetSecretRequest{Value: value, Scope: scope}, nil)
}

// SetGitHubApp stores keyPEM, the private key of the GitHub App installation app, as the
// daemon's secret name, with scope as SetSecret. Bindings of it (v1.Credential.GitHub) get
// installation tokens limited to their repositories and permissions, minted by the daemon.
func (c *Client) SetGitHubApp(ctx context.Context, name, keyPEM string, app v1.GitHubApp, scope *v1.SecretScope) error {
	return c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), v1.SetSecretRequest{Value: keyPEM, GitHubApp: &app, Scope: scope}, nil)
}

// SetSecretScope replaces the scope of the daemon's secret name, keeping its value.
// Bindings made afterwards must lie within it; running sandboxes' bindings outside it are
// no longer injected from their next connection on.
func (c *Client) SetSecretScope(ctx context.Context, name string, scope v1.SecretScope) error {
	return c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name)+"/scope", scope, nil)
}

// Secrets lists the daemon's secrets: names, dates, kinds, scopes and bindings, sorted by
// name.
func (c *Client) Secrets(ctx context.Context) ([]v1.SecretInfo, error) {
	var out []v1.SecretInfo
	err := c.do(ctx, http.MethodGet, "/v1/secrets", nil, &out)
	return out, err
}

// DeleteSecret removes the daemon's secret name; ErrNotFound when there is none.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil, nil)
}
