package daemon

import (
	"github.com/moatdev/moat/internal/apiserver"
	"github.com/moatdev/moat/internal/store"
)

// PreviewsConfig configures port previews (docs/previews.md).
type PreviewsConfig struct {
	// Domain is the host-based previews' domain (<port>-<sandbox-id>.<domain>), with a
	// :port when the URLs carry one; "" leaves only the path-based /preview/<id>/<port>/.
	Domain string
	// AllowPublic lets ports be made public (no token, no key).
	AllowPublic bool
}

// startPreviews serves port previews through the sandboxes' gateway namespaces.
func (d *Daemon) startPreviews(st *store.Store) {
	d.api.SetPreviews(apiserver.PreviewConfig{Dialer: d.Manager, Store: st, Domain: d.cfg.Previews.Domain, AllowPublic: d.cfg.Previews.AllowPublic})
}
