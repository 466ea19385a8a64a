package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// Usage reads the usage ledger (GET /v1/usage): rows grouped by by ("sandbox",
// "template", "api-key"; "" sandbox) over [since, until) (zero: unbounded / now). The
// operator sees every key's usage, an API key its own.
func (c *Client) Usage(ctx context.Context, since, until time.Time, by string) (*v1.UsageReport, error) {
	q := url.Values{}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	if !until.IsZero() {
		q.Set("until", until.UTC().Format(time.RFC3339Nano))
	}
	if by != "" {
		q.Set("by", by)
	}
	path := "/v1/usage"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out v1.UsageReport
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
