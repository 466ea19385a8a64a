package sandbox

import (
	"errors"
	"testing"

	"github.com/moatdev/moat/internal/errdefs"
)

func TestNormalizeAgentPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"agent/fix-login":          "refs/heads/agent/fix-login/",
		"agent/fix-login/":         "refs/heads/agent/fix-login/",
		"refs/heads/agent/x/":      "refs/heads/agent/x/",
		"refs/heads/bots/a/b":      "refs/heads/bots/a/b/",
		"refs/tags/x/":             "",
		"refs/heads/":              "",
		"refs/heads":               "",
		"":                         "",
		"agent/../main":            "",
		"agent/a b":                "",
		"agent/x.lock/":            "",
		"refs/notes/agent/x":       "",
		"refs/heads/agent/x//":     "",
		"agent/\u00e9t\u00e9/":     "",
		"refs/heads/agent/x/../y/": "",
	} {
		got, err := NormalizeAgentPrefix(in)
		if want == "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("NormalizeAgentPrefix(%q) = %q, %v; want invalid argument", in, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("NormalizeAgentPrefix(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	sb := &Sandbox{ID: "sb-0123456789ab"}
	if got := sb.GitPrefix(); got != "refs/heads/agent/sb-0123456789ab/" {
		t.Errorf("default prefix %q", got)
	}
}
