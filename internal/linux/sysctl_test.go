package linux

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadCount: a count, one beyond int64 (fs.file-max may be ULONG_MAX) clamped, and
// what is not a count refused.
func TestReadCount(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]int64{"128\n": 128, "18446744073709551615\n": 1<<63 - 1, " 7 ": 7} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadCount(p); err != nil || got != want {
			t.Errorf("ReadCount(%q) = %d, %v; want %d", content, got, err, want)
		}
	}
	for _, content := range []string{"max\n", "-1\n", ""} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadCount(p); err == nil {
			t.Errorf("ReadCount(%q) accepted", content)
		}
	}
	if _, err := ReadCount(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file read as a count")
	}
}
