package daemon

import (
	"context"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/store"
)

// events adapts the store's event log to the API.
type events struct{ st *store.Store }

func (e events) Events(ctx context.Context, id string) ([]v1.Event, error) {
	if _, err := e.st.Get(ctx, id); err != nil {
		return nil, err
	}
	evs, err := e.st.Events(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]v1.Event, 0, len(evs))
	for _, ev := range evs {
		out = append(out, v1.Event{Seq: ev.Seq, Time: ev.Time, Kind: ev.Kind, Detail: ev.Detail})
	}
	return out, nil
}

// apiKeys adapts the store's API keys to the API.
type apiKeys struct{ st *store.Store }

func (a apiKeys) CreateAPIKey(ctx context.Context) (v1.APIKey, error) {
	key, k, err := a.st.CreateAPIKey(ctx)
	if err != nil {
		return v1.APIKey{}, err
	}
	return v1.APIKey{ID: k.ID, Key: key, Created: k.Created}, nil
}

func (a apiKeys) ListAPIKeys(ctx context.Context) ([]v1.APIKey, error) {
	keys, err := a.st.ListAPIKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]v1.APIKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, v1.APIKey{ID: k.ID, Created: k.Created})
	}
	return out, nil
}

func (a apiKeys) DeleteAPIKey(ctx context.Context, id string) error { return a.st.DeleteAPIKey(ctx, id) }
