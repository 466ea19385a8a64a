package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/daemon"
)

func TestMetricsTokenFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	good := write("good", "0123456789abcdef-token\n", 0o600)
	for _, c := range []struct {
		name, file, wantErr string
	}{
		{"unset", "", ""},
		{"good", good, ""},
		{"missing", filepath.Join(dir, "nope"), "no such file"},
		{"readable by others", write("open", "0123456789abcdef-token\n", 0o644), "readable by group or others"},
		{"short", write("short", "abc\n", 0o600), "shorter than 16 bytes"},
		{"two lines", write("two", "0123456789abcdef\nsecond-line-here\n", 0o600), "white space"},
		{"a directory", dir, "not a regular file"},
	} {
		var cfg daemon.Config
		f := metricsServeFlags{tokenFile: c.file}
		err := f.apply(&cfg)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: err %v, want one saying %q", c.name, err, c.wantErr)
		case c.name == "good" && string(cfg.MetricsToken) != "0123456789abcdef-token":
			t.Errorf("token read as %q", cfg.MetricsToken)
		}
	}
}
