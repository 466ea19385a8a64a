package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/moatdev/moat/internal/doctor"
	"github.com/moatdev/moat/internal/storage"
)

// openDrivePool mounts the drive pool when one is configured or was made before.
func openDrivePool(ctx context.Context, stor *storage.Store, cfg Config) error {
	_, err := os.Stat(filepath.Join(cfg.DataDir, storage.PoolFile))
	exists := err == nil
	if !exists && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !exists && cfg.DrivePool == 0 {
		return nil
	}
	if err := stor.OpenPool(ctx, cfg.DrivePool); err != nil {
		return fmt.Errorf("drive pool: %w", err)
	}
	return nil
}

// snapshotCheck is the doctor's line about snapshots: copy-free (reflink) or copying.
func snapshotCheck(stor *storage.Store) doctor.Check {
	c := doctor.Check{Name: "snapshots and forks"}
	if stor.CanReflink() {
		c.OK = true
		c.Detail = "copy-free: drives are cloned (reflink), a snapshot or fork costs the same for any workspace size"
		return c
	}
	c.Detail = "copying: the drives directory cannot clone files, so a snapshot or fork copies the drive's data (its cost grows with the workspace)"
	if err := storage.HasMkfsXFS(); err != nil {
		c.Fix = "apt-get install xfsprogs (or `make deps`), then run the daemon with --drive-pool SIZE"
	} else {
		c.Fix = "run the daemon with --drive-pool SIZE (an XFS pool with reflink in the data directory)"
	}
	return c
}

// KillFailpointEnv names a failpoint of snapshot and fork (tests): the daemon kills itself
// with SIGKILL when it reaches it, to show that a crash there leaves nothing half-made.
const KillFailpointEnv = "MOAT_FAILPOINT_KILL"

// killFailpoint returns the failpoint hook MOAT_FAILPOINT_KILL asks for (nil: none).
func killFailpoint(log *slog.Logger) func(string) {
	point := os.Getenv(KillFailpointEnv)
	if point == "" {
		return nil
	}
	log.Warn("test failpoint armed: the daemon kills itself when it reaches it", "point", point)
	return func(p string) {
		if p == point {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // never returns
		}
	}
}
