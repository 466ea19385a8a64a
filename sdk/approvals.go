package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// AskApproval asks before a tool call: a pending tool approval of the sandbox (201).
func (c *Client) AskApproval(ctx context.Context, req v1.AskApprovalRequest) (*v1.Approval, error) {
	var out v1.Approval
	if err := c.do(ctx, http.MethodPost, "/v1/approvals", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Approvals lists the approvals the caller may see that match the filters ("": any).
func (c *Client) Approvals(ctx context.Context, state, sandbox, kind string) ([]v1.Approval, error) {
	q := url.Values{}
	for k, v := range map[string]string{"state": state, "sandbox": sandbox, "kind": kind} {
		if v != "" {
			q.Set(k, v)
		}
	}
	p := "/v1/approvals"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var out []v1.Approval
	err := c.do(ctx, http.MethodGet, p, nil, &out)
	return out, err
}

// Approval returns one approval; with wait > 0 the daemon answers once it is decided or
// expired, or after wait (at most 5 minutes) as it is.
func (c *Client) Approval(ctx context.Context, id string, wait time.Duration) (*v1.Approval, error) {
	p := "/v1/approvals/" + url.PathEscape(id)
	if wait > 0 {
		p += "?wait=" + url.QueryEscape(wait.String())
	}
	var out v1.Approval
	if err := c.do(ctx, http.MethodGet, p, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WaitApproval long-polls approval id until it is no longer pending or ctx ends.
func (c *Client) WaitApproval(ctx context.Context, id string) (*v1.Approval, error) {
	for {
		a, err := c.Approval(ctx, id, 60*time.Second)
		if err != nil || a.State != "pending" {
			return a, err
		}
	}
}

// ApproveApproval approves approval id (scope "" or "once", or "sandbox").
func (c *Client) ApproveApproval(ctx context.Context, id string, req v1.DecideApprovalRequest) (*v1.Approval, error) {
	return c.decideApproval(ctx, id, "approve", req)
}

// DenyApproval denies approval id.
func (c *Client) DenyApproval(ctx context.Context, id, reason string) (*v1.Approval, error) {
	return c.decideApproval(ctx, id, "deny", v1.DecideApprovalRequest{Reason: reason})
}

func (c *Client) decideApproval(ctx context.Context, id, action string, req v1.DecideApprovalRequest) (*v1.Approval, error) {
	var out v1.Approval
	if err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/"+action, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
