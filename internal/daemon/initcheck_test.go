package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/testutil"
)

// TestCheckStaticELF: moat-init as `make build` builds it passes; a dynamically linked
// executable, a shared library, a script and truncated or empty files are refused with
// the reason.
func TestCheckStaticELF(t *testing.T) {
	static, err := os.ReadFile(filepath.Join(testutil.Binaries(t), "moat-init"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(glob string) []byte {
		t.Helper()
		m, _ := filepath.Glob(glob)
		if len(m) == 0 {
			t.Fatalf("no %s on this host", glob)
		}
		data, err := os.ReadFile(m[0])
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	cases := []struct {
		name string
		data []byte
		want string // "" = accepted
	}{
		{"static moat-init", static, ""},
		{"dynamic executable", read("/usr/bin/true"), "program interpreter"},
		{"shared library", read("/usr/lib/x86_64-linux-gnu/libm.so.6"), "libc.so.6"},
		{"script", []byte("#!/bin/sh\nexit 0\n"), "not an ELF"},
		{"truncated", static[:64], "ELF"},
		{"empty", nil, "not an ELF"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkStaticELF(c.data)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatal("accepted")
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// FuzzCheckStaticELF: any bytes give an answer, never a panic.
func FuzzCheckStaticELF(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Add([]byte("#!/bin/sh\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = checkStaticELF(data)
	})
}
