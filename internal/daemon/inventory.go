package daemon

import (
	"context"

	"github.com/moatdev/moat/internal/inventory"
	"github.com/moatdev/moat/internal/storage"
)

// templateScanner serves GET /v1/inventory?scan=true: a template's default user and
// set-id programs, read from its layers.
type templateScanner struct{ s *storage.Store }

func (t templateScanner) ScanTemplate(ctx context.Context, name string) (string, []string, error) {
	tpl, err := t.s.Template(ctx, name)
	if err != nil {
		return "", nil, err
	}
	setid, err := inventory.ScanSetID(ctx, tpl)
	return tpl.User, setid, err
}
