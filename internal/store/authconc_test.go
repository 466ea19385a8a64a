package store

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/moatdev/moat/internal/sandbox"
)

// TestAuthenticateConcurrent: many requests authenticating at once never wait on each
// other for the pool's few connections. Authenticate once held its grants query open while
// it read the approver flag and the owner, so callers holding every connection each waited
// for a second one until their requests timed out (the E2B suite stalled for minutes).
func TestAuthenticateConcurrent(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	key, k, err := st.CreateAPIKey(ctx, nil, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetAPIKeySecrets(ctx, k.ID, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 32*20)
	for range 32 {
		wg.Go(func() {
			for range 20 {
				c, err := st.Authenticate(ctx, key)
				if err == nil && len(c.Secrets) != 2 {
					t.Errorf("grants %v, want [a b]", c.Secrets)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Authenticate: %v", err)
	}
}
