package sdk

import (
	"context"
	"fmt"
	"net/http"

	v1 "github.com/moatdev/moat/api/v1"
)

// Inventory returns what each sandbox, template and API key the caller may see can
// reach, with flags of what widens access (GET /v1/inventory). withHost adds the host's
// runtimes, isolation levels and kernel features (the doctor's checks, which take a few
// seconds).
func (c *Client) Inventory(ctx context.Context, withHost bool) (*v1.Inventory, error) {
	var inv v1.Inventory
	path := "/v1/inventory?host=false"
	if withHost {
		path = "/v1/inventory"
	}
	if err := c.do(ctx, http.MethodGet, path, nil, &inv); err != nil {
		return nil, err
	}
	return &inv, nil
}

// InventoryWith is Inventory with the query options: host (the host section) and scan
// (the templates' default users and set-id programs; the operator only, slow for big
// templates).
func (c *Client) InventoryWith(ctx context.Context, host, scan bool) (*v1.Inventory, error) {
	var inv v1.Inventory
	path := fmt.Sprintf("/v1/inventory?host=%t&scan=%t", host, scan)
	if err := c.do(ctx, http.MethodGet, path, nil, &inv); err != nil {
		return nil, err
	}
	return &inv, nil
}
