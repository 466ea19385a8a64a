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
// overlay its processes see, opened as an os.Root so that no link leads out of it), while
// the sandbox is running or paused. It holds the sandbox's lock meanwhile: the sandbox is
// not stopped, restarted or deleted under fn (which should therefore be bounded). A
// sandbox in another state is errdefs.ErrConflict: its root filesystem is not mounted.
func (m *Manager) WithRootfs(ctx context.Context, id string, fn func(sb *Sandbox, root *os.Root) error) error {
	unlock := m.lock(id)
	defer unlock()
	sb, err := m.store.Get(ctx, id)
	if err != nil {
		return err
	}
	if sb.State != StateRunning && sb.State != StatePaused {
		return fmt.Errorf("sandbox %s is %s: its workspace is readable only while it runs (moat start %s): %w", id, sb.State, id, errdefs.ErrConflict)
	}
	p := m.paths(id)
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

// mounted reports whether dir is on another filesystem than its parent directory.
func mounted(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Lstat(dir, &a) != nil || syscall.Lstat(filepath.Dir(dir), &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}
