package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// Checkpoint saves sandbox id's state as a snapshot named name ("" for none): with its
// processes' memory where the runtime can, otherwise its filesystem only (Method
// "filesystem", Reason says why).
func (c *Client) Checkpoint(ctx context.Context, id, name string) (*v1.Checkpoint, error) {
	var out v1.Checkpoint
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/checkpoint", v1.CheckpointRequest{Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
