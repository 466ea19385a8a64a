package clusterfront

import (
	"context"
	"errors"
	"time"

	"github.com/moatdev/moat/internal/errdefs"
)

// Reap deletes, every few seconds until ctx ends, the Pods whose E2B timeout passed.
// Every replica reaps; a delete of a Pod already gone is not an error.
func (f *Front) Reap(ctx context.Context) {
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.prune(time.Now())
		pods, err := f.cfg.Kube.ListPods(ctx, f.cfg.Namespace, LabelFront+"=true")
		if err != nil {
			f.cfg.Log.Warn("listing Pods to reap", "err", err)
			continue
		}
		now := time.Now()
		for i := range pods {
			p := &pods[i]
			if p.Metadata.DeletionTimestamp != nil || !expired(p, now) {
				continue
			}
			grace := int64(1)
			if err := f.cfg.Kube.DeletePod(ctx, f.cfg.Namespace, p.Metadata.Name, &grace); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				f.cfg.Log.Warn("deleting an expired sandbox's Pod", "pod", p.Metadata.Name, "err", err)
				continue
			}
			id, _ := sandboxOf(p)
			f.forget(id)
			f.cfg.Log.Info("sandbox timed out", "id", id, "pod", p.Metadata.Name)
		}
	}
}

// prune drops cache entries past their time, so that the caches hold only sandboxes and
// nodes in use.
func (f *Front) prune(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, c := range f.routes {
		if now.Sub(c.at) >= routeTTL {
			delete(f.routes, id)
		}
	}
	for n, c := range f.nodes {
		if now.Sub(c.at) >= nodeTTL {
			delete(f.nodes, n)
		}
	}
}
