package sdk

import (
	"context"
	"io"
	"net/http"
	"net/url"

	v1 "github.com/moatdev/moat/api/v1"
)

func changePath(id, cid string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id) + "/changes"
	if cid != "" {
		p += "/" + url.PathEscape(cid)
	}
	return p
}

// Changes lists the sandbox's change records (pushes the git gate decided), oldest
// first, without their reports.
func (c *Client) Changes(ctx context.Context, id string) ([]v1.Change, error) {
	var out []v1.Change
	err := c.do(ctx, http.MethodGet, changePath(id, ""), nil, &out)
	return out, err
}

// Change returns one change record with its full report.
func (c *Client) Change(ctx context.Context, id, cid string) (*v1.Change, error) {
	var out v1.Change
	if err := c.do(ctx, http.MethodGet, changePath(id, cid), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ChangePatch streams the change's patch (ref "": its first ref with a report); the
// caller closes it.
func (c *Client) ChangePatch(ctx context.Context, id, cid, ref string) (io.ReadCloser, error) {
	p := changePath(id, cid) + "/patch"
	if ref != "" {
		p += "?ref=" + url.QueryEscape(ref)
	}
	resp, err := c.send(ctx, http.MethodGet, p, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// ApproveChange applies a held change (the push goes to the remote now) and returns the
// record with the outcome: approved, or apply-failed with the remote's reason.
func (c *Client) ApproveChange(ctx context.Context, id, cid, reason string) (*v1.Change, error) {
	return c.decideChange(ctx, id, cid, "approve", reason)
}

// DenyChange discards a held change.
func (c *Client) DenyChange(ctx context.Context, id, cid, reason string) (*v1.Change, error) {
	return c.decideChange(ctx, id, cid, "deny", reason)
}

func (c *Client) decideChange(ctx context.Context, id, cid, action, reason string) (*v1.Change, error) {
	var out v1.Change
	if err := c.do(ctx, http.MethodPost, changePath(id, cid)+"/"+action, v1.DecideChangeRequest{Reason: reason}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
