package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/moatdev/moat/internal/errdefs"
)

// repoLayerOf returns the layer to mount at /workspace when sandbox sb starts again: the
// one recorded at create (so the workspace keeps its base even after the user's
// repository moved on), or, for a record without one or a layer that is gone, the layer of
// the repository's current HEAD as before.
func (m *Manager) repoLayerOf(ctx context.Context, sb *Sandbox) ([]Layer, *Layer, error) {
	if sb.Repo == "" {
		return nil, nil, nil
	}
	if l := sb.RepoLayer; l != nil {
		if fi, err := os.Stat(l.Path); err == nil && fi.IsDir() {
			return []Layer{*l}, l, nil
		}
		m.log.Warn("the repository layer of the sandbox is gone; using the repository's HEAD", "sandbox", sb.ID, "layer", l.ID)
	}
	layer, err := m.storage.RepoLayer(ctx, sb.Repo)
	if err != nil {
		return nil, nil, fmt.Errorf("preparing repository %s: %w", sb.Repo, err)
	}
	return []Layer{layer}, &layer, nil
}

// WithRootfs calls fn with sandbox id's root filesystem as the host sees it (the merged
// overlay its processes see, opened as an os.Root so that no link leads out of it). A
// running or paused sandbox's is mounted already; a stopped sandbox's is mounted for fn
// (its layers plain, not idmapped) and unmounted after, with the run directory a stop
// leaves absent (a daemon that dies meanwhile leaves it to Reconcile, which tears a stopped
// sandbox's leftovers down). It holds the sandbox's lock throughout: the sandbox is not
// started, stopped or deleted under fn (which should therefore be bounded). A sandbox in
// another state is errdefs.ErrConflict.
func (m *Manager) WithRootfs(ctx context.Context, id string, fn func(sb *Sandbox, root *os.Root) error) (err error) {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return err
	}
	p := m.paths(id)
	switch {
	case sb.State == StateRunning || sb.State == StatePaused:
	case sb.State == StateStopped && !sb.Provisioning:
		if err := m.mountStopped(ctx, sb); err != nil {
			return err
		}
		defer func() {
			uerr := m.storage.Unmount(context.WithoutCancel(ctx), id, p.rootfs)
			if uerr == nil {
				uerr = os.RemoveAll(p.dir)
			}
			if uerr != nil {
				m.log.Error("unmounting a stopped sandbox's root filesystem after reading it", "sandbox", id, "err", uerr)
				if err == nil {
					err = uerr
				}
			}
		}()
	default:
		return fmt.Errorf("sandbox %s is %s: its workspace cannot be read now: %w", id, sb.State, errdefs.ErrConflict)
	}
	if !mounted(p.rootfs) {
		return fmt.Errorf("the root filesystem of sandbox %s is not mounted: %w", id, errdefs.ErrConflict)
	}
	root, err := os.OpenRoot(p.rootfs)
	if err != nil {
		return fmt.Errorf("opening the root filesystem of sandbox %s: %w", id, err)
	}
	defer root.Close()
	return fn(sb, root)
}

// mountStopped mounts stopped sandbox sb's root filesystem at its usual place (the caller
// holds its lock) with the layers it was made with.
func (m *Manager) mountStopped(ctx context.Context, sb *Sandbox) error {
	p := m.paths(sb.ID)
	if _, err := os.Lstat(p.dir); err == nil {
		return fmt.Errorf("sandbox %s is stopped but its run directory is still there (a teardown did not finish): %w", sb.ID, errdefs.ErrConflict)
	}
	tmpl, err := m.storage.Template(ctx, sb.Template)
	if err != nil {
		return err
	}
	var extra []Layer
	if sb.Repo != "" && sb.RepoLayer == nil {
		return fmt.Errorf("sandbox %s has no recorded repository layer: %w", sb.ID, errdefs.ErrConflict)
	}
	if sb.RepoLayer != nil {
		if fi, err := os.Stat(sb.RepoLayer.Path); err != nil || !fi.IsDir() {
			return fmt.Errorf("the repository layer of sandbox %s is gone: %w", sb.ID, errdefs.ErrNotFound)
		}
		extra = []Layer{*sb.RepoLayer}
	}
	if err := os.MkdirAll(filepath.Dir(p.dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(p.dir, 0o700); err != nil {
		return err
	}
	rootUID := sb.HostIDs().Host
	if !sb.InUserNS() {
		rootUID = 0
	}
	req := MountRequest{ID: sb.ID, Template: tmpl, Extra: extra, Target: p.rootfs, RootUID: rootUID}
	if err := m.storage.Mount(ctx, req); err != nil {
		_ = os.RemoveAll(p.dir)
		return fmt.Errorf("mounting the root filesystem of stopped sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// mounted reports whether dir is on another filesystem than its parent directory.
func mounted(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Lstat(dir, &a) != nil || syscall.Lstat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}
