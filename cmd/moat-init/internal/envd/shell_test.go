package envd

import "testing"

func TestShellFallback(t *testing.T) {
	for _, c := range []struct {
		path  string
		files []string
		want  string
	}{
		{"/bin/bash", []string{"/bin/bash", "/bin/sh"}, "/bin/bash"},
		{"/bin/bash", []string{"/bin/sh"}, "/bin/sh"},
		{"/bin/bash", nil, "/bin/bash"}, // nothing to fall back to: the start fails as before
		{"/usr/bin/bash", []string{"/bin/sh"}, "/usr/bin/bash"},
		{"/bin/ls", []string{"/bin/sh"}, "/bin/ls"},
	} {
		exists := func(p string) bool {
			for _, f := range c.files {
				if f == p {
					return true
				}
			}
			return false
		}
		if got := shellFallback(c.path, exists); got != c.want {
			t.Errorf("shellFallback(%q) with %q = %q, want %q", c.path, c.files, got, c.want)
		}
	}
}
