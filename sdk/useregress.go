package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// SetUserEgress gives user name of sandbox id egress rules and credentials of its own,
// narrower than the sandbox's (PUT /v1/sandboxes/{id}/users/{name}/egress).
func (c *Client) SetUserEgress(ctx context.Context, id, name string, req v1.SetUserEgressRequest) (*v1.UserEgressResponse, error) {
	var out v1.UserEgressResponse
	if err := c.do(ctx, http.MethodPut, "/v1/sandboxes/"+url.PathEscape(id)+"/users/"+url.PathEscape(name)+"/egress", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ClearUserEgress gives user name of sandbox id the sandbox's egress again.
func (c *Client) ClearUserEgress(ctx context.Context, id, name string) (*v1.UserEgressResponse, error) {
	var out v1.UserEgressResponse
	if err := c.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id)+"/users/"+url.PathEscape(name)+"/egress", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
