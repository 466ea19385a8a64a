package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// SetSecret stores value as the daemon's secret name, replacing any value it had. Names
// follow ^[A-Z_][A-Z0-9_]{0,63}$; values are 1 byte to 64 KiB. Only the daemon's unix
// socket serves secrets, and no call returns a value.
func (c *Client) SetSecret(ctx context.Context, name, value string) error {
	return c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), v1.SetSecretRequest{Value: value}, nil)
}

// SetGitHubApp stores keyPEM, the private key of the GitHub App installation app, as the
// daemon's secret name. Bindings of it (v1.Credential.GitHub) get installation tokens
// limited to their repositories and permissions, minted by the daemon.
func (c *Client) SetGitHubApp(ctx context.Context, name, keyPEM string, app v1.GitHubApp) error {
	return c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), v1.SetSecretRequest{Value: keyPEM, GitHubApp: &app}, nil)
}

// Secrets lists the daemon's secrets: names and dates, sorted by name.
func (c *Client) Secrets(ctx context.Context) ([]v1.SecretInfo, error) {
	var out []v1.SecretInfo
	err := c.do(ctx, http.MethodGet, "/v1/secrets", nil, &out)
	return out, err
}

// DeleteSecret removes the daemon's secret name; ErrNotFound when there is none.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil, nil)
}
