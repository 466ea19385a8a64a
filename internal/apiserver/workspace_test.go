package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	v1 "github.com/moatdev/moat/api/v1"
	"github.com/moatdev/moat/internal/store"
	"github.com/moatdev/moat/sdk"
)

type fakeWorkspaces struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeWorkspaces) note(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeWorkspaces) Diff(_ context.Context, id string) (v1.WorkspaceDiff, error) {
	f.note("diff " + id)
	return v1.WorkspaceDiff{Sandbox: id, Report: &v1.ChangeReport{}}, nil
}

func (f *fakeWorkspaces) Patch(_ context.Context, id string, out io.Writer) error {
	f.note("patch " + id)
	_, err := io.WriteString(out, "diff --git a/x b/x\n")
	return err
}

func (f *fakeWorkspaces) Export(_ context.Context, id string, req v1.ExportRequest) (v1.ExportResult, error) {
	f.note(fmt.Sprintf("export %s %s %v", id, req.Branch, req.AllowProtected))
	return v1.ExportResult{Sandbox: id, Report: &v1.ChangeReport{}}, nil
}

// TestWorkspaceRoutes: diff, patch and export reach the daemon only for the sandbox's owner
// or the operator; allow_protected is the operator's alone; the patch is text/x-patch;
// without a Workspaces the routes answer 501.
func TestWorkspaceRoutes(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "moat.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sbs := &storedSandboxes{st: st}
	s := New(Deps{Sandboxes: sbs, Events: noEvents{}, Keys: storeKeys{st}, Log: slog.New(slog.DiscardHandler)})
	unix := httptest.NewServer(s.Handler(nil))
	defer unix.Close()
	tcp := httptest.NewServer(s.Handler(st))
	defer tcp.Close()
	ctx := context.Background()
	op := sdk.NewHTTP(unix.URL, "")
	sb, err := op.Create(ctx, v1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var se *sdk.Error
	if _, err := op.Diff(ctx, sb.ID); !errors.As(err, &se) || se.Status != http.StatusNotImplemented {
		t.Errorf("diff without workspaces: %v, want 501", err)
	}
	fw := &fakeWorkspaces{}
	s.SetWorkspaces(fw)

	keyA, _ := op.CreateAPIKey(ctx)
	keyB, _ := op.CreateAPIKey(ctx)
	a, b := sdk.NewHTTP(tcp.URL, keyA.Key), sdk.NewHTTP(tcp.URL, keyB.Key)
	if _, err := a.Create(ctx, v1.CreateSandboxRequest{Repo: "/root"}); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key A create with a host repo: %v, want permission denied", err)
	}
	if _, err := op.Create(ctx, v1.CreateSandboxRequest{Repo: "/root"}); err != nil {
		t.Errorf("operator create with a host repo: %v", err)
	}
	ofA, err := a.Create(ctx, v1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Diff(ctx, ofA.ID); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("key B diff of A's sandbox: %v", err)
	}
	if _, err := b.DiffPatch(ctx, ofA.ID); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("key B patch of A's sandbox: %v", err)
	}
	if _, err := b.Export(ctx, ofA.ID, v1.ExportRequest{}); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("key B export of A's sandbox: %v", err)
	}
	if _, err := a.Export(ctx, ofA.ID, v1.ExportRequest{AllowProtected: true}); !errors.Is(err, sdk.ErrPermissionDenied) {
		t.Errorf("key A allow_protected: %v, want permission denied", err)
	}
	if _, err := a.Diff(ctx, ofA.ID); err != nil {
		t.Error(err)
	}
	if _, err := a.Export(ctx, ofA.ID, v1.ExportRequest{Branch: "agent/a"}); err != nil {
		t.Error(err)
	}
	if _, err := op.Export(ctx, ofA.ID, v1.ExportRequest{AllowProtected: true}); err != nil {
		t.Error(err)
	}
	resp, err := http.Get(unix.URL + "/v1/sandboxes/" + ofA.ID + "/diff/patch")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/x-patch; charset=utf-8" || string(body) != "diff --git a/x b/x\n" {
		t.Errorf("patch: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	want := []string{"diff " + ofA.ID, "export " + ofA.ID + " agent/a false", "export " + ofA.ID + "  true", "patch " + ofA.ID}
	if !slices.Equal(fw.calls, want) {
		t.Errorf("calls %q, want %q", fw.calls, want)
	}
}
