package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// Archives lists the drive archives of sandboxes deleted after their unused period
// (operator only: the daemon's unix socket).
func (c *Client) Archives(ctx context.Context) ([]v1.Archive, error) {
	var out []v1.Archive
	err := c.do(ctx, http.MethodGet, "/v1/archives", nil, &out)
	return out, err
}

// DeleteArchive removes the drive archive of deleted sandbox id (operator only).
func (c *Client) DeleteArchive(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/archives/"+url.PathEscape(id), nil, nil)
}
