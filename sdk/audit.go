package sdk

import (
	"context"
	"net/url"
	"strconv"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// Audit returns audit records with seq > after, of sandbox ("": every one), from since
// (zero: the first), at most limit (0: all), oldest first. Operator only (the socket).
func (c *Client) Audit(ctx context.Context, sandbox string, since time.Time, after int64, limit int) ([]v1.AuditRecord, error) {
	q := url.Values{}
	if sandbox != "" {
		q.Set("sandbox", sandbox)
	}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out []v1.AuditRecord
	return out, c.do(ctx, "GET", "/v1/audit?"+q.Encode(), nil, &out)
}

// VerifyAudit checks the daemon's audit chain and its signed checkpoints.
func (c *Client) VerifyAudit(ctx context.Context) (v1.AuditVerification, error) {
	var out v1.AuditVerification
	return out, c.do(ctx, "GET", "/v1/audit/verify", nil, &out)
}
