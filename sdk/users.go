package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// Agents as Linux users (issue 15).

// AddUser adds an account to a running sandbox.
func (c *Client) AddUser(ctx context.Context, id string, req v1.UserRequest) (*v1.User, error) {
	var out v1.User
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/users", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Users lists the accounts moat added to a sandbox and their shared groups.
func (c *Client) Users(ctx context.Context, id string) (*v1.UserList, error) {
	var out v1.UserList
	if err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/users", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveUser removes an account from a running sandbox: its processes are killed, its home
// removed unless keepHome.
func (c *Client) RemoveUser(ctx context.Context, id, name string, keepHome bool) error {
	p := "/v1/sandboxes/" + url.PathEscape(id) + "/users/" + url.PathEscape(name)
	if keepHome {
		p += "?keep_home=true"
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil)
}
