package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moatdev/moat/internal/daemon"
)

// TestApprovalServeFlags: --approval-webhook needs an http(s) URL and a secret file of at
// least 16 bytes (whitespace trimmed); each flag alone is refused.
func TestApprovalServeFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(good, []byte("  0123456789abcdef-secret\n"), 0o600)
	_ = os.WriteFile(short, []byte("tooshort\n"), 0o600)
	var cfg daemon.Config
	f := approvalServeFlags{webhook: "https://bot.example/hook", secretFile: good}
	if err := f.apply(&cfg); err != nil || cfg.Approvals.WebhookURL != f.webhook || string(cfg.Approvals.WebhookSecret) != "0123456789abcdef-secret" {
		t.Fatalf("good flags: %v %+v", err, cfg.Approvals)
	}
	if err := (&approvalServeFlags{}).apply(&cfg); err != nil {
		t.Fatalf("no flags: %v", err)
	}
	for _, c := range []struct {
		f    approvalServeFlags
		want string
	}{
		{approvalServeFlags{webhook: "https://bot.example/hook"}, "needs --approval-webhook-secret"},
		{approvalServeFlags{secretFile: good}, "without --approval-webhook"},
		{approvalServeFlags{webhook: "ftp://x/y", secretFile: good}, "http:// or https://"},
		{approvalServeFlags{webhook: "bot.example", secretFile: good}, "http:// or https://"},
		{approvalServeFlags{webhook: "https://bot.example/hook", secretFile: short}, "shorter than 16"},
		{approvalServeFlags{webhook: "https://bot.example/hook", secretFile: filepath.Join(dir, "none")}, "no such file"},
	} {
		var cfg daemon.Config
		if err := c.f.apply(&cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.f, err, c.want)
		}
	}
}
