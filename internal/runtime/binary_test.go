package runtime

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestCandidates(t *testing.T) {
	got := Candidates("runc", "/usr/local/lib/moat", "/usr/local/bin:relative:/usr/sbin:/opt/x")
	var paths []string
	for _, c := range got {
		paths = append(paths, c.Source+":"+c.Path)
	}
	want := []string{
		"moat:/usr/local/lib/moat/runc",
		"system:/usr/local/bin/runc", // PATH order
		"system:/usr/sbin/runc",
		"system:/opt/x/runc",
		"system:/usr/local/sbin/runc", // then the system directories not in PATH
		"system:/usr/bin/runc",
	}
	if !slices.Equal(paths, want) {
		t.Errorf("Candidates:\n got %v\nwant %v", paths, want)
	}
	if c := Candidates("runc", "", ""); c[0].Source != SourceSystem {
		t.Errorf("no moat dir: %v", c)
	}
}

func TestChoose(t *testing.T) {
	moat := Candidate{Path: "/m/runc", Source: SourceMoat, Installed: true}
	broken := moat
	broken.Err = "exec format error"
	sys := Candidate{Path: "/usr/sbin/runc", Source: SourceSystem, Installed: true}
	missing := Candidate{Path: "/usr/bin/runc", Source: SourceSystem}
	for _, tc := range []struct {
		name    string
		cs      []Candidate
		want    string
		skipped int
		ok      bool
	}{
		{"moat's build preferred", []Candidate{moat, sys}, "/m/runc", 0, true},
		{"missing ones are passed silently", []Candidate{missing, moat, sys}, "/m/runc", 0, true},
		{"a broken moat build falls back to the system's", []Candidate{broken, sys}, "/usr/sbin/runc", 1, true},
		{"only moat's, broken", []Candidate{broken, missing}, "", 1, false},
		{"none installed", []Candidate{missing}, "", 0, false},
		{"none at all", nil, "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, skipped, ok := Choose(tc.cs)
			if c.Path != tc.want || len(skipped) != tc.skipped || ok != tc.ok {
				t.Errorf("Choose = %q %v %v, want %q, %d skipped, %v", c.Path, skipped, ok, tc.want, tc.skipped, tc.ok)
			}
			if tc.skipped > 0 && skipped[0].Reason != "exec format error" {
				t.Errorf("skipped reason %q", skipped[0].Reason)
			}
		})
	}
}

// writeExe writes an executable script.
func writeExe(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestSelect: moat's directory before PATH; a preferred binary failing the check gives
// way to the next; the last installed one is not checked; unknown names are refused.
func TestSelect(t *testing.T) {
	dir := t.TempDir()
	moatDir, pathDir := filepath.Join(dir, "moat"), filepath.Join(dir, "bin")
	writeExe(t, filepath.Join(moatDir, "runc"), "echo moat")
	writeExe(t, filepath.Join(pathDir, "runc"), "echo path")
	t.Setenv("PATH", pathDir)
	ctx := context.Background()

	var checked []string
	pass := func(_ context.Context, p string) error { checked = append(checked, p); return nil }
	s, err := Select(ctx, "runc", moatDir, pass)
	if err != nil || s.Path != filepath.Join(moatDir, "runc") || s.Source != SourceMoat || len(s.Skipped) != 0 {
		t.Fatalf("Select = %+v, %v", s, err)
	}
	if len(s.Others) == 0 || s.Others[0].Path != filepath.Join(pathDir, "runc") {
		t.Errorf("Others = %+v", s.Others)
	}

	checked = nil
	failMoat := func(_ context.Context, p string) error {
		checked = append(checked, p)
		if p == filepath.Join(moatDir, "runc") {
			return errors.New("cannot run here")
		}
		return nil
	}
	s, err = Select(ctx, "runc", moatDir, failMoat)
	if err != nil || s.Path != filepath.Join(pathDir, "runc") || s.Source != SourceSystem {
		t.Fatalf("fallback: Select = %+v, %v", s, err)
	}
	if len(s.Skipped) != 1 || s.Skipped[0].Path != filepath.Join(moatDir, "runc") || s.Skipped[0].Reason != "cannot run here" {
		t.Errorf("fallback: skipped %+v", s.Skipped)
	}
	// The last installed candidate is never checked (nothing to fall back to).
	if n := len(s.Others); n > 0 && slices.Contains(checked, s.Others[n-1].Path) {
		t.Errorf("checked %v, including the last candidate", checked)
	}

	// Without moat's directory, PATH's binary.
	if p, err := AvailableIn("runc", ""); err != nil || p != filepath.Join(pathDir, "runc") {
		t.Errorf("AvailableIn(runc, \"\") = %q, %v", p, err)
	}
	if p, err := AvailableIn("runc", moatDir); err != nil || p != filepath.Join(moatDir, "runc") {
		t.Errorf("AvailableIn(runc, moat) = %q, %v", p, err)
	}
	// A non-executable file is not a candidate.
	if err := os.Chmod(filepath.Join(moatDir, "runc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, _ := AvailableIn("runc", moatDir); p == filepath.Join(moatDir, "runc") {
		t.Errorf("a non-executable file was chosen")
	}
	if _, err := Select(ctx, "docker", moatDir, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("unknown runtime: %v", err)
	}
}
