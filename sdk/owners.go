package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// SetVisibility makes sandbox id v1.VisibilityPrivate or v1.VisibilityTeam (its owner, an
// admin key or the operator may; a team member gets ErrPermissionDenied).
func (c *Client) SetVisibility(ctx context.Context, id, visibility string) (*v1.Sandbox, error) {
	var out v1.Sandbox
	if err := c.do(ctx, http.MethodPut, "/v1/sandboxes/"+url.PathEscape(id)+"/visibility", v1.VisibilityRequest{Visibility: visibility}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
