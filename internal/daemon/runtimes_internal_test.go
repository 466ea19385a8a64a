package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCheckOncePerBoot: a binary that passed its check is not checked again on this boot
// until it changes; a failure is checked again every time.
func TestCheckOncePerBoot(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "runc")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, "run")
	calls := 0
	fail := false
	check := func(context.Context, string, string) error {
		calls++
		if fail {
			return errors.New("broken")
		}
		return nil
	}
	ctx := context.Background()
	for i, want := range []int{1, 1, 1} {
		if err := checkOncePerBoot(ctx, runDir, "runc", bin, check); err != nil || calls != want {
			t.Fatalf("start %d: %v, %d checks, want %d", i, err, calls, want)
		}
	}
	// A rebuilt binary (new modification time) is checked again.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(bin, later, later); err != nil {
		t.Fatal(err)
	}
	if err := checkOncePerBoot(ctx, runDir, "runc", bin, check); err != nil || calls != 2 {
		t.Fatalf("after a rebuild: %v, %d checks", err, calls)
	}
	// Another runtime name has its own memo.
	if err := checkOncePerBoot(ctx, runDir, "runsc", bin, check); err != nil || calls != 3 {
		t.Fatalf("runsc: %v, %d checks", err, calls)
	}
	// Failures are not remembered.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fail = true
	for i := range 2 {
		if err := checkOncePerBoot(ctx, runDir, "runc", bin, check); err == nil || calls != 4+i {
			t.Fatalf("failing %d: %v, %d checks", i, err, calls)
		}
	}
}
