package daemon

import (
	"context"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/storage"
)

// archives lists the storage's drive archives for the API (GET /v1/archives).
type archives struct{ s *storage.Store }

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
