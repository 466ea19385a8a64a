package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// ListFiltered returns the sandboxes every filter matches ("name=NAME", "state=STATE",
// "template=TEMPLATE", "label=KEY", "label=KEY=VALUE"; none: all).
func (c *Client) ListFiltered(ctx context.Context, filters []string) ([]v1.Sandbox, error) {
	path := "/v1/sandboxes"
	if len(filters) > 0 {
		path += "?" + url.Values{"filter": filters}.Encode()
	}
	var out []v1.Sandbox
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// Prune deletes the caller's stopped sandboxes that req's filters match (with DryRun, only
// lists them).
func (c *Client) Prune(ctx context.Context, req v1.PruneRequest) (*v1.PruneResponse, error) {
	var out v1.PruneResponse
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/prune", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stats samples a running or paused sandbox (CPU over 200 ms, memory, drive, tasks,
// network counters).
func (c *Client) Stats(ctx context.Context, id string) (*v1.SandboxStats, error) {
	var out v1.SandboxStats
	if err := c.do(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/stats", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
