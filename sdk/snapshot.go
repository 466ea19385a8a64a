package sdk

import (
	"context"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

// Snapshot captures sandbox id's filesystem as a snapshot named name ("" for none).
func (c *Client) Snapshot(ctx context.Context, id, name string) (*v1.Snapshot, error) {
	var sn v1.Snapshot
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/snapshot", v1.SnapshotRequest{Name: name}, &sn); err != nil {
		return nil, err
	}
	return &sn, nil
}

// Snapshots lists the snapshots, oldest first.
func (c *Client) Snapshots(ctx context.Context) ([]v1.Snapshot, error) {
	var out []v1.Snapshot
	err := c.do(ctx, http.MethodGet, "/v1/snapshots", nil, &out)
	return out, err
}

// DeleteSnapshot removes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil, nil)
}

// Restore puts sandbox id's filesystem back to snapshot snap in place.
func (c *Client) Restore(ctx context.Context, id, snap string) (*v1.Sandbox, error) {
	var sb v1.Sandbox
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/restore", v1.RestoreRequest{Snapshot: snap}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// Fork makes count new sandboxes from sandbox id's current state.
func (c *Client) Fork(ctx context.Context, id string, count int) (*v1.ForkReport, error) {
	return c.ForkWith(ctx, id, v1.ForkRequest{Count: count})
}

// ForkWith makes the forks req asks for (Lazy: stopped, each started by its first use).
func (c *Client) ForkWith(ctx context.Context, id string, req v1.ForkRequest) (*v1.ForkReport, error) {
	var rep v1.ForkReport
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id)+"/fork", req, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}
