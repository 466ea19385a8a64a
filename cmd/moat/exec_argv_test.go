package main

import (
	"slices"
	"testing"
)

func TestExecArgv(t *testing.T) {
	for _, c := range []struct {
		in   []string
		cmd  string
		argv []string
	}{
		{[]string{"make test && echo ok"}, "/bin/bash", []string{"-l", "-c", "--", "make test && echo ok"}},
		{[]string{"ls", "-l", "a b"}, "ls", []string{"-l", "a b"}},
		{[]string{"printf", "%s", "$HOME"}, "printf", []string{"%s", "$HOME"}},
	} {
		cmd, argv := execArgv(c.in)
		if cmd != c.cmd || !slices.Equal(argv, c.argv) {
			t.Errorf("execArgv(%q) = %q %q, want %q %q", c.in, cmd, argv, c.cmd, c.argv)
		}
	}
}
