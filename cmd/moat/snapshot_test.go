package main

import (
	"strings"
	"testing"
	"time"

	v1 "github.com/moatdev/moat/api/v1"
)

// The snapshot tree: a snapshot of a sandbox made from another snapshot is printed under
// it; one whose parent was removed is a root.
func TestPrintSnapshotTree(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	list := []v1.Snapshot{
		{ID: "snap-child", Sandbox: "sb-2", Parent: "snap-root", CreatedAt: t0.Add(time.Minute), SizeBytes: 1 << 30, Method: "reflink"},
		{ID: "snap-root", Name: "base", Sandbox: "sb-1", CreatedAt: t0, SizeBytes: 1 << 30, Method: "reflink"},
		{ID: "snap-grandchild", Sandbox: "sb-3", Parent: "snap-child", CreatedAt: t0.Add(2 * time.Minute), SizeBytes: 1 << 30, Method: "reflink"},
		{ID: "snap-orphan", Sandbox: "sb-4", Parent: "snap-gone", CreatedAt: t0.Add(3 * time.Minute), SizeBytes: 256 << 20, Method: "copy"},
	}
	var b strings.Builder
	printSnapshotTree(&b, list)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{"SNAPSHOT", "snap-root", "└ snap-child", "  └ snap-grandchild", "snap-orphan"}
	if len(lines) != len(want) {
		t.Fatalf("tree:\n%s", b.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q\n%s", i, lines[i], w, b.String())
		}
	}
	if !strings.Contains(lines[1], "base") || !strings.Contains(lines[4], "256M") || !strings.Contains(lines[4], "copy") {
		t.Errorf("columns:\n%s", b.String())
	}
}
