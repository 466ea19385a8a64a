package sdk

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	v1 "github.com/moatdev/moat/api/v1"
)

// Ports lists sandbox id's ports: those a process listens on and those opened for
// previews (docs/previews.md).
func (c *Client) Ports(ctx context.Context, id string) ([]v1.Port, error) {
	var out []v1.Port
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/ports", nil, &out)
	return out, err
}

// SetPort sets the preview visibility of a port (v1.PortPrivate, v1.PortToken,
// v1.PortPublic); a token port's answer carries its token.
func (c *Client) SetPort(ctx context.Context, id string, port int, visibility string) (v1.Port, error) {
	var out v1.Port
	err := c.do(ctx, http.MethodPut, "/v1/sandboxes/"+url.PathEscape(id)+"/ports/"+strconv.Itoa(port), v1.PortRequest{Visibility: visibility}, &out)
	return out, err
}

// ClosePort makes a port private again, revoking its token.
func (c *Client) ClosePort(ctx context.Context, id string, port int) (v1.Port, error) {
	var out v1.Port
	err := c.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id)+"/ports/"+strconv.Itoa(port), nil, &out)
	return out, err
}
