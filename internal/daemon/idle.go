package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/storage"
	"github.com/moatdev/moat/internal/store"
)

// archives serves the storage's drive archives to the API (GET /v1/archives,
// DELETE /v1/archives/{id}) and removes those older than the daemon's --archive-keep.
type archives struct {
	s   *storage.Store
	st  *store.Store
	log *slog.Logger
}

func (a archives) Archives(context.Context) ([]v1.Archive, error) {
	list, err := a.s.Archives()
	if err != nil {
		return nil, err
	}
	out := make([]v1.Archive, 0, len(list))
	for _, x := range list {
		out = append(out, v1.Archive{ID: x.ID, Path: x.Path, Bytes: x.Bytes, Time: x.Time})
	}
	return out, nil
}

func (a archives) DeleteArchive(ctx context.Context, id string) error {
	if err := a.s.DeleteArchive(id); err != nil {
		return err
	}
	a.record(ctx, id, "the operator removed it")
	return nil
}

// expire removes the archives written more than keep before now (keep ≤ 0: none).
func (a archives) expire(ctx context.Context, now time.Time, keep time.Duration) {
	if keep <= 0 || a.s == nil {
		return
	}
	gone, err := a.s.ExpireArchives(now.Add(-keep))
	if err != nil {
		a.log.Error("removing expired drive archives", "err", err)
	}
	for _, x := range gone {
		a.log.Info("drive archive expired", "sandbox", x.ID, "written", x.Time, "bytes", x.Bytes)
		a.record(ctx, x.ID, fmt.Sprintf("kept for --archive-keep %s", keep))
	}
}

// record adds an "archive_removed" event to the deleted sandbox's log (its events outlive
// it), so that `moat events ID` says where its files went.
func (a archives) record(ctx context.Context, id, why string) {
	if a.st == nil {
		return
	}
	if err := a.st.AddEvent(ctx, id, "archive_removed", "drive archive removed: "+why); err != nil {
		a.log.Warn("recording an archive removal", "sandbox", id, "err", err)
	}
}
