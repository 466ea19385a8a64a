package sdk

import (
	"context"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
)

// Archives lists the drive archives of sandboxes deleted after their unused period
// (operator only: the daemon's unix socket).
func (c *Client) Archives(ctx context.Context) ([]v1.Archive, error) {
	var out []v1.Archive
	err := c.do(ctx, http.MethodGet, "/v1/archives", nil, &out)
	return out, err
}
