package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// Tiers lists the daemon's consequence tiers (GET /v1/tiers).
func (c *Client) Tiers(ctx context.Context) ([]v1.Tier, error) {
	var out []v1.Tier
	err := c.do(ctx, http.MethodGet, "/v1/tiers", nil, &out)
	return out, err
}

// Tier returns one tier (GET /v1/tiers/{name}).
func (c *Client) Tier(ctx context.Context, name string) (*v1.Tier, error) {
	var out v1.Tier
	if err := c.do(ctx, http.MethodGet, "/v1/tiers/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
