package apiserver

import (
	"context"

	"github.com/moatdev/moat/internal/sandbox"
)

// The fakes' side of Sandboxes.Touch and Acquire: no activity is recorded, nothing
// resumes on its own.

func (f *fakeSandboxes) Touch(string) {}

func (f *fakeSandboxes) Acquire(ctx context.Context, id string) (*sandbox.Sandbox, func(), error) {
	sb, err := f.Get(ctx, id)
	return sb, func() {}, err
}

func (s *storedSandboxes) Acquire(ctx context.Context, id string) (*sandbox.Sandbox, func(), error) {
	sb, err := s.Get(ctx, id)
	return sb, func() {}, err
}
